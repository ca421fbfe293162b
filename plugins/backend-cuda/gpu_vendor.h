/*
 * gpu_vendor.h - the one place where backend-cuda and backend-rocm differ:
 * vt_gpu_* names mapped to the CUDA runtime (default) or, with -DVT_GPU_HIP,
 * to the HIP runtime. gpu_backend.cu uses only these names, so both plugins
 * are built from the same source.
 *
 * Only the .cu files (compiled by nvcc or hipcc) include this header; the C
 * side of the plugin (gpu_plugin.c) needs the two name macros only, which
 * gpu_internal.h repeats without pulling in a vendor header.
 *
 * Kernel code (gpu_ops.cu) uses plain CUDA C++ that hipcc also accepts
 * (<<<>>> launches, __shared__, __syncthreads, __fmul_rn ...), plus the macros
 * below for what differs: warp shuffles. Kernels treat a "warp" as 32 lanes
 * and shuffle with width 32, which is a whole warp on NVIDIA and a half (or
 * whole) wavefront on AMD, so the same code is right on both.
 */
#ifndef VT_GPU_VENDOR_H
#define VT_GPU_VENDOR_H

#ifdef VT_GPU_HIP

#include <hip/hip_runtime.h>

#define VT_GPU_RT "hip" /* prefix of the runtime's calls in messages: "hipMalloc" */

typedef hipError_t vt_gpu_error;
typedef hipDeviceProp_t vt_gpu_device_prop;
#define vt_gpu_success hipSuccess
#define vt_gpu_error_oom hipErrorOutOfMemory
#define vt_gpu_error_invalid_value hipErrorInvalidValue

#define vt_gpu_get_device_count hipGetDeviceCount
#define vt_gpu_set_device hipSetDevice
#define vt_gpu_get_device_properties hipGetDeviceProperties
#define vt_gpu_get_error_string hipGetErrorString
#define vt_gpu_get_last_error hipGetLastError
#define vt_gpu_malloc hipMalloc
#define vt_gpu_free hipFree
#define vt_gpu_host_alloc(p, n) hipHostMalloc((p), (n), hipHostMallocDefault)
#define vt_gpu_host_free hipHostFree
#define vt_gpu_memcpy hipMemcpy
#define vt_gpu_memcpy_async hipMemcpyAsync
#define vt_gpu_memcpy_h2d hipMemcpyHostToDevice
#define vt_gpu_memcpy_d2h hipMemcpyDeviceToHost
#define vt_gpu_memcpy_d2d hipMemcpyDeviceToDevice
#define vt_gpu_mem_get_info hipMemGetInfo
#define vt_gpu_device_synchronize hipDeviceSynchronize
#define vt_gpu_stream_synchronize hipStreamSynchronize
#define vt_gpu_driver_get_version hipDriverGetVersion
#define vt_gpu_runtime_get_version hipRuntimeGetVersion

/* butterfly shuffle among 32 lanes (every lane of the 32 must call it) */
/* the context's stream (blocking: ordered with the legacy stream's copies) and decode graphs */
typedef hipStream_t vt_gpu_stream;
typedef hipGraph_t vt_gpu_graph_t;
typedef hipGraphExec_t vt_gpu_graph_exec;
#define vt_gpu_stream_create(s) hipStreamCreateWithFlags((s), hipStreamDefault)
#define vt_gpu_stream_destroy hipStreamDestroy
/* the second copy queue (ahead copies): not ordered with the legacy stream */
#define vt_gpu_stream_create_nonblocking(s) hipStreamCreateWithFlags((s), hipStreamNonBlocking)
typedef hipEvent_t vt_gpu_event;
#define vt_gpu_event_create(e) hipEventCreateWithFlags((e), hipEventDisableTiming)
#define vt_gpu_event_destroy hipEventDestroy
#define vt_gpu_event_create_timed(e) hipEventCreate(e)
#define vt_gpu_event_elapsed hipEventElapsedTime
#define vt_gpu_event_record hipEventRecord
#define vt_gpu_stream_wait_event(s, e) hipStreamWaitEvent((s), (e), 0)
#define vt_gpu_stream_begin_capture(s) hipStreamBeginCapture((s), hipStreamCaptureModeThreadLocal)
#define vt_gpu_stream_end_capture hipStreamEndCapture
#define vt_gpu_graph_instantiate(e, g) hipGraphInstantiate((e), (g), NULL, NULL, 0)
#define vt_gpu_graph_exec_launch hipGraphLaunch
#define vt_gpu_graph_exec_destroy hipGraphExecDestroy
#define vt_gpu_graph_destroy hipGraphDestroy

#define VT_GPU_SHFL_XOR(v, m) __shfl_xor((v), (m), 32)
/* value of v in lane src (of the same 32) */
#define VT_GPU_SHFL(v, src) __shfl((v), (src), 32)

#else /* CUDA */

#include <cuda_runtime.h>

#define VT_GPU_RT "cuda" /* "cudaMalloc" */

typedef cudaError_t vt_gpu_error;
typedef cudaDeviceProp vt_gpu_device_prop;
#define vt_gpu_success cudaSuccess
#define vt_gpu_error_oom cudaErrorMemoryAllocation
#define vt_gpu_error_invalid_value cudaErrorInvalidValue

#define vt_gpu_get_device_count cudaGetDeviceCount
#define vt_gpu_set_device cudaSetDevice
#define vt_gpu_get_device_properties cudaGetDeviceProperties
#define vt_gpu_get_error_string cudaGetErrorString
#define vt_gpu_get_last_error cudaGetLastError
#define vt_gpu_malloc cudaMalloc
#define vt_gpu_free cudaFree
#define vt_gpu_host_alloc(p, n) cudaHostAlloc((p), (n), cudaHostAllocDefault)
#define vt_gpu_host_free cudaFreeHost
#define vt_gpu_memcpy cudaMemcpy
#define vt_gpu_memcpy_async cudaMemcpyAsync
#define vt_gpu_memcpy_h2d cudaMemcpyHostToDevice
#define vt_gpu_memcpy_d2h cudaMemcpyDeviceToHost
#define vt_gpu_memcpy_d2d cudaMemcpyDeviceToDevice
#define vt_gpu_mem_get_info cudaMemGetInfo
#define vt_gpu_device_synchronize cudaDeviceSynchronize
#define vt_gpu_stream_synchronize cudaStreamSynchronize
#define vt_gpu_driver_get_version cudaDriverGetVersion
#define vt_gpu_runtime_get_version cudaRuntimeGetVersion

/* butterfly shuffle among 32 lanes (every lane of the 32 must call it) */
/* the context's stream (blocking: ordered with the legacy stream's copies) and decode graphs */
typedef cudaStream_t vt_gpu_stream;
typedef cudaGraph_t vt_gpu_graph_t;
typedef cudaGraphExec_t vt_gpu_graph_exec;
#define vt_gpu_stream_create(s) cudaStreamCreateWithFlags((s), cudaStreamDefault)
#define vt_gpu_stream_destroy cudaStreamDestroy
/* the second copy queue (ahead copies): not ordered with the legacy stream */
#define vt_gpu_stream_create_nonblocking(s) cudaStreamCreateWithFlags((s), cudaStreamNonBlocking)
typedef cudaEvent_t vt_gpu_event;
#define vt_gpu_event_create(e) cudaEventCreateWithFlags((e), cudaEventDisableTiming)
#define vt_gpu_event_destroy cudaEventDestroy
#define vt_gpu_event_create_timed(e) cudaEventCreate(e)
#define vt_gpu_event_elapsed cudaEventElapsedTime
#define vt_gpu_event_record cudaEventRecord
#define vt_gpu_stream_wait_event(s, e) cudaStreamWaitEvent((s), (e), 0)
#define vt_gpu_stream_begin_capture(s) cudaStreamBeginCapture((s), cudaStreamCaptureModeThreadLocal)
#define vt_gpu_stream_end_capture cudaStreamEndCapture
#define vt_gpu_graph_instantiate(e, g) cudaGraphInstantiate((e), (g), 0)
#define vt_gpu_graph_exec_launch cudaGraphLaunch
#define vt_gpu_graph_exec_destroy cudaGraphExecDestroy
#define vt_gpu_graph_destroy cudaGraphDestroy

#define VT_GPU_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m), 32)
/* value of v in lane src (of the same 32) */
#define VT_GPU_SHFL(v, src) __shfl_sync(0xffffffffu, (v), (src), 32)

#endif

#endif

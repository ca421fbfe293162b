/*
 * gpu_internal.h - the seam between the two halves of backend-cuda /
 * backend-rocm:
 *
 *  - gpu_backend.cu (nvcc or hipcc, C++ with C linkage): everything that calls
 *    the vendor runtime - device count and names, contexts, device and pinned
 *    host memory, copies, the zero-fill kernel, the memory probe;
 *  - gpu_plugin.c (C11): the capability list, the vt_backend_api table and
 *    the plugin descriptor.
 *
 * The split keeps the vendor half free of vt/backend.h (whose vt/types.h uses
 * C99 array designators that C++ compilers reject) and the table in plain C
 * with designated initializers. This header includes only vt/status.h and
 * vt/plugin.h, which compile as C and C++.
 *
 * The functions below have exactly the signatures of the vt_backend_api
 * members of the same name (vt/backend.h), so the table points at them
 * directly; only init is split (gpu_plugin.c unpacks vt_backend_params).
 * Every failure sets host->set_error() with a message naming the runtime call,
 * the object and the byte count, and returns a vt_status:
 * VT_ERR_OUT_OF_MEMORY for an allocation the device cannot satisfy,
 * VT_ERR_INVALID_ARG for NULL pointers, VT_ERR_RANGE for a bad device index,
 * VT_ERR_IO for any other runtime error (driver, launch, copy).
 */
#ifndef VT_GPU_INTERNAL_H
#define VT_GPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "vt/plugin.h"
#include "vt/status.h"

/* Plugin name and the name the runtime's calls carry in messages. */
#ifdef VT_GPU_HIP
#define VT_GPU_PLUGIN_NAME "rocm"
#define VT_GPU_RUNTIME_NAME "HIP"
#else
#define VT_GPU_PLUGIN_NAME "cuda"
#define VT_GPU_RUNTIME_NAME "CUDA"
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vt_backend_ctx vt_backend_ctx; /* defined in gpu_backend.cu */

/* Devices the runtime sees now; 0 when the runtime reports an error
 * (no driver, no device). Never fails. */
int vt_gpu_device_count(void);

/* A context on `device` (0-based): selects it and creates the runtime's
 * context so that driver errors surface here. host: the core's table, used
 * for every later message. VT_ERR_RANGE naming the index and the count when
 * device is not in [0, device_count()). */
vt_status vt_gpu_init_device(int device, const vt_host_api *host, vt_backend_ctx **out);
void vt_gpu_shutdown(vt_backend_ctx *ctx);

/* Device memory (plain device allocation, never managed memory), 256-byte
 * aligned; bytes == 0 allocates one minimal block. */
vt_status vt_gpu_alloc(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out);
void vt_gpu_free_mem(vt_backend_ctx *ctx, void *ptr);

/* Synchronous copies: the data is at dst when they return. */
vt_status vt_gpu_copy_h2d(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
vt_status vt_gpu_copy_d2h(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
vt_status vt_gpu_copy_d2d(vt_backend_ctx *ctx, void *dst, const void *src, size_t bytes);
/* bytes of device memory at dst set to 0 by a kernel; complete on return. */
vt_status vt_gpu_memset_zero(vt_backend_ctx *ctx, void *dst, size_t bytes);
vt_status vt_gpu_synchronize(vt_backend_ctx *ctx);

/* Live free and total bytes of the context's device (cudaMemGetInfo /
 * hipMemGetInfo after selecting the device). */
vt_status vt_gpu_memory_probe(vt_backend_ctx *ctx, uint64_t *free_bytes, uint64_t *total_bytes);

/* Page-locked host memory (cudaHostAlloc / hipHostMalloc) for staging. */
vt_status vt_gpu_host_alloc_pinned(vt_backend_ctx *ctx, size_t bytes, const char *what, void **out);
void vt_gpu_host_free_pinned(vt_backend_ctx *ctx, void *ptr);

/* The device's name from its properties ("NVIDIA H200"); no context needed.
 * VT_ERR_RANGE when device is not in [0, device_count()). */
vt_status vt_gpu_device_name(int device, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif

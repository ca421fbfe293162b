# GPU backends (plugins/backend-cuda, plugins/backend-rocm): one test binary
# per plugin, test_gpu_cuda and test_gpu_rocm, from test_gpu_backends.c. What
# the plugins' CMake recorded (gpu_plugin_common.cmake) is baked in:
#   VT_GPU_TEST_BUILT     the plugin was built (else the test skips loudly, 77)
#   VT_GPU_TEST_REQUIRED  CMake ran with CI=true and found the toolchain: a
#                         plugin that was not built is then a failure
#   VT_GPU_TEST_WHY       why it was (not) built, for the message
# Without a device the tests check the zero-device contract (device_count() 0,
# `vt run --device <name>` refused); with one, memory, copies and the probe.
foreach(_vt_gpu cuda rocm)
  get_property(_vt_built GLOBAL PROPERTY VT_GPU_${_vt_gpu}_BUILT)
  get_property(_vt_req GLOBAL PROPERTY VT_GPU_${_vt_gpu}_REQUIRED)
  get_property(_vt_why GLOBAL PROPERTY VT_GPU_${_vt_gpu}_WHY)
  string(REPLACE ";" "," _vt_why "${_vt_why}")
  string(REPLACE "\"" "'" _vt_why "${_vt_why}")
  set(_vt_b 0)
  set(_vt_r 0)
  if(_vt_built)
    set(_vt_b 1)
  endif()
  if(_vt_req)
    set(_vt_r 1)
  endif()
  vt_add_test(test_gpu_${_vt_gpu} SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_gpu_backends.c
              LIBS vtcore LABELS "gpu" TIMEOUT 120)
  target_compile_definitions(test_gpu_${_vt_gpu} PRIVATE VT_GPU_TEST_NAME="${_vt_gpu}"
    VT_GPU_TEST_BUILT=${_vt_b} VT_GPU_TEST_REQUIRED=${_vt_r} VT_GPU_TEST_WHY="${_vt_why}")
  # `vt run -m <random test model> --device <name>` needs the command, the model plugin
  # and the random-weight test model (written by the top-level build)
  add_dependencies(test_gpu_${_vt_gpu} vt model-qwen35 random-model)
  if(_vt_built)
    add_dependencies(test_gpu_${_vt_gpu} backend-${_vt_gpu})
  endif()
  # a GPU platform keeps its expert cache in a 'device' store plugin
  if(TARGET store-device)
    add_dependencies(test_gpu_${_vt_gpu} store-device)
  endif()
endforeach()

# test_cuda_ops: every op of backend-cuda against backend-cpu's scalar
# reference (random, odd-sized, strided inputs), then the qwen35moe-tiny
# fixtures through the engine on device "cuda". Needs a CUDA device: without
# one (CI) it skips loudly (77); a plugin that should have been built under
# CI=true and was not fails, as above.
vt_add_test(test_cuda_ops SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_ops.c
            ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_ops_mixer.c ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_ops_models.c
            LIBS vtcore PkgConfig::CJSON ${CMAKE_DL_LIBS} LABELS "gpu;fixtures" TIMEOUT 300)
vt_cuda_test_definitions(test_cuda_ops)
add_dependencies(test_cuda_ops backend-cpu model-qwen35)
if(TARGET store-device)
  add_dependencies(test_cuda_ops store-device)
endif()

# test_cuda_quant: backend-cuda's weight kernels for every block type (Q4_0 ..
# MXFP4) against backend-cpu's reference dequantiser vt_cpu_dequant_row
# (linked from the static vt_cpu_kernels): quant-zoo get_rows bit for bit,
# one-hot mat_mul exact on the decode, SGEMM and tiled paths, random-weight
# mat_mul within the fp32-summation bound. The capability check runs without a
# device; everything else needs a CUDA device and skips loudly (77) without
# one; a plugin that should have been built under CI=true and was not fails.
vt_add_test(test_cuda_quant SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_quant.c
            ${CMAKE_CURRENT_SOURCE_DIR}/test_cuda_quant_int8.c
            LIBS vt_cpu_kernels vtcore ${CMAKE_DL_LIBS} LABELS "gpu;cuda;fixtures" TIMEOUT 300)
vt_cuda_test_definitions(test_cuda_quant)

# bench/bench_gpu_matvec: a GPU backend's mat_mul per weight type (decode GB/s
# against copy_d2d's bandwidth, prefill TFLOP/s). Built, not run as a test.
add_executable(bench_gpu_matvec ${CMAKE_SOURCE_DIR}/bench/bench_gpu_matvec.c)
target_include_directories(bench_gpu_matvec PRIVATE ${CMAKE_SOURCE_DIR}/core/include ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(bench_gpu_matvec PRIVATE ${CMAKE_DL_LIBS})

# test_moe_ops_cuda: backend-cuda's moe_route and moe_ffn against a double
# evaluation and backend-cpu's scalar moe_ffn (tests/test_moe_ops.c); needs a
# CUDA device, skips loudly (77) without one.
vt_add_test(test_moe_ops_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_moe_ops.c
            LIBS vtcore ${CMAKE_DL_LIBS} LABELS gpu TIMEOUT 300)
target_compile_definitions(test_moe_ops_cuda PRIVATE VT_MOE_TEST_BACKEND="cuda")
vt_cuda_test_definitions(test_moe_ops_cuda)
add_dependencies(test_moe_ops_cuda backend-cpu)

# test_lowbit_models_cuda: the trained model's low-bit mixes on backend-cuda
# against llama.cpp's logits (tests/test_lowbit_models.c), resident and
# streamed; needs a CUDA device, skips loudly (77) without one.
vt_add_test(test_lowbit_models_cuda SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_lowbit_models.c
            LIBS vtcore PkgConfig::CJSON ${CMAKE_DL_LIBS} LABELS "gpu;fixtures;quant" TIMEOUT 600)
target_compile_definitions(test_lowbit_models_cuda PRIVATE VT_LOWBIT_DEVICE="cuda")
vt_cuda_test_definitions(test_lowbit_models_cuda)
add_dependencies(test_lowbit_models_cuda model-qwen35 backend-cpu)
if(TARGET store-device)
  add_dependencies(test_lowbit_models_cuda store-device)
endif()

/*
 * gpu_plugin.c - the C half of backend-cuda and backend-rocm: the capability
 * list, the vt_backend_api table (vt/backend.h) and the exported plugin
 * descriptor. Built once per vendor; -DVT_GPU_HIP makes it backend-rocm.
 *
 * What the plugin does: the required memory functions, the live memory
 * probe, pinned host memory and device names, all through the vendor runtime
 * (gpu_backend.cu), and every compute op of vt/backend.h as kernels
 * (gpu_ops.cu, gpu_elementwise.cu, gpu_norm.cu, ...): mat_mul and get_rows
 * for the GGUF weight types F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4 (gguf.md §6) and the
 * low-bit types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, TQ1_0,
 * TQ2_0, NVFP4, Q1_0, Q2_0 and IQ1_XS, IQ1_XXS, IQ1_XXXS (ids 64-66, through
 * ABI 1.9's mat_mul_ext/get_rows_ext), decoded exactly as backend-cpu's
 * reference does (the list is gpu_internal.h's VT_GPU_WEIGHT_TYPES). Other
 * weight types (integer and F64 tensors, and the activation formats
 * Q8_1/Q8_K) are declared ABSENT with the reason, so a model that needs them
 * is refused by name when the configuration is resolved, before any weight
 * is read.
 *
 * async_queue is ABSENT: ops run in issue order on the device's legacy
 * default stream and each returns once its kernels are enqueued; the result
 * is visible to the next op, and to the host after copy_d2h (which waits)
 * or synchronize(). Host arrays an op takes are copied before it returns.
 */
#include <stddef.h>

#include "gpu_internal.h"
#include "vt/backend.h"

#define GPU_PLUGIN_VERSION "0.3.0"

/* ======================= init ======================= */

/* Unpacks vt_backend_params for the vendor half, which does not see vt/backend.h. */
static vt_status gpu_init(const vt_backend_params *p, vt_backend_ctx **out)
{
    if (!p) {
        if (out) *out = NULL;
        return VT_ERR_INVALID_ARG;
    }
    size_t need = offsetof(vt_backend_params, host) + sizeof p->host;
    if (p->struct_size < need) {
        if (out) *out = NULL;
        /* p->host itself lies beyond what the caller's struct has: no message channel */
        return VT_ERR_ABI;
    }
    /* n_threads and kernels are CPU matters: the GPU has one kernel set */
    return vt_gpu_init_device((int)p->device, p->host, out);
}

/* ======================= capabilities ======================= */

#define PRESENT(id) {(uint32_t)(id), VT_CAP_PRESENT, NULL}
#define ABSENT(id, why) {(uint32_t)(id), VT_CAP_ABSENT, why}

#define NO_TYPE "backend-" VT_GPU_PLUGIN_NAME " has no kernels for integer, F64, Q8_1 or Q8_K " \
                "weights (activation formats and non-float tensors)"
/* a weight type id that vt/types.h names: no mat_mul, no get_rows */
#define TYPE_ABSENT(t) ABSENT(VT_CAP_MAT_MUL(t), NO_TYPE), ABSENT(VT_CAP_GET_ROWS(t), NO_TYPE)
#define TYPE_PRESENT(t) PRESENT(VT_CAP_MAT_MUL(t)), PRESENT(VT_CAP_GET_ROWS(t))

static const vt_capability gpu_caps[] = {
    PRESENT(VT_CAP_MEMORY_PROBE),
    PRESENT(VT_CAP_PINNED_HOST_ALLOC),
    ABSENT(VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY,
           "discrete GPU: device memory is not host-addressable; a unified-memory device is "
           "configured as platform 'unified'"),
    ABSENT(VT_CAP_ASYNC_QUEUE, "ops are synchronous: issue order on the default stream, "
           "host arrays copied before an op returns"),
    ABSENT(VT_CAP_PEER_COPY, "copies between two " VT_GPU_RUNTIME_NAME
           " devices are not implemented; one device per context"),
    PRESENT(VT_CAP_DEVICE_NAME),
    PRESENT(VT_CAP_OP_RMS_NORM),
    PRESENT(VT_CAP_OP_L2_NORM),
    PRESENT(VT_CAP_OP_ROPE_NEOX),
    PRESENT(VT_CAP_OP_ATTENTION),
    PRESENT(VT_CAP_OP_SSM_CONV),
    PRESENT(VT_CAP_OP_GATED_DELTA_NET),
    PRESENT(VT_CAP_OP_UNARY),
    PRESENT(VT_CAP_OP_BINARY),
    PRESENT(VT_CAP_OP_SCALE),
    PRESENT(VT_CAP_OP_MUL_ROWS),
    PRESENT(VT_CAP_OP_COPY_2D),
    PRESENT(VT_CAP_OP_GATHER_ROWS),
    PRESENT(VT_CAP_OP_SCATTER_ADD),
    PRESENT(VT_CAP_OP_SOFTMAX_TOPK),
    PRESENT(VT_CAP_OP_MOE_ROUTE),
    PRESENT(VT_CAP_OP_MOE_FFN),
    PRESENT(VT_CAP_GRAPH),
    PRESENT(VT_CAP_OP_MUL_ACT),
    PRESENT(VT_CAP_OP_ADD_RMS_NORM),
    PRESENT(VT_CAP_OP_DELTA_NET_GATES),
    PRESENT(VT_CAP_COPY_H2D_ASYNC),
    PRESENT(VT_CAP_COPY_H2D_AHEAD),
    TYPE_PRESENT(VT_TYPE_F32),
    TYPE_PRESENT(VT_TYPE_F16),
    TYPE_PRESENT(VT_TYPE_Q4_0),
    TYPE_PRESENT(VT_TYPE_Q4_1),
    TYPE_PRESENT(VT_TYPE_Q5_0),
    TYPE_PRESENT(VT_TYPE_Q5_1),
    TYPE_PRESENT(VT_TYPE_Q8_0),
    TYPE_ABSENT(VT_TYPE_Q8_1),
    TYPE_PRESENT(VT_TYPE_Q2_K),
    TYPE_PRESENT(VT_TYPE_Q3_K),
    TYPE_PRESENT(VT_TYPE_Q4_K),
    TYPE_PRESENT(VT_TYPE_Q5_K),
    TYPE_PRESENT(VT_TYPE_Q6_K),
    TYPE_ABSENT(VT_TYPE_Q8_K),
    TYPE_PRESENT(VT_TYPE_IQ2_XXS),
    TYPE_PRESENT(VT_TYPE_IQ2_XS),
    TYPE_PRESENT(VT_TYPE_IQ3_XXS),
    TYPE_PRESENT(VT_TYPE_IQ1_S),
    TYPE_PRESENT(VT_TYPE_IQ4_NL),
    TYPE_PRESENT(VT_TYPE_IQ3_S),
    TYPE_PRESENT(VT_TYPE_IQ2_S),
    TYPE_PRESENT(VT_TYPE_IQ4_XS),
    TYPE_ABSENT(VT_TYPE_I8),
    TYPE_ABSENT(VT_TYPE_I16),
    TYPE_ABSENT(VT_TYPE_I32),
    TYPE_ABSENT(VT_TYPE_I64),
    TYPE_ABSENT(VT_TYPE_F64),
    TYPE_PRESENT(VT_TYPE_IQ1_M),
    TYPE_PRESENT(VT_TYPE_BF16),
    TYPE_PRESENT(VT_TYPE_TQ1_0),
    TYPE_PRESENT(VT_TYPE_TQ2_0),
    TYPE_PRESENT(VT_TYPE_MXFP4),
    TYPE_PRESENT(VT_TYPE_NVFP4),
    TYPE_PRESENT(VT_TYPE_Q1_0),
    TYPE_PRESENT(VT_TYPE_Q2_0),
    TYPE_PRESENT(VT_TYPE_IQ1_XS), /* ABI 1.9: mat_mul_ext / get_rows_ext */
    TYPE_PRESENT(VT_TYPE_IQ1_XXS),
    TYPE_PRESENT(VT_TYPE_IQ1_XXXS),
};

/* ======================= the table ======================= */

#define MM_INIT(T, n) [VT_TYPE_##T] = vt_gpu_mat_mul_##n,
#define GR_INIT(T, n) [VT_TYPE_##T] = vt_gpu_get_rows_##n,

static const vt_backend_api gpu_api = {
    .struct_size = sizeof(vt_backend_api),
    .caps = gpu_caps,
    .n_caps = sizeof gpu_caps / sizeof gpu_caps[0],
    .device_count = vt_gpu_device_count,
    .init = gpu_init,
    .shutdown = vt_gpu_shutdown,
    .alloc = vt_gpu_alloc,
    .free = vt_gpu_free_mem,
    .copy_h2d = vt_gpu_copy_h2d,
    .copy_h2d_async = vt_gpu_copy_h2d_async,
    .ahead_fork = vt_gpu_ahead_fork,
    .copy_h2d_ahead = vt_gpu_copy_h2d_ahead,
    .ahead_join = vt_gpu_ahead_join,
    .copy_d2h = vt_gpu_copy_d2h,
    .copy_d2d = vt_gpu_copy_d2d,
    .memset_zero = vt_gpu_memset_zero,
    .synchronize = vt_gpu_synchronize,
    .memory_probe = vt_gpu_memory_probe,
    .host_alloc_pinned = vt_gpu_host_alloc_pinned,
    .host_free_pinned = vt_gpu_host_free_pinned,
    .copy_peer = NULL,
    .mat_mul = {VT_GPU_PLAIN_TYPES(MM_INIT) VT_GPU_BLOCK_TYPES(MM_INIT)},
    .get_rows = {VT_GPU_PLAIN_TYPES(GR_INIT) VT_GPU_BLOCK_TYPES(GR_INIT)},
    .rms_norm = vt_gpu_rms_norm,
    .l2_norm = vt_gpu_l2_norm,
    .rope_neox = vt_gpu_rope_neox,
    .attention = vt_gpu_attention,
    .ssm_conv = vt_gpu_ssm_conv,
    .gated_delta_net = vt_gpu_gated_delta_net,
    .unary = vt_gpu_unary,
    .binary = vt_gpu_binary,
    .scale = vt_gpu_scale,
    .mul_rows = vt_gpu_mul_rows,
    .copy_2d = vt_gpu_copy_2d,
    .gather_rows = vt_gpu_gather_rows,
    .scatter_add = vt_gpu_scatter_add,
    .softmax_topk = vt_gpu_softmax_topk,
    .device_name = vt_gpu_device_name,
    .moe_route = vt_gpu_moe_route,
    .moe_ffn = vt_gpu_moe_ffn,
    .graph_begin = vt_gpu_graph_begin,
    .graph_end = vt_gpu_graph_end,
    .graph_launch = vt_gpu_graph_launch,
    .graph_free = vt_gpu_graph_free,
    .rope_neox_dpos = vt_gpu_rope_neox_dpos,
    .attention_dpos = vt_gpu_attention_dpos,
    .copy_rows_dpos = vt_gpu_copy_rows_dpos,
    .mul_act = vt_gpu_mul_act,
    .add_rms_norm = vt_gpu_add_rms_norm,
    .delta_net_gates = vt_gpu_delta_net_gates,
    .mat_mul_ext = vt_gpu_mat_mul_ext,
    .get_rows_ext = vt_gpu_get_rows_ext,
};

static const vt_plugin_desc gpu_desc = {
    .struct_size = sizeof(vt_plugin_desc),
    .abi_major = VT_ABI_MAJOR,
    .abi_minor = VT_ABI_MINOR,
    .kind = VT_PLUGIN_BACKEND,
    .name = VT_GPU_PLUGIN_NAME,
    .version = GPU_PLUGIN_VERSION,
#ifdef VT_GPU_HIP
    .description = "ROCm/HIP backend: HIP kernels for every op; F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/"
                   "Q8_0, Q2_K..Q6_K, IQ4_NL/IQ4_XS, MXFP4 and the low-bit IQ1-IQ3/TQ/NVFP4/"
                   "Q1_0/Q2_0 weights",
#else
    .description = "CUDA backend: CUDA kernels for every op; F32/F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, "
                   "Q2_K..Q6_K, IQ4_NL/IQ4_XS, MXFP4 and the low-bit IQ1-IQ3/TQ/NVFP4/Q1_0/Q2_0 "
                   "weights; cuBLAS prefill",
#endif
    .table = &gpu_api,
};

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void);

VT_PLUGIN_EXPORT const vt_plugin_desc *vt_plugin_entry(void) { return &gpu_desc; }

/*
 * cpu_dequant.c - exact dequantisation of the weight types backend-cpu
 * handles (gguf.md §6.1 F32/F16/BF16, §6.2 Q8_0). Every value is exact in
 * float32 (a Q8_0 product d·q has at most 11 + 8 significant bits), so any
 * correct implementation gives the same bits (quant-zoo/README.md).
 * Used by get_rows and by the scalar matmul; the SIMD kernels dequantise in
 * registers with the same arithmetic.
 */
#include "cpu_internal.h"

#include <string.h>

int vt_cpu_type_supported(uint32_t type)
{
    return type == VT_TYPE_F32 || type == VT_TYPE_F16 || type == VT_TYPE_BF16 ||
           type == VT_TYPE_Q8_0;
}

vt_status vt_cpu_dequant_row(uint32_t type, const void *src, int64_t n, float *dst)
{
    const uint8_t *p = src;
    if (!vt_cpu_type_supported(type)) return VT_ERR_UNSUPPORTED;
    if (n < 0) return VT_ERR_INVALID_ARG;
    switch (type) {
    case VT_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case VT_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = vt_cpu_f16_to_f32(vt_cpu_rd16(p + 2 * i));
        break;
    case VT_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = vt_cpu_bf16_to_f32(vt_cpu_rd16(p + 2 * i));
        break;
    case VT_TYPE_Q8_0:
        if (n % 32) return VT_ERR_INVALID_ARG;
        for (int64_t b = 0; b < n / 32; b++) {
            const uint8_t *blk = p + b * VT_CPU_Q8_0_BYTES;
            float d = vt_cpu_f16_to_f32(vt_cpu_rd16(blk));
            const int8_t *qs = (const int8_t *)(blk + 2);
            for (int i = 0; i < 32; i++) dst[b * 32 + i] = d * (float)qs[i];
        }
        break;
    }
    return VT_OK;
}

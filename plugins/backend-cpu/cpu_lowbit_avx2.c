/*
 * cpu_lowbit_avx2.c - AVX2 decoders of the signed-grid low-bit types
 * (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): the same integers q and scales
 * sc as cpu_lowbit.c's plain decoders (whose comments give the block
 * layouts), 32 values per step instead of 8. Each step loads the four grid
 * entries of 32 values and their four sign bytes, spreads each sign byte
 * over its 8 values as a byte mask (0xff where the bit is set) and negates
 * those bytes: (g ^ m) − m. The scales are the plain decoders' expressions,
 * so sc is the same bits. tests/test_cpu_quant_kernels.c compares both
 * decoders on random blocks.
 */
#include "cpu_internal.h"

#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

static inline float f16_at(const uint8_t *p) { return vt_cpu_f16_to_f32(vt_cpu_rd16(p)); }
static inline uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v; /* little-endian host (x86-64) */
}

/* q[0..31] = ± the coordinates of grid words g0..g3 (8 each), minus where bit
 * j of sign byte k of s4 is set (value 8k + j) */
AVX2 static inline void put32(int8_t *q, uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3,
                              uint32_t s4)
{
    const __m256i g = _mm256_set_epi64x((long long)g3, (long long)g2, (long long)g1, (long long)g0);
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i m = _mm256_shuffle_epi8(_mm256_set1_epi32((int)s4), spread);
    m = _mm256_cmpeq_epi8(_mm256_and_si256(m, bit), bit);
    _mm256_storeu_si256((__m256i *)(void *)q, _mm256_sub_epi8(_mm256_xor_si256(g, m), m));
}

/* the four sign bytes of a u32 of 4 × 7 stored bits (IQ2_XXS, IQ3_XXS) */
static inline uint32_t signs4(uint32_t aux)
{
    const uint8_t *s = vt_cpu_iq.signs;
    return (uint32_t)s[aux & 127] | (uint32_t)s[(aux >> 7) & 127] << 8 |
           (uint32_t)s[(aux >> 14) & 127] << 16 | (uint32_t)s[(aux >> 21) & 127] << 24;
}

AVX2 static void int_iq2_xxs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    const uint64_t *G = vt_cpu_iq.iq2xxs;
    for (int ib = 0; ib < 8; ib++, q += 32) {
        const uint8_t *g = b + 2 + 8 * ib;
        const uint32_t aux = rd32(g + 4);
        sc[2 * ib] = sc[2 * ib + 1] = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        put32(q, G[g[0]], G[g[1]], G[g[2]], G[g[3]], signs4(aux));
    }
}

AVX2 static void int_iq2_xs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    const uint64_t *G = vt_cpu_iq.iq2xs;
    const uint8_t *S = vt_cpu_iq.signs;
    for (int ib = 0; ib < 8; ib++, q += 32) {
        sc[2 * ib] = d * (0.5f + (float)(b[66 + ib] & 15)) * 0.25f;
        sc[2 * ib + 1] = d * (0.5f + (float)(b[66 + ib] >> 4)) * 0.25f;
        uint64_t v;
        memcpy(&v, b + 2 + 8 * ib, 8);
        const uint32_t s4 = (uint32_t)S[(v >> 9) & 127] | (uint32_t)S[(v >> 25) & 127] << 8 |
                            (uint32_t)S[(v >> 41) & 127] << 16 | (uint32_t)S[(v >> 57) & 127] << 24;
        put32(q, G[v & 511], G[(v >> 16) & 511], G[(v >> 32) & 511], G[(v >> 48) & 511], s4);
    }
}

AVX2 static void int_iq2_s(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    const uint64_t *G = vt_cpu_iq.iq2s;
    const uint8_t *qs = b + 2, *qh = b + 66, *scales = b + 74;
    for (int ib = 0; ib < 8; ib++, q += 32) {
        sc[2 * ib] = d * (0.5f + (float)(scales[ib] & 15)) * 0.25f;
        sc[2 * ib + 1] = d * (0.5f + (float)(scales[ib] >> 4)) * 0.25f;
        const uint32_t h = qh[ib];
        put32(q, G[qs[4 * ib] | (h << 8 & 0x300)], G[qs[4 * ib + 1] | (h << 6 & 0x300)],
              G[qs[4 * ib + 2] | (h << 4 & 0x300)], G[qs[4 * ib + 3] | (h << 2 & 0x300)],
              rd32(b + 34 + 4 * ib));
    }
}

AVX2 static void int_iq3_xxs(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    const uint32_t *G = vt_cpu_iq.iq3xxs;
    for (int ib = 0; ib < 8; ib++, q += 32) {
        const uint8_t *qs = b + 2 + 8 * ib;
        const uint32_t aux = rd32(b + 66 + 4 * ib);
        sc[2 * ib] = sc[2 * ib + 1] = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        put32(q, G[qs[0]] | (uint64_t)G[qs[1]] << 32, G[qs[2]] | (uint64_t)G[qs[3]] << 32,
              G[qs[4]] | (uint64_t)G[qs[5]] << 32, G[qs[6]] | (uint64_t)G[qs[7]] << 32, signs4(aux));
    }
}

AVX2 static void int_iq3_s(const uint8_t *b, int8_t *q, float *sc)
{
    const float d = f16_at(b);
    const uint32_t *G = vt_cpu_iq.iq3s;
    const uint8_t *qh = b + 66, *scales = b + 106;
    for (int ib = 0; ib < 8; ib++, q += 32) {
        sc[2 * ib] = sc[2 * ib + 1] =
            d * (float)(1 + 2 * ((scales[ib / 2] >> (4 * (ib & 1))) & 15));
        const uint8_t *qs = b + 2 + 8 * ib;
        const uint32_t h = qh[ib];
        uint64_t w[4];
        for (int l = 0; l < 4; l++)
            w[l] = G[qs[2 * l] | (h << (8 - 2 * l) & 256)] |
                   (uint64_t)G[qs[2 * l + 1] | (h << (7 - 2 * l) & 256)] << 32;
        put32(q, w[0], w[1], w[2], w[3], rd32(b + 74 + 4 * ib));
    }
}

vt_cpu_lowbit_int_fn vt_cpu_lowbit_int_avx2(uint32_t type)
{
    switch (type) {
    case VT_TYPE_IQ2_XXS: return int_iq2_xxs;
    case VT_TYPE_IQ2_XS: return int_iq2_xs;
    case VT_TYPE_IQ2_S: return int_iq2_s;
    case VT_TYPE_IQ3_XXS: return int_iq3_xxs;
    case VT_TYPE_IQ3_S: return int_iq3_s;
    default: return NULL;
    }
}
#else
vt_cpu_lowbit_int_fn vt_cpu_lowbit_int_avx2(uint32_t type)
{
    (void)type;
    return NULL;
}
#endif

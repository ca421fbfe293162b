/*
 * cpu_lowbit_avx2.c - AVX2 decoders of the signed-grid low-bit types
 * (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): the same integers q and scales
 * sc as cpu_lowbit.c's plain decoders (whose comments give the block
 * layouts), 32 values per step instead of 8. Each step loads the four grid
 * entries of 32 values and their four sign bytes, spreads each sign byte
 * over its 8 values as a byte mask (0xff where the bit is set) and negates
 * those bytes: (g ^ m) − m. The scales are the plain decoders' expressions,
 * so sc is the same bits. tests/test_cpu_quant_kernels.c compares both
 * decoders on random blocks. Also the AVX2 + FMA several-token product of
 * the 256-value low-bit types (vt_cpu_lowbit_mm256_avx2).
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
#define IQ3S_W(l)                                                                              \
    (G[qs[2 * (l)] | (h << (8 - 2 * (l)) & 256)] |                                             \
     (uint64_t)G[qs[2 * (l) + 1] | (h << (7 - 2 * (l)) & 256)] << 32)
        put32(q, IQ3S_W(0), IQ3S_W(1), IQ3S_W(2), IQ3S_W(3), rd32(b + 74 + 4 * ib));
#undef IQ3S_W
    }
}

/*
 * The several-token product of a 256-value low-bit type (AVX2 + FMA):
 * mm_from_int's contract (cpu_lowbit.c) with the per-token work in vectors.
 * Each block is decoded once (dec); per token, chunk i (32 values) gives
 * eight int32 sums of 4 products (vpmaddubsw on |q| and x·sign(q), then
 * vpmaddwd), and two rounds of horizontal adds leave the 16 per-16 sums,
 * exact, as h0 = groups 0,2,4,6 | 1,3,5,7 and h1 = groups 8,10,..,14 |
 * 9,11,..,15. Those are scaled by sc · d_x of their group (in the same
 * order) and added into 16 float lanes, lane g collecting group g of every
 * block; a row's lanes are summed at the end in a fixed order. The same code
 * runs for every n_tok, so each token's result does not depend on the batch.
 */
#define AVX2FMA __attribute__((target("avx2,fma")))
AVX2FMA void vt_cpu_lowbit_mm256_avx2(vt_cpu_lowbit_int_fn dec, int ts, const uint8_t *w,
                                      size_t rb, int64_t n_in, const vt_cpu_xq *x,
                                      int64_t n_tok, float *y, int64_t ldy, int64_t n_rows)
{
    _Alignas(32) int8_t q[256];
    _Alignas(32) float sc[16];
    __m256 acc[VT_CPU_MM_TOK_CHUNK][2];
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i even_odd = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    const __m256i dup4 = _mm256_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3);
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        for (int64_t t = 0; t < n_tok; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
        for (int64_t k = 0; k < n_in; k += 256, row += ts) {
            dec(row, q, sc);
            /* the scales in h0's and h1's group order */
            const __m256 S0 = _mm256_permutevar8x32_ps(_mm256_load_ps(sc), even_odd);
            const __m256 S1 = _mm256_permutevar8x32_ps(_mm256_load_ps(sc + 8), even_odd);
            for (int64_t t = 0; t < n_tok; t++) {
                const int8_t *xq = x[t].q + k;
                /* chunk i: eight sums of 4 products (codes from the L1-resident q) */
#define CHUNK(i)                                                                               \
    _mm256_madd_epi16(                                                                         \
        _mm256_maddubs_epi16(                                                                  \
            _mm256_sign_epi8(_mm256_load_si256((const __m256i *)(const void *)(q + 32 * (i))),  \
                             _mm256_load_si256((const __m256i *)(const void *)(q + 32 * (i)))), \
            _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(const void *)(xq + 32 * (i))), \
                             _mm256_load_si256((const __m256i *)(const void *)(q + 32 * (i))))), \
        ones)
                const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(CHUNK(0), CHUNK(1)),
                                                     _mm256_hadd_epi32(CHUNK(2), CHUNK(3)));
                const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(CHUNK(4), CHUNK(5)),
                                                     _mm256_hadd_epi32(CHUNK(6), CHUNK(7)));
#undef CHUNK
                /* d_x of chunk c for groups 2c and 2c+1: [d0..d3 | d0..d3], [d4..d7 | d4..d7] */
                const __m256 xd = _mm256_loadu_ps(x[t].d + k / 32);
                const __m256 D0 = _mm256_permutevar8x32_ps(xd, dup4);
                const __m256 D1 = _mm256_permutevar8x32_ps(xd, _mm256_add_epi32(dup4, _mm256_set1_epi32(4)));
                acc[t][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h0), _mm256_mul_ps(S0, D0), acc[t][0]);
                acc[t][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h1), _mm256_mul_ps(S1, D1), acc[t][1]);
            }
        }
        for (int64_t t = 0; t < n_tok; t++) {
            const __m256 a = _mm256_add_ps(acc[t][0], acc[t][1]);
            const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
            const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
            y[t * ldy + r] = _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
        }
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

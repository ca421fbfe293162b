/*
 * mkmodel.c - writes random-weight qwen35moe and gemma4 models of any shape
 * (see mkmodel.h).
 *
 * The qwen35moe generator mirrors what the llama.cpp converter writes for a
 * Qwen3.5-MoE checkpoint (spec/qwen35moe.md §3 metadata, §4 tensors, in the
 * converter's tensor order), with the GGUF writer of gguf_writer.c: one file
 * or a split model (gguf.md §5). Tensor data is generated while the file is
 * written (the writer's fill callbacks), a few MiB at a time and on several
 * threads, so a model of many GiB needs little memory. Each tensor draws from
 * its own counter-based random stream (seed and tensor name; element i from
 * counter i), so values depend neither on which other tensors exist nor on
 * chunking or threads. Matrices are converted to their weight type
 * (F16, BF16, the block quants of gguf.md §6) by quantize.c, batch by batch;
 * the type of each matrix is chosen in one place (mk_matrix_type: the mixes
 * and llama.cpp's fallback for rows that are not whole blocks). The tokenizer
 * (byte-level BPE trained on an embedded text) is in mkmodel_vocab.c.
 */
#include "mkmodel.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "error.h"
#include "mkmodel_internal.h"
#include "quantize.h"
#include "vt/gguf.h"
#include "vt/types.h"

void vt_mkmodel_defaults(vt_mkmodel_params *p)
{
    memset(p, 0, sizeof *p);
    p->n_embd = 256;
    p->n_layer = 4;
    p->full_attention_interval = 4;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->head_dim = 64;
    p->n_rot = 16;
    p->n_expert = 8;
    p->n_expert_used = 2;
    p->n_ff_exp = 256;
    p->n_ff_shexp = 256;
    p->ssm_d_conv = 4;
    p->ssm_d_k = 64;
    p->ssm_n_k = 2;
    p->ssm_n_v = 4;
    p->context_length = 4096;
    p->n_merges = 400;
    p->weight_type = VT_TYPE_BF16;
    p->seed = 1234;
    p->name = "vt demo qwen35moe";
    p->n_shards = 1;
    p->n_threads = 0;
}

/* --type names: the matrix type, the mix, general.file_type (llama.cpp's
 * LLAMA_FTYPE, gguf.md §7). A pure K-quant is its "_S" file type (the recipe
 * with the fewest exceptions); mxfp4 is MXFP4_MOE. */
static const struct {
    const char *name;
    uint32_t type, mix, file_type, down; /* down: MIX_UD's ffn_down_exps type */
} mk_types[] = {
    {"f32", VT_TYPE_F32, 0, 0, 0},       {"f16", VT_TYPE_F16, 0, 1, 0},
    {"bf16", VT_TYPE_BF16, 0, 32, 0},    {"q8_0", VT_TYPE_Q8_0, 0, 7, 0},
    {"q4_0", VT_TYPE_Q4_0, 0, 2, 0},     {"q4_1", VT_TYPE_Q4_1, 0, 3, 0},
    {"q5_0", VT_TYPE_Q5_0, 0, 8, 0},     {"q5_1", VT_TYPE_Q5_1, 0, 9, 0},
    {"q2_k", VT_TYPE_Q2_K, 0, 10, 0},    {"q3_k", VT_TYPE_Q3_K, 0, 11, 0},
    {"q4_k", VT_TYPE_Q4_K, 0, 14, 0},    {"q5_k", VT_TYPE_Q5_K, 0, 16, 0},
    {"q6_k", VT_TYPE_Q6_K, 0, 18, 0},    {"iq4_nl", VT_TYPE_IQ4_NL, 0, 25, 0},
    {"iq4_xs", VT_TYPE_IQ4_XS, 0, 30, 0}, {"mxfp4", VT_TYPE_MXFP4, 0, 38, 0},
    {"q4_k_m", VT_TYPE_Q4_K, VT_MKMODEL_MIX_K_M, 15, 0},
    {"q5_k_m", VT_TYPE_Q5_K, VT_MKMODEL_MIX_K_M, 17, 0},
    /* the low-bit types: valid blocks of real magnitude, not quantised (quantize.h) */
    {"iq2_xxs", VT_TYPE_IQ2_XXS, 0, 19, 0}, {"iq2_xs", VT_TYPE_IQ2_XS, 0, 20, 0},
    {"iq2_s", VT_TYPE_IQ2_S, 0, 28, 0},     {"iq3_xxs", VT_TYPE_IQ3_XXS, 0, 23, 0},
    {"iq3_s", VT_TYPE_IQ3_S, 0, 26, 0},     {"iq1_s", VT_TYPE_IQ1_S, 0, 24, 0},
    {"iq1_m", VT_TYPE_IQ1_M, 0, 31, 0},     {"tq1_0", VT_TYPE_TQ1_0, 0, 36, 0},
    {"tq2_0", VT_TYPE_TQ2_0, 0, 37, 0},     {"nvfp4", VT_TYPE_NVFP4, 0, 39, 0},
    {"q1_0", VT_TYPE_Q1_0, 0, 40, 0},       {"q2_0", VT_TYPE_Q2_0, 0, 41, 0},
    {"iq1_xs", VT_TYPE_IQ1_XS, 0, 64, 0},   {"iq1_xxs", VT_TYPE_IQ1_XXS, 0, 65, 0},
    {"iq1_xxxs", VT_TYPE_IQ1_XXXS, 0, 66, 0},
    /* mixes shaped like the real "UD" files' tensor tables */
    {"ud-iq1_xxxs", VT_TYPE_IQ1_XXXS, VT_MKMODEL_MIX_UD, 66, VT_TYPE_IQ1_XXXS},
    {"ud-iq2_xs", VT_TYPE_IQ2_XS, VT_MKMODEL_MIX_UD, 20, VT_TYPE_IQ2_XS},
    {"ud-iq1_s", VT_TYPE_IQ1_S, VT_MKMODEL_MIX_UD, 24, VT_TYPE_IQ2_XXS},
};
#define MK_N_TYPES (sizeof mk_types / sizeof mk_types[0])
#define MK_TYPE_NAMES                                                                              \
    "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl, "         \
    "iq4_xs, mxfp4, q4_k_m, q5_k_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m, "     \
    "tq1_0, tq2_0, nvfp4, q1_0, q2_0, iq1_xs, iq1_xxs, iq1_xxxs, ud-iq1_xxxs, ud-iq2_xs or "    \
    "ud-iq1_s"

vt_status vt_mkmodel_set_type(vt_mkmodel_params *p, const char *name)
{
    for (size_t i = 0; name && i < MK_N_TYPES; i++) {
        if (!strcasecmp(name, mk_types[i].name)) {
            p->weight_type = mk_types[i].type;
            p->weight_mix = mk_types[i].mix;
            p->exps_down_type = mk_types[i].mix == VT_MKMODEL_MIX_UD ? mk_types[i].down
                                                                      : mk_types[i].type;
            return VT_OK;
        }
    }
    vt_set_error("mkmodel: weight type '%s' is not supported (use " MK_TYPE_NAMES ")",
                 name ? name : "(null)");
    return VT_ERR_INVALID_ARG;
}

/* ------------------------------------------------------------------------ */
/* Deterministic random numbers (no libm: identical on every host)           */
/* ------------------------------------------------------------------------ */

/* Output number i (0-based) of the wyrand stream with state s (Wang Yi's
 * wyrand: a Weyl sequence mixed by one 64x64->128-bit multiply): random
 * access, so any chunk of a tensor is generated on its own. */
static inline uint64_t mix_at(uint64_t s, uint64_t i)
{
    uint64_t z = s + (i + 1) * 0xA0761D6478BD642Full;
    unsigned __int128 m = (unsigned __int128)z * (z ^ 0xE7037ED1A0B428DBull);
    return (uint64_t)m ^ (uint64_t)(m >> 64);
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 1099511628211ull;
    return h;
}

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

/* How one tensor is filled (element i from mix_at(seed, i) alone):
 * NORMAL: mean + std * x with x approximately standard normal (Irwin-Hall sum
 * of the four 16-bit fields, rescaled to unit variance); NEG_UNIFORM:
 * -(lo + (hi - lo) * u), u uniform in [0, 1) with 24 bits. Float arithmetic,
 * one operation per statement (no contraction into FMA), so the values are
 * the same on every IEEE host. */
typedef enum { GEN_NORMAL, GEN_NEG_UNIFORM, GEN_STEP } gen_kind;

typedef struct gen {
    gen_kind kind;
    double a, b; /* NORMAL: mean, std; NEG_UNIFORM: lo, hi; STEP: a elements 1, then b */
} gen;

typedef struct mk_tensor {
    uint64_t seed;     /* name_seed(params seed, name) */
    uint32_t type;     /* any type vt_quantize_row writes */
    gen_kind kind;
    float add, scale;  /* NORMAL: mean, std*sqrt(3)/2^17; NEG_UNIFORM: -lo, -(hi-lo)/2^24;
                          STEP: count of ones (< 2^24), value after them */
    unsigned n_threads;
} mk_tensor;

#define GEN_BATCH 256 /* values generated per pass: whole blocks of every type (32, 256) */
_Static_assert(GEN_BATCH % 256 == 0, "GEN_BATCH must hold whole 256-value super-blocks");

/* Values [e0, e0 + n) of t as floats, n <= GEN_BATCH. */
static void gen_floats(const mk_tensor *t, float *x, uint64_t e0, uint32_t n)
{
    const float add = t->add, scale = t->scale;
    if (t->kind == GEN_STEP) { /* no randomness: rope_freqs.weight (gemma4.md §4.3) */
        for (uint32_t i = 0; i < n; i++) x[i] = (float)(e0 + i) < add ? 1.0f : scale;
        return;
    }
    if (t->kind == GEN_NORMAL) {
        for (uint32_t i = 0; i < n; i++) {
            uint64_t h = mix_at(t->seed, e0 + i);
            /* sum of the four 16-bit fields: pairwise, then the two 32-bit halves */
            uint64_t s2 = (h & 0x0000FFFF0000FFFFull) + ((h >> 16) & 0x0000FFFF0000FFFFull);
            int32_t s = (int32_t)((s2 & 0xFFFFFFFFu) + (s2 >> 32));
            /* the four uniforms (k + 0.5) / 2^16, less 2, times 2^17: an even integer */
            float v = (float)(2 * s - 262140);
            v *= scale;
            x[i] = v;
        }
    } else {
        for (uint32_t i = 0; i < n; i++) {
            float v = (float)(mix_at(t->seed, e0 + i) >> 40); /* 24 bits */
            v *= scale;
            x[i] = v;
        }
    }
    if (add != 0.0f)
        for (uint32_t i = 0; i < n; i++) x[i] += add;
}

/* Values [e0, e0 + n) of t into dst in t's type (quantize.c); e0 and n are
 * multiples of the type's block size. Fails only as vt_quantize_row does. */
static vt_status gen_range(const mk_tensor *t, uint8_t *dst, uint64_t e0, uint64_t n)
{
    const uint64_t bs = vt_type_block_size(t->type), ts = vt_type_size(t->type);
    float x[GEN_BATCH];
    for (uint64_t done = 0; done < n;) {
        uint32_t k = n - done < GEN_BATCH ? (uint32_t)(n - done) : GEN_BATCH;
        gen_floats(t, x, e0 + done, k);
        vt_status st = vt_quantize_row(t->type, x, k, dst + done / bs * ts);
        if (st) return st;
        done += k;
    }
    return VT_OK;
}

typedef struct gen_job {
    const mk_tensor *t;
    uint8_t *dst;
    uint64_t e0, n;
    vt_status st;   /* out */
    char err[256];  /* out: the message of a failure (set on the job's thread) */
} gen_job;

static void *gen_job_run(void *arg)
{
    gen_job *j = arg;
    j->st = gen_range(j->t, j->dst, j->e0, j->n);
    if (j->st) snprintf(j->err, sizeof j->err, "%s", vt_last_error());
    return NULL;
}

#define MK_MAX_THREADS 16u

/* vt_gguf_fill_fn: bytes [offset, offset + n) of the tensor, split over threads
 * by whole blocks (the values do not depend on the split). */
static vt_status fill_tensor(void *user, void *buf, uint64_t offset, size_t n)
{
    const mk_tensor *t = user;
    const vt_type_traits tr = vt_type_traits_of(t->type);
    const uint64_t nb = n / tr.type_size, b0 = offset / tr.type_size;
    unsigned nt = t->n_threads;
    if (n < ((size_t)256 << 10)) nt = 1; /* not worth a thread */
    if (nt > nb) nt = (unsigned)nb;
    if (nt < 1) nt = 1;
    gen_job jobs[MK_MAX_THREADS];
    pthread_t tid[MK_MAX_THREADS];
    unsigned started = 0;
    for (unsigned k = 0; k < nt; k++) {
        uint64_t lo = nb * k / nt, hi = nb * (k + 1) / nt;
        jobs[k] = (gen_job){.t = t, .dst = (uint8_t *)buf + lo * tr.type_size,
                            .e0 = (b0 + lo) * tr.block_size, .n = (hi - lo) * tr.block_size};
        /* threads for all but the last part, which runs here (so does any part
         * whose thread cannot start) */
        if (k + 1 < nt && pthread_create(&tid[started], NULL, gen_job_run, &jobs[k]) == 0)
            started++;
        else if (k + 1 < nt)
            gen_job_run(&jobs[k]);
    }
    gen_job_run(&jobs[nt - 1]);
    for (unsigned k = 0; k < started; k++) pthread_join(tid[k], NULL);
    for (unsigned k = 0; k < nt; k++) {
        if (jobs[k].st) {
            vt_set_error("%s", jobs[k].err);
            return jobs[k].st;
        }
    }
    return VT_OK;
}

typedef struct mk {
    vt_gguf_writer *w;
    const vt_mkmodel_params *p;
    mk_tensor *t; /* one recipe per tensor; the writer's fill callbacks point into it */
    size_t n_t, cap_t;
    unsigned n_threads;
    vt_status st;
} mk;

/* The type argument of add() for a weight matrix: mk_matrix_type decides. */
#define MK_MATRIX UINT32_MAX

/*
 * The type of weight matrix `name` (rows of ne0 values) in a model of p: the
 * one place both generators choose it. p->weight_type; with the K_M mix Q6_K
 * for output.weight and every ffn_down matrix (ffn_down_exps, ffn_down_shexp,
 * gemma4's dense ffn_down). A row that is not whole blocks of that type takes
 * llama.cpp's fallback (vt_quantize_fallback: Q4_K -> Q5_0, ...; F16 last),
 * logged at INFO once per tensor.
 */
static uint32_t mk_matrix_type(const vt_mkmodel_params *p, const char *name, int64_t ne0)
{
    uint32_t want = p->weight_type;
    if (p->weight_mix == VT_MKMODEL_MIX_K_M &&
        (!strcmp(name, "output.weight") || strstr(name, ".ffn_down")))
        want = VT_TYPE_Q6_K;
    unsigned il = 0;
    const int mtp = sscanf(name, "blk.%u.", &il) == 1 && il >= p->n_layer; /* an MTP block */
    if (p->weight_mix == VT_MKMODEL_MIX_UD) {
        if (strstr(name, "_exps."))
            want = mtp ? VT_TYPE_Q2_K /* the UD files' MTP experts */
                       : strstr(name, "ffn_down_exps") ? p->exps_down_type : p->weight_type;
        else if (!strcmp(name, "output.weight"))
            want = VT_TYPE_Q6_K;
        else if (!strcmp(name, "token_embd.weight") || strstr(name, ".ssm_") ||
                 strstr(name, ".attn_qkv") || strstr(name, ".attn_gate"))
            want = VT_TYPE_Q4_K; /* the embedding and DeltaNet */
        else
            want = VT_TYPE_Q5_K; /* attention, shared experts, dense FFNs, per-layer inputs */
    }
    uint32_t t = want;
    while (ne0 % (int64_t)vt_type_block_size(t)) t = vt_quantize_fallback(t);
    if (t != want)
        vt_log(VT_LOG_INFO, "mkmodel: %s: rows of %" PRId64 " values are not a multiple of %" PRIu32
               " for %s: using fallback quantization %s", name, ne0, vt_type_block_size(want),
               vt_type_name(want), vt_type_name(t));
    return t;
}

/* Add tensor `name` of `type` (MK_MATRIX: a weight matrix, mk_matrix_type)
 * filled as g says. */
static void add(mk *m, const char *name, uint32_t type, uint32_t n_dims, int64_t ne0, int64_t ne1,
                int64_t ne2, gen g)
{
    if (m->st) return;
    if (type == MK_MATRIX) type = mk_matrix_type(m->p, name, ne0);
    int64_t ne[3] = {ne0, ne1, ne2};
    uint64_t n = 1, nbytes;
    vt_type_traits tr = vt_type_traits_of(type);
    for (uint32_t d = 0; d < n_dims; d++) {
        if (__builtin_mul_overflow(n, (uint64_t)ne[d], &n)) n = UINT64_MAX;
    }
    if (n > ((uint64_t)1 << 60) ||
        __builtin_mul_overflow(n / tr.block_size, (uint64_t)tr.type_size, &nbytes)) {
        vt_set_error("mkmodel: tensor '%s' of %" PRId64 " x %" PRId64 " x %" PRId64
                     " values is too large", name, ne0, ne1, ne2);
        m->st = VT_ERR_INVALID_ARG;
        return;
    }
    if (m->p->sparse && n_dims >= 2) { /* matrices as holes: a tensor table at real sizes */
        m->st = vt_gguf_writer_add_tensor(m->w, name, type, n_dims, ne, NULL, nbytes);
        return;
    }
    if (m->n_t == m->cap_t) { /* cap_t is an upper bound on the tensor count */
        vt_set_error("mkmodel: internal: more than %zu tensors", m->cap_t);
        m->st = VT_ERR_INVALID_ARG;
        return;
    }
    mk_tensor *t = &m->t[m->n_t++];
    t->seed = name_seed(m->p->seed, name);
    t->type = type;
    t->kind = g.kind;
    t->n_threads = m->n_threads;
    if (g.kind == GEN_STEP) {
        t->add = (float)g.a;
        t->scale = (float)g.b;
    } else if (g.kind == GEN_NORMAL) {
        t->add = (float)g.a;
        t->scale = (float)(g.b * 1.7320508075688772 / 131072.0); /* sqrt(3) / 2^17 */
    } else {
        t->add = (float)-g.a;
        t->scale = (float)(-(g.b - g.a) / 16777216.0); /* 2^24 */
    }
    m->st = vt_gguf_writer_add_tensor_fill(m->w, name, type, n_dims, ne, nbytes, fill_tensor, t);
}

static gen normal(double mean, double std) { return (gen){GEN_NORMAL, mean, std}; }

/* A weight matrix [n_in, n_out(, n_expert)] with std 1/sqrt(n_in): unit-scale outputs. */
static gen matrix(int64_t n_in)
{
    double x = (double)n_in, r = 1.0;
    for (int i = 0; i < 30; i++) r = 0.5 * (r + x / r); /* sqrt without libm */
    return normal(0.0, 1.0 / r);
}

/* Norm weights as the converter stores them: 1 + w (§4.6), w small. */
static gen norm_w(void) { return normal(1.0, 0.05); }

static void add_tensors(mk *m, uint32_t n_vocab)
{
    const vt_mkmodel_params *p = m->p;
    const uint32_t wt = MK_MATRIX, F = VT_TYPE_F32;
    const int64_t E = p->n_embd, key_dim = (int64_t)p->ssm_n_k * p->ssm_d_k,
                  value_dim = (int64_t)p->ssm_n_v * p->ssm_d_k, conv_dim = 2 * key_dim + value_dim,
                  nv = p->ssm_n_v, hd = p->head_dim;
    char nm[96];
    /* §4.1 (the converter writes output first, then token_embd) */
    add(m, "output.weight", wt, 2, E, n_vocab, 1, matrix(E));
    add(m, "token_embd.weight", wt, 2, E, n_vocab, 1, normal(0.0, 1.0));
    /* the main blocks, then p->n_nextn MTP blocks (full attention, experts and
     * the nextn.* tensors of llama.cpp's qwen35moe loader) */
    for (uint32_t il = 0; il < p->n_layer + p->n_nextn && !m->st; il++) {
        const bool mtp = il >= p->n_layer;
        bool full = mtp || (il + 1) % p->full_attention_interval == 0;
#define NAME(suffix) (snprintf(nm, sizeof nm, "blk.%" PRIu32 ".%s", il, suffix), nm)
        add(m, NAME("attn_norm.weight"), F, 1, E, 1, 1, norm_w());
        if (mtp) {
            add(m, NAME("nextn.eh_proj.weight"), wt, 2, 2 * E, E, 1, matrix(2 * E));
            add(m, NAME("nextn.enorm.weight"), F, 1, E, 1, 1, norm_w());
            add(m, NAME("nextn.hnorm.weight"), F, 1, E, 1, 1, norm_w());
            add(m, NAME("nextn.shared_head_norm.weight"), F, 1, E, 1, 1, norm_w());
        }
        if (!full) { /* §4.4 Gated DeltaNet */
            add(m, NAME("ssm_a"), F, 1, nv, 1, 1, (gen){GEN_NEG_UNIFORM, 1.0, 16.0});
            add(m, NAME("ssm_conv1d.weight"), F, 2, p->ssm_d_conv, conv_dim, 1, normal(0.0, 0.3));
            add(m, NAME("ssm_dt.bias"), F, 1, nv, 1, 1, normal(1.0, 0.1));
            add(m, NAME("ssm_alpha.weight"), wt, 2, E, nv, 1, matrix(E));
            add(m, NAME("ssm_beta.weight"), wt, 2, E, nv, 1, matrix(E));
            add(m, NAME("attn_qkv.weight"), wt, 2, E, conv_dim, 1, matrix(E));
            add(m, NAME("attn_gate.weight"), wt, 2, E, value_dim, 1, matrix(E));
            add(m, NAME("ssm_norm.weight"), F, 1, p->ssm_d_k, 1, 1, norm_w());
            add(m, NAME("ssm_out.weight"), wt, 2, value_dim, E, 1, matrix(value_dim));
        }
        /* §4.5 MoE */
        add(m, NAME("ffn_down_exps.weight"), wt, 3, p->n_ff_exp, E, p->n_expert,
            matrix(p->n_ff_exp));
        add(m, NAME("ffn_gate_exps.weight"), wt, 3, E, p->n_ff_exp, p->n_expert, matrix(E));
        add(m, NAME("ffn_up_exps.weight"), wt, 3, E, p->n_ff_exp, p->n_expert, matrix(E));
        add(m, NAME("ffn_gate_inp.weight"), F, 2, E, p->n_expert, 1, matrix(E));
        add(m, NAME("ffn_down_shexp.weight"), wt, 2, p->n_ff_shexp, E, 1, matrix(p->n_ff_shexp));
        add(m, NAME("ffn_gate_shexp.weight"), wt, 2, E, p->n_ff_shexp, 1, matrix(E));
        add(m, NAME("ffn_up_shexp.weight"), wt, 2, E, p->n_ff_shexp, 1, matrix(E));
        add(m, NAME("ffn_gate_inp_shexp.weight"), F, 2, E, 1, 1, matrix(E));
        add(m, NAME("post_attention_norm.weight"), F, 1, E, 1, 1, norm_w());
        if (full) { /* §4.3 gated full attention */
            add(m, NAME("attn_k_norm.weight"), F, 1, hd, 1, 1, norm_w());
            add(m, NAME("attn_k.weight"), wt, 2, E, (int64_t)p->n_head_kv * hd, 1, matrix(E));
            add(m, NAME("attn_output.weight"), wt, 2, (int64_t)p->n_head * hd, E, 1,
                matrix((int64_t)p->n_head * hd));
            add(m, NAME("attn_q_norm.weight"), F, 1, hd, 1, 1, norm_w());
            add(m, NAME("attn_q.weight"), wt, 2, E, 2 * (int64_t)p->n_head * hd, 1, matrix(E));
            add(m, NAME("attn_v.weight"), wt, 2, E, (int64_t)p->n_head_kv * hd, 1, matrix(E));
        }
#undef NAME
    }
    add(m, "output_norm.weight", F, 1, E, 1, 1, norm_w());
}

/* ------------------------------------------------------------------------ */
/* The model                                                                 */
/* ------------------------------------------------------------------------ */

/* general.file_type of p's weight type and mix (gguf.md §7), -1 if not one
 * mkmodel writes. */
static int32_t file_type_of(const vt_mkmodel_params *p)
{
    for (size_t i = 0; i < MK_N_TYPES; i++)
        if (mk_types[i].type == p->weight_type && mk_types[i].mix == p->weight_mix)
            return (int32_t)mk_types[i].file_type;
    return -1;
}

/* One matrix row length a generator writes, named for the error message. */
typedef struct mk_row {
    const char *what;
    uint64_t n;
} mk_row;

/* A 32-value block type has no fallback (llama.cpp refuses such a tensor
 * too): every matrix row must be whole blocks, ne[0] % 32 == 0 (gguf.md
 * §6.2-6.6). Other types fall back per tensor (mk_matrix_type). */
static vt_status check_rows_32(const vt_mkmodel_params *p, const mk_row *rows, size_t n)
{
    if (vt_type_block_size(p->weight_type) != 32) return VT_OK;
    for (size_t i = 0; i < n; i++)
        if (rows[i].n % 32) {
            vt_set_error("mkmodel: weight type %s needs matrix rows that are a multiple of 32 "
                         "values, but %s = %" PRIu64 " is not",
                         vt_type_name(p->weight_type), rows[i].what, rows[i].n);
            return VT_ERR_INVALID_ARG;
        }
    return VT_OK;
}

static vt_status check_params(const vt_mkmodel_params *p)
{
#define REQUIRE(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            vt_set_error("mkmodel: " __VA_ARGS__);                                                 \
            return VT_ERR_INVALID_ARG;                                                             \
        }                                                                                          \
    } while (0)
    REQUIRE(p->n_embd > 0 && p->n_layer > 0 && p->n_head > 0 && p->n_head_kv > 0 &&
                p->head_dim > 0 && p->n_expert > 0 && p->n_ff_exp > 0 && p->n_ff_shexp > 0 &&
                p->ssm_d_conv > 0 && p->ssm_d_k > 0 && p->ssm_n_k > 0 && p->ssm_n_v > 0 &&
                p->full_attention_interval > 0 && p->context_length > 0,
            "every size parameter must be positive");
    REQUIRE(p->n_head % p->n_head_kv == 0, "n_head %" PRIu32 " is not a multiple of n_head_kv %" PRIu32,
            p->n_head, p->n_head_kv);
    REQUIRE(p->ssm_n_v % p->ssm_n_k == 0, "ssm_n_v %" PRIu32 " is not a multiple of ssm_n_k %" PRIu32,
            p->ssm_n_v, p->ssm_n_k);
    REQUIRE(p->n_rot % 2 == 0 && p->n_rot <= p->head_dim && p->n_rot > 0,
            "n_rot %" PRIu32 " must be even, positive and <= head_dim %" PRIu32, p->n_rot,
            p->head_dim);
    REQUIRE(p->n_expert_used >= 1 && p->n_expert_used <= p->n_expert,
            "n_expert_used %" PRIu32 " must be in 1..n_expert (%" PRIu32 ")", p->n_expert_used,
            p->n_expert);
    REQUIRE(file_type_of(p) >= 0,
            "weight_type %" PRIu32 " (%s) with weight_mix %" PRIu32 " is not one mkmodel "
            "writes (the types of --type " MK_TYPE_NAMES ")",
            p->weight_type, vt_type_name(p->weight_type), p->weight_mix);
    REQUIRE(p->n_merges <= 20000, "n_merges %" PRIu32 " exceeds 20000", p->n_merges);
    /* derived row lengths and widths stay within what the model plugin takes (int32) */
    const uint64_t key_dim = (uint64_t)p->ssm_n_k * p->ssm_d_k,
                   value_dim = (uint64_t)p->ssm_n_v * p->ssm_d_k,
                   q_dim = (uint64_t)p->n_head * p->head_dim,
                   kv_dim = (uint64_t)p->n_head_kv * p->head_dim;
    REQUIRE(2 * key_dim + value_dim <= INT32_MAX,
            "ssm conv width 2 * ssm_n_k * ssm_d_k + ssm_n_v * ssm_d_k = %" PRIu64
            " exceeds 2^31 - 1", 2 * key_dim + value_dim);
    REQUIRE(2 * q_dim <= INT32_MAX && kv_dim <= INT32_MAX,
            "2 * n_head * head_dim = %" PRIu64 " exceeds 2^31 - 1", 2 * q_dim);
    REQUIRE(p->n_embd <= INT32_MAX && p->n_ff_exp <= INT32_MAX && p->n_ff_shexp <= INT32_MAX &&
                p->n_expert <= INT32_MAX,
            "n_embd, n_ff_exp, n_ff_shexp and n_expert must be below 2^31");
    REQUIRE(p->n_layer <= (1u << 20), "n_layer %" PRIu32 " exceeds 2^20", p->n_layer);
    REQUIRE(p->n_nextn <= 16, "nextn %" PRIu32 " exceeds 16 MTP blocks", p->n_nextn);
    const mk_row rows[] = {
        {"n_embd", p->n_embd},
        {"n_ff_exp (ffn_down_exps rows)", p->n_ff_exp},
        {"n_ff_shexp (ffn_down_shexp rows)", p->n_ff_shexp},
        {"ssm_n_v * ssm_d_k (ssm_out rows)", value_dim},
        {"n_head * head_dim (attn_output rows)", q_dim},
    };
#undef REQUIRE
    return check_rows_32(p, rows, sizeof rows / sizeof rows[0]);
}

/* Add the tensors (add_fn; at most cap_t with data) and write the file or its
 * shards: the part common to every architecture. */
static vt_status mk_write(vt_gguf_writer *w, const vt_mkmodel_params *p, const char *path,
                          size_t cap_t, uint32_t n_vocab, void (*add_fn)(mk *, uint32_t))
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    mk m = {.w = w, .p = p, .cap_t = cap_t,
            .n_threads = p->n_threads ? p->n_threads : ncpu > 0 ? (unsigned)ncpu : 1};
    if (m.n_threads > MK_MAX_THREADS) m.n_threads = MK_MAX_THREADS;
    if (!(m.t = vt_calloc_named(m.cap_t, sizeof *m.t, "mkmodel: tensor recipes")))
        return VT_ERR_OUT_OF_MEMORY;
    add_fn(&m, n_vocab);
    vt_status st = m.st;
    vt_gguf_writer_set_progress(w, p->progress, p->progress_user);
    if (!st) st = vt_gguf_writer_write_split(w, path, p->n_shards ? p->n_shards : 1);
    free(m.t);
    return st;
}

vt_status vt_mkmodel_qwen35moe(const char *path, const vt_mkmodel_params *params)
{
    vt_mkmodel_params def;
    if (!params) {
        vt_mkmodel_defaults(&def);
        params = &def;
    }
    if (!path) {
        vt_set_error("mkmodel: an output path is required");
        return VT_ERR_INVALID_ARG;
    }
    vt_status st = check_params(params);
    if (st) return st;
    const vt_mkmodel_params *p = params;
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    if (!w) return VT_ERR_OUT_OF_MEMORY;
    bpe b = {0};
    const char *A = "qwen35moe";
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", A, suffix), key)
    /* §3 metadata, in the converter's order */
    uint32_t pairs = p->n_rot / 2, s0 = (pairs * 11 + 31) / 32;
    if (2 * s0 > pairs) s0 = pairs / 2;
    const int32_t sections[4] = {(int32_t)s0, (int32_t)s0, (int32_t)(pairs - 2 * s0), 0};
    if ((st = vt_gguf_writer_set_str(w, "general.architecture", A)) ||
        (st = vt_gguf_writer_set_str(w, "general.type", "model")) ||
        (st = vt_gguf_writer_set_str(w, "general.name", p->name ? p->name : "vt demo")) ||
        (st = vt_gguf_writer_set_u32(w, K("block_count"), p->n_layer + p->n_nextn)) ||
        (st = vt_gguf_writer_set_u32(w, K("context_length"), p->context_length)) ||
        (st = vt_gguf_writer_set_u32(w, K("embedding_length"), p->n_embd)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.head_count"), p->n_head)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.head_count_kv"), p->n_head_kv)) ||
        (st = vt_gguf_writer_set_arr(w, K("rope.dimension_sections"), VT_GGUF_INT32, sections, 4)) ||
        (st = vt_gguf_writer_set_f32(w, K("rope.freq_base"), 10000.0f)) ||
        (st = vt_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f)) ||
        (st = vt_gguf_writer_set_u32(w, K("expert_count"), p->n_expert)) ||
        (st = vt_gguf_writer_set_u32(w, K("expert_used_count"), p->n_expert_used)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.key_length"), p->head_dim)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.value_length"), p->head_dim)) ||
        (st = vt_gguf_writer_set_u32(w, "general.file_type",
                                     (uint32_t)file_type_of(p))) ||
        (st = vt_gguf_writer_set_u32(w, K("expert_feed_forward_length"), p->n_ff_exp)) ||
        (st = vt_gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), p->n_ff_shexp)) ||
        (st = vt_gguf_writer_set_u32(w, K("ssm.conv_kernel"), p->ssm_d_conv)) ||
        (st = vt_gguf_writer_set_u32(w, K("ssm.state_size"), p->ssm_d_k)) ||
        (st = vt_gguf_writer_set_u32(w, K("ssm.group_count"), p->ssm_n_k)) ||
        (st = vt_gguf_writer_set_u32(w, K("ssm.time_step_rank"), p->ssm_n_v)) ||
        (st = vt_gguf_writer_set_u32(w, K("ssm.inner_size"), p->ssm_n_v * p->ssm_d_k)) ||
        (st = vt_gguf_writer_set_u32(w, K("full_attention_interval"), p->full_attention_interval)) ||
        (st = vt_gguf_writer_set_u32(w, K("rope.dimension_count"), p->n_rot)) ||
        (st = vt_gguf_writer_set_u32(w, "general.quantization_version", 2)) ||
        (p->n_nextn && (st = vt_gguf_writer_set_u32(w, K("nextn_predict_layers"), p->n_nextn))))
        goto out;
#undef K
    uint32_t n_vocab = 0;
    if ((st = mk_bpe_train(&b, p->n_merges, 0)) || (st = mk_add_tokenizer(w, &b, p->n_vocab, &n_vocab))) goto out;
    st = mk_write(w, p, path, 24 * (size_t)(p->n_layer + p->n_nextn) + 3, n_vocab, add_tensors);
out:
    mk_bpe_free(&b);
    vt_gguf_writer_free(w);
    return st;
}

/* ------------------------------------------------------------------------ */
/* gemma4 (spec/gemma4.md)                                                   */
/* ------------------------------------------------------------------------ */

void vt_mkmodel_defaults_gemma4(vt_mkmodel_params *p)
{
    vt_mkmodel_defaults(p);
    p->full_attention_interval = 2; /* S, F, S, F */
    p->head_dim = 128;
    p->head_dim_swa = 64;
    p->n_head_kv = 2;
    p->n_head_kv_full = 1;
    p->n_rot = 32; /* partial rotary factor 0.25 of the F head dim */
    p->n_ff = 256;
    p->sliding_window = 32;
    p->k_eq_v = 1;
    p->name = "vt demo gemma4";
}

/* Per-layer shape (§2, §3.2): S/F kind, head dim, KV heads, own K/V, own V, MLP width. */
static bool g4_swa(const vt_mkmodel_params *p, uint32_t il)
{
    return (il + 1) % p->full_attention_interval != 0;
}
static uint32_t g4_head_dim(const vt_mkmodel_params *p, uint32_t il)
{
    return g4_swa(p, il) ? p->head_dim_swa : p->head_dim;
}
static uint32_t g4_n_kv(const vt_mkmodel_params *p, uint32_t il)
{
    return g4_swa(p, il) || !p->n_head_kv_full ? p->n_head_kv : p->n_head_kv_full;
}
static bool g4_has_kv(const vt_mkmodel_params *p, uint32_t il)
{
    return il < p->n_layer - p->shared_kv_layers;
}
static uint32_t g4_n_ff(const vt_mkmodel_params *p, uint32_t il)
{
    return p->double_wide_mlp && !g4_has_kv(p, il) ? 2 * p->n_ff : p->n_ff;
}

static void add_tensors_gemma4(mk *m, uint32_t n_vocab)
{
    const vt_mkmodel_params *p = m->p;
    const uint32_t wt = MK_MATRIX, F = VT_TYPE_F32;
    const int64_t E = p->n_embd, X = p->n_expert, FX = p->n_ff_exp, P = p->n_per_layer,
                  LP = (int64_t)p->n_per_layer * p->n_layer;
    char nm[96];
    bool any_full = false;
    for (uint32_t il = 0; il < p->n_layer; il++) any_full |= !g4_swa(p, il);
    /* §3.1, §4.3: n_rot/2 rotated pairs (1.0), the rest 1e30 (no rotation) */
    if (any_full)
        add(m, "rope_freqs.weight", F, 1, p->head_dim / 2, 1, 1,
            (gen){GEN_STEP, (double)(p->n_rot / 2), 1e30});
    add(m, "token_embd.weight", wt, 2, E, n_vocab, 1, normal(0.0, 1.0));
    if (P) {
        add(m, "per_layer_token_embd.weight", wt, 2, LP, n_vocab, 1, normal(0.0, 1.0));
        add(m, "per_layer_model_proj.weight", wt, 2, E, LP, 1, matrix(E));
        add(m, "per_layer_proj_norm.weight", F, 1, P, 1, 1, norm_w());
    }
    for (uint32_t il = 0; il < p->n_layer && !m->st; il++) {
        const bool swa = g4_swa(p, il), kv = g4_has_kv(p, il);
        const int64_t hd = g4_head_dim(p, il), q_dim = (int64_t)p->n_head * hd,
                      kv_dim = (int64_t)g4_n_kv(p, il) * hd, ff = g4_n_ff(p, il);
#define NAME(suffix) (snprintf(nm, sizeof nm, "blk.%" PRIu32 ".%s", il, suffix), nm)
        if (X) {
            add(m, NAME("ffn_down_exps.weight"), wt, 3, FX, E, X, matrix(FX));
            add(m, NAME("ffn_gate_up_exps.weight"), wt, 3, E, 2 * FX, X, matrix(E));
        }
        add(m, NAME("attn_norm.weight"), F, 1, E, 1, 1, norm_w());
        add(m, NAME("layer_output_scale.weight"), F, 1, 1, 1, 1, normal(1.0, 0.02));
        add(m, NAME("ffn_down.weight"), wt, 2, ff, E, 1, matrix(ff));
        add(m, NAME("ffn_gate.weight"), wt, 2, E, ff, 1, matrix(E));
        add(m, NAME("ffn_up.weight"), wt, 2, E, ff, 1, matrix(E));
        add(m, NAME("post_attention_norm.weight"), F, 1, E, 1, 1, norm_w());
        add(m, NAME("post_ffw_norm.weight"), F, 1, E, 1, 1, norm_w());
        if (X) {
            add(m, NAME("post_ffw_norm_1.weight"), F, 1, E, 1, 1, norm_w());
            add(m, NAME("post_ffw_norm_2.weight"), F, 1, E, 1, 1, norm_w());
        }
        add(m, NAME("ffn_norm.weight"), F, 1, E, 1, 1, norm_w());
        if (X) {
            add(m, NAME("pre_ffw_norm_2.weight"), F, 1, E, 1, 1, norm_w());
            add(m, NAME("ffn_down_exps.scale"), F, 1, X, 1, 1, normal(1.0, 0.1));
            add(m, NAME("ffn_gate_inp.weight"), F, 2, E, X, 1, matrix(E));
            add(m, NAME("ffn_gate_inp.scale"), F, 1, E, 1, 1, norm_w());
        }
        if (kv) {
            add(m, NAME("attn_k_norm.weight"), F, 1, hd, 1, 1, norm_w());
            add(m, NAME("attn_k.weight"), wt, 2, E, kv_dim, 1, matrix(E));
        }
        add(m, NAME("attn_output.weight"), wt, 2, q_dim, E, 1, matrix(q_dim));
        add(m, NAME("attn_q_norm.weight"), F, 1, hd, 1, 1, norm_w());
        add(m, NAME("attn_q.weight"), wt, 2, E, q_dim, 1, matrix(E));
        if (kv && (swa || !p->k_eq_v)) add(m, NAME("attn_v.weight"), wt, 2, E, kv_dim, 1, matrix(E));
        if (P) {
            add(m, NAME("inp_gate.weight"), wt, 2, E, P, 1, matrix(E));
            add(m, NAME("proj.weight"), wt, 2, P, E, 1, matrix(P));
            add(m, NAME("post_norm.weight"), F, 1, E, 1, 1, norm_w());
        }
#undef NAME
    }
    add(m, "output_norm.weight", F, 1, E, 1, 1, norm_w());
}

static vt_status check_params_gemma4(const vt_mkmodel_params *p)
{
#define REQUIRE(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            vt_set_error("mkmodel: gemma4: " __VA_ARGS__);                                         \
            return VT_ERR_INVALID_ARG;                                                             \
        }                                                                                          \
    } while (0)
    REQUIRE(p->n_embd > 0 && p->n_layer > 0 && p->n_head > 0 && p->n_head_kv > 0 &&
                p->head_dim > 0 && p->head_dim_swa > 0 && p->n_ff > 0 &&
                p->full_attention_interval > 0 && p->context_length > 0 && p->sliding_window > 0,
            "n_embd, n_layer, n_head, n_head_kv, head_dim, head_dim_swa, n_ff, "
            "full_attention_interval, context_length and sliding_window must be positive");
    REQUIRE(p->n_layer <= (1u << 20), "n_layer %" PRIu32 " exceeds 2^20", p->n_layer);
    REQUIRE(p->n_nextn == 0, "nextn (MTP blocks) is a qwen35moe option; gemma4 has none");
    REQUIRE(p->n_embd <= (1u << 20) && p->head_dim <= (1u << 20) && p->head_dim_swa <= (1u << 20) &&
                p->n_ff <= (1u << 19) && p->n_ff_exp <= (1u << 19) && p->n_per_layer <= (1u << 20) &&
                p->n_expert <= (1u << 16) && p->n_head <= (1u << 20),
            "a size exceeds what the gemma4 plugin accepts (n_embd, head dims, n_head, "
            "n_per_layer <= 2^20, n_ff, n_ff_exp <= 2^19, n_expert <= 2^16)");
    const uint32_t kv_full = p->n_head_kv_full ? p->n_head_kv_full : p->n_head_kv;
    REQUIRE(p->n_head % p->n_head_kv == 0 && p->n_head % kv_full == 0,
            "n_head %" PRIu32 " must be a multiple of n_head_kv %" PRIu32
            " and n_head_kv_full %" PRIu32, p->n_head, p->n_head_kv, kv_full);
    REQUIRE(p->n_rot % 2 == 0 && p->n_rot > 0 && p->n_rot <= p->head_dim,
            "n_rot %" PRIu32 " (rotated dims of the full layers) must be even, positive and "
            "<= head_dim %" PRIu32, p->n_rot, p->head_dim);
    REQUIRE(p->head_dim % 2 == 0 && p->head_dim_swa % 2 == 0,
            "head_dim %" PRIu32 " and head_dim_swa %" PRIu32 " must be even (all dims rotate)",
            p->head_dim, p->head_dim_swa);
    REQUIRE((uint64_t)p->n_head * p->head_dim <= INT32_MAX &&
                (uint64_t)p->n_head * p->head_dim_swa <= INT32_MAX &&
                (uint64_t)p->n_per_layer * p->n_layer <= INT32_MAX,
            "n_head x head dim and n_per_layer x n_layer must stay below 2^31");
    if (p->n_expert) {
        REQUIRE(p->n_expert_used >= 1 && p->n_expert_used <= p->n_expert,
                "n_expert_used %" PRIu32 " must be in 1..n_expert (%" PRIu32 ")",
                p->n_expert_used, p->n_expert);
        REQUIRE(p->n_ff_exp > 0, "n_ff_exp must be positive in an MoE model (n_expert > 0)");
    }
    REQUIRE(p->shared_kv_layers < p->n_layer,
            "shared_kv_layers %" PRIu32 " must be below n_layer %" PRIu32, p->shared_kv_layers,
            p->n_layer);
    /* §5.6: a shared-KV layer reads the last owner layer of its own type */
    for (uint32_t il = p->n_layer - p->shared_kv_layers; il < p->n_layer; il++) {
        int found = 0;
        for (uint32_t j = 0; j < p->n_layer - p->shared_kv_layers && !found; j++)
            found = g4_swa(p, j) == g4_swa(p, il);
        REQUIRE(found, "shared-KV layer %" PRIu32 " is a %s layer, but no layer below %" PRIu32
                " of that type owns a KV cache (shared_kv_layers %" PRIu32 ")", il,
                g4_swa(p, il) ? "sliding" : "full", p->n_layer - p->shared_kv_layers,
                p->shared_kv_layers);
    }
    REQUIRE(file_type_of(p) >= 0,
            "weight_type %" PRIu32 " (%s) with weight_mix %" PRIu32 " is not one mkmodel "
            "writes (the types of --type " MK_TYPE_NAMES ")",
            p->weight_type, vt_type_name(p->weight_type), p->weight_mix);
    REQUIRE(p->n_merges <= 20000, "n_merges %" PRIu32 " exceeds 20000", p->n_merges);
    const mk_row rows[] = {
        {"n_embd", p->n_embd},
        {"n_ff (ffn_down rows)", p->n_ff},
        {"n_ff_exp (ffn_down_exps rows)", p->n_expert ? p->n_ff_exp : 0},
        {"n_head * head_dim (attn_output rows)", (uint64_t)p->n_head * p->head_dim},
        {"n_head * head_dim_swa (attn_output rows)", (uint64_t)p->n_head * p->head_dim_swa},
        {"n_per_layer (proj rows)", p->n_per_layer},
        {"n_per_layer * n_layer (per_layer_token_embd rows)", (uint64_t)p->n_per_layer * p->n_layer},
    };
#undef REQUIRE
    return check_rows_32(p, rows, sizeof rows / sizeof rows[0]);
}

vt_status vt_mkmodel_gemma4(const char *path, const vt_mkmodel_params *params)
{
    vt_mkmodel_params def;
    if (!params) {
        vt_mkmodel_defaults_gemma4(&def);
        params = &def;
    }
    if (!path) {
        vt_set_error("mkmodel: an output path is required");
        return VT_ERR_INVALID_ARG;
    }
    vt_status st = check_params_gemma4(params);
    if (st) return st;
    const vt_mkmodel_params *p = params;
    const uint32_t L = p->n_layer;
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    if (!w) return VT_ERR_OUT_OF_MEMORY;
    bpe b = {0};
    int32_t *kv_arr = NULL, *ff_arr = NULL;
    uint8_t *pattern = NULL;
    const char *A = "gemma4";
    char key[128];
    const uint32_t kv_full = p->n_head_kv_full ? p->n_head_kv_full : p->n_head_kv;
    const bool kv_per_layer = kv_full != p->n_head_kv,
               ff_per_layer = p->double_wide_mlp && p->shared_kv_layers;
    if (!(kv_arr = vt_malloc_named(L * sizeof *kv_arr, "mkmodel: head_count_kv array")) ||
        !(ff_arr = vt_malloc_named(L * sizeof *ff_arr, "mkmodel: feed_forward_length array")) ||
        !(pattern = vt_malloc_named(L, "mkmodel: sliding_window_pattern array"))) {
        st = VT_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (uint32_t il = 0; il < L; il++) {
        kv_arr[il] = (int32_t)g4_n_kv(p, il);
        ff_arr[il] = (int32_t)g4_n_ff(p, il);
        pattern[il] = g4_swa(p, il);
    }
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", A, suffix), key)
    /* §2 metadata, in the converter's order (gguf-dump.txt of gemma4-moe-tiny) */
    if ((st = vt_gguf_writer_set_str(w, "general.architecture", A)) ||
        (st = vt_gguf_writer_set_str(w, "general.type", "model")) ||
        (st = vt_gguf_writer_set_str(w, "general.name", p->name ? p->name : "vt demo")) ||
        (st = vt_gguf_writer_set_u32(w, K("block_count"), L)) ||
        (st = vt_gguf_writer_set_u32(w, K("context_length"), p->context_length)) ||
        (st = vt_gguf_writer_set_u32(w, K("embedding_length"), p->n_embd)) ||
        (st = ff_per_layer
                  ? vt_gguf_writer_set_arr(w, K("feed_forward_length"), VT_GGUF_INT32, ff_arr, L)
                  : vt_gguf_writer_set_u32(w, K("feed_forward_length"), p->n_ff)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.head_count"), p->n_head)) ||
        (st = kv_per_layer
                  ? vt_gguf_writer_set_arr(w, K("attention.head_count_kv"), VT_GGUF_INT32, kv_arr, L)
                  : vt_gguf_writer_set_u32(w, K("attention.head_count_kv"), p->n_head_kv)) ||
        (st = vt_gguf_writer_set_f32(w, K("rope.freq_base"), 1000000.0f)) ||
        (st = vt_gguf_writer_set_f32(w, K("rope.freq_base_swa"), 10000.0f)) ||
        (st = vt_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), 1e-6f)))
        goto out;
    if (p->n_expert &&
        ((st = vt_gguf_writer_set_u32(w, K("expert_count"), p->n_expert)) ||
         (st = vt_gguf_writer_set_u32(w, K("expert_used_count"), p->n_expert_used))))
        goto out;
    if ((st = vt_gguf_writer_set_u32(w, K("attention.key_length"), p->head_dim)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.value_length"), p->head_dim)) ||
        (st = vt_gguf_writer_set_u32(w, "general.file_type",
                                     (uint32_t)file_type_of(p))) ||
        (st = vt_gguf_writer_set_f32(w, K("final_logit_softcapping"), 30.0f)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.sliding_window"), p->sliding_window)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.shared_kv_layers"), p->shared_kv_layers)) ||
        (st = vt_gguf_writer_set_u32(w, K("embedding_length_per_layer_input"), p->n_per_layer)) ||
        (st = vt_gguf_writer_set_arr(w, K("attention.sliding_window_pattern"), VT_GGUF_BOOL,
                                     pattern, L)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.key_length_swa"), p->head_dim_swa)) ||
        (st = vt_gguf_writer_set_u32(w, K("attention.value_length_swa"), p->head_dim_swa)))
        goto out;
    if (p->n_expert &&
        (st = vt_gguf_writer_set_u32(w, K("expert_feed_forward_length"), p->n_ff_exp)))
        goto out;
    if ((st = vt_gguf_writer_set_u32(w, K("rope.dimension_count"), p->head_dim)) ||
        (st = vt_gguf_writer_set_u32(w, K("rope.dimension_count_swa"), p->head_dim_swa)) ||
        (st = vt_gguf_writer_set_u32(w, "general.quantization_version", 2)))
        goto out;
#undef K
    uint32_t n_vocab = 0;
    if ((st = mk_bpe_train(&b, p->n_merges, 1)) ||
        (st = mk_add_tokenizer_gemma4(w, &b, p->n_vocab, &n_vocab)))
        goto out;
    st = mk_write(w, p, path, 30 * (size_t)L + 8, n_vocab, add_tensors_gemma4);
out:
    free(kv_arr);
    free(ff_arr);
    free(pattern);
    mk_bpe_free(&b);
    vt_gguf_writer_free(w);
    return st;
}

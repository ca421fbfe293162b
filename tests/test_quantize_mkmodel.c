/*
 * test_quantize_mkmodel.c - `vt mkmodel`'s use of the quantisers, part 4 and
 * 5 of test_quantize (one program with test_quantize.c; see its header).
 */
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_util.h"
#include "test_quantize.h"

#include "cpu_internal.h"
#include "error.h"
#include "mkmodel.h"
#include "quantize.h"
#include "vt/gguf.h"
#include "vt/types.h"

/* ------------------------------------------------------------------------ */
/* 4. vt_mkmodel: per-tensor types, bytes, fallback                          */
/* ------------------------------------------------------------------------ */

/* llama.cpp's fallback for a row that is not whole blocks (llama-quant.cpp:
 * the IQ1-IQ3 types and IQ4_XS -> IQ4_NL; Q2_0, Q2_K, Q3_K, TQ1_0, TQ2_0 ->
 * Q4_0; Q4_K -> Q5_0; Q5_K -> Q5_1; Q6_K -> Q8_0; then F16 if the row is not
 * whole 32-blocks either). */
static uint32_t ref_fallback(uint32_t t)
{
    switch (t) { /* src/llama-quant.cpp, tensor_type_fallback (d32676d77; the iq1-narrow
                    branch adds IQ1_XS/XXS/XXXS to the IQ4_NL group) */
    case VT_TYPE_IQ1_S: case VT_TYPE_IQ1_M: case VT_TYPE_IQ1_XS: case VT_TYPE_IQ1_XXS:
    case VT_TYPE_IQ1_XXXS: case VT_TYPE_IQ2_XXS: case VT_TYPE_IQ2_XS: case VT_TYPE_IQ2_S:
    case VT_TYPE_IQ3_XXS: case VT_TYPE_IQ3_S:
    case VT_TYPE_IQ4_XS: return VT_TYPE_IQ4_NL;
    case VT_TYPE_Q2_0: case VT_TYPE_Q2_K: case VT_TYPE_Q3_K: case VT_TYPE_TQ1_0:
    case VT_TYPE_TQ2_0: return VT_TYPE_Q4_0;
    case VT_TYPE_Q4_K: return VT_TYPE_Q5_0;
    case VT_TYPE_Q5_K: return VT_TYPE_Q5_1;
    case VT_TYPE_Q6_K: return VT_TYPE_Q8_0;
    default: return VT_TYPE_F16; /* llama.cpp throws; F16 fits every row */
    }
}

/* The type a tensor must have: F32 for 1-D tensors, routers and ssm_conv1d
 * (as the converter writes them, gguf.md §7); with the _M mix Q6_K for
 * output.weight and every ffn_down matrix; then the fallback by row length. */
static uint32_t expect_type(const vt_gguf_tensor *t, uint32_t base, int mix)
{
    if (t->n_dims == 1 || strstr(t->name, "ffn_gate_inp") || strstr(t->name, "ssm_conv1d"))
        return VT_TYPE_F32;
    uint32_t want = base;
    if (mix && (!strcmp(t->name, "output.weight") || strstr(t->name, "ffn_down"))) want = VT_TYPE_Q6_K;
    while (t->ne[0] % vt_type_block_size(want)) want = ref_fallback(want);
    return want;
}

static vt_gguf *open_path(const char *path)
{
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g)) fail_msg("open %s: %s", path, vt_last_error());
    return g;
}

static char *make_model(const char *name, const vt_mkmodel_params *p, int gemma)
{
    char *path = vt_test_path(g_dir, name);
    vt_status st = gemma ? vt_mkmodel_gemma4(path, p) : vt_mkmodel_qwen35moe(path, p);
    if (st) fail_msg("mkmodel %s: %s", path, vt_last_error());
    return path;
}

/* Every tensor of `path` has the type expect_type says; returns how many are
 * of `count_type`. Checks general.file_type. */
static int check_types(const char *path, uint32_t base, int mix, uint32_t file_type,
                       uint32_t count_type)
{
    vt_gguf *g = open_path(path);
    uint32_t ft = 0;
    assert_int_equal(vt_gguf_get_u32(g, "general.file_type", &ft), VT_OK);
    assert_int_equal(ft, file_type);
    int count = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        uint32_t want = expect_type(t, base, mix);
        if (t->type != want)
            fail_msg("%s: tensor %s [%lld, ...] is %s, want %s", path, t->name,
                     (long long)t->ne[0], vt_type_name(t->type), vt_type_name(want));
        count += t->type == count_type;
    }
    vt_gguf_close(g);
    return count;
}

/* Every non-F32 tensor of `qpath` is vt_quantize_row of the same tensor of
 * the F32 model `fpath`, row by row. */
static void check_bytes_against_f32(const char *qpath, const char *fpath)
{
    vt_gguf *q = open_path(qpath), *f = open_path(fpath);
    static uint8_t buf[1 << 16];
    int checked = 0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(q); i++) {
        const vt_gguf_tensor *tq = vt_gguf_tensor_at(q, i), *tf = vt_gguf_find_tensor(f, tq->name);
        assert_non_null(tf);
        assert_int_equal(tf->type, VT_TYPE_F32);
        if (tq->type == VT_TYPE_F32) {
            assert_int_equal(tq->nbytes, tf->nbytes);
            assert_memory_equal(tq->data, tf->data, tq->nbytes);
            continue;
        }
        const int64_t ne0 = tq->ne[0], rows = (int64_t)(tf->nbytes / 4) / ne0;
        const size_t rb = row_bytes(tq->type, ne0);
        assert_true(rb <= sizeof buf);
        assert_int_equal(tq->nbytes, rb * (uint64_t)rows);
        for (int64_t r = 0; r < rows; r++) {
            assert_int_equal(vt_quantize_row(tq->type, (const float *)tf->data + r * ne0, ne0, buf),
                             VT_OK);
            if (memcmp(buf, (const uint8_t *)tq->data + r * rb, rb))
                fail_msg("%s: tensor %s (%s) row %lld differs from quantising the F32 model's",
                         qpath, tq->name, vt_type_name(tq->type), (long long)r);
        }
        checked++;
    }
    assert_true(checked > 0);
    vt_gguf_close(q);
    vt_gguf_close(f);
}

static void small_qwen(vt_mkmodel_params *p)
{
    vt_mkmodel_defaults(p);
    p->n_layer = 2;
    p->full_attention_interval = 2; /* layer 0 linear attention, layer 1 full */
    p->n_merges = 200;
}

static void small_gemma(vt_mkmodel_params *p)
{
    vt_mkmodel_defaults_gemma4(p);
    p->n_layer = 2; /* S, F */
    p->n_expert = 4;
    p->n_merges = 200;
}

void test_mkmodel_q4_k_m(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    small_qwen(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "Q4_K_M"), VT_OK);
    assert_int_equal(p.weight_type, VT_TYPE_Q4_K);
    assert_int_equal(p.weight_mix, VT_MKMODEL_MIX_K_M);
    p.n_threads = 1;
    char *q1 = make_model("qwen-q4km-1.gguf", &p, 0);
    p.n_threads = 3;
    char *q3 = make_model("qwen-q4km-3.gguf", &p, 0);
    /* output.weight + per layer ffn_down_exps and ffn_down_shexp */
    assert_int_equal(check_types(q1, VT_TYPE_Q4_K, 1, 15, VT_TYPE_Q6_K), 1 + 2 * 2);
    size_t l1, l3;
    uint8_t *d1 = vt_test_read_file(q1, &l1), *d3 = vt_test_read_file(q3, &l3);
    assert_int_equal(l1, l3);
    if (memcmp(d1, d3, l1)) fail_msg("q4_k_m: 1 and 3 generator threads give different files");
    free(d1);
    free(d3);
    vt_mkmodel_params pf = p;
    pf.weight_type = VT_TYPE_F32;
    pf.weight_mix = VT_MKMODEL_MIX_NONE;
    char *f = make_model("qwen-f32.gguf", &pf, 0);
    check_bytes_against_f32(q3, f);
    /* q5_k_m */
    assert_int_equal(vt_mkmodel_set_type(&p, "q5_k_m"), VT_OK);
    char *q5 = make_model("qwen-q5km.gguf", &p, 0);
    assert_int_equal(check_types(q5, VT_TYPE_Q5_K, 1, 17, VT_TYPE_Q6_K), 1 + 2 * 2);
    check_bytes_against_f32(q5, f);
    /* a mix only goes with Q4_K / Q5_K */
    p.weight_type = VT_TYPE_Q8_0;
    char *bad = vt_test_path(g_dir, "bad.gguf");
    assert_int_equal(vt_mkmodel_qwen35moe(bad, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "weight_mix"));
    assert_int_equal(vt_mkmodel_set_type(&p, "q4_k_s"), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "q4_k_s"));
    free(bad);
    free(q1);
    free(q3);
    free(q5);
    free(f);
}

void test_mkmodel_gemma4_mix(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    small_gemma(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "q4_k_m"), VT_OK);
    char *q = make_model("gemma-q4km.gguf", &p, 1);
    /* no output.weight (tied); per layer ffn_down_exps and the dense ffn_down */
    assert_int_equal(check_types(q, VT_TYPE_Q4_K, 1, 15, VT_TYPE_Q6_K), 2 * 2);
    vt_mkmodel_params pf = p;
    pf.weight_type = VT_TYPE_F32;
    pf.weight_mix = VT_MKMODEL_MIX_NONE;
    char *f = make_model("gemma-f32.gguf", &pf, 1);
    check_bytes_against_f32(q, f);
    free(q);
    free(f);
}

/* Each single type: every matrix of that type, the file type llama.cpp gives it. */
static const struct {
    const char *name;
    uint32_t type, file_type;
} SINGLE[] = {
    {"f32", VT_TYPE_F32, 0},     {"f16", VT_TYPE_F16, 1},       {"bf16", VT_TYPE_BF16, 32},
    {"q8_0", VT_TYPE_Q8_0, 7},   {"q4_0", VT_TYPE_Q4_0, 2},     {"q4_1", VT_TYPE_Q4_1, 3},
    {"q5_0", VT_TYPE_Q5_0, 8},   {"q5_1", VT_TYPE_Q5_1, 9},     {"q2_k", VT_TYPE_Q2_K, 10},
    {"q3_k", VT_TYPE_Q3_K, 11},  {"q4_k", VT_TYPE_Q4_K, 14},    {"q5_k", VT_TYPE_Q5_K, 16},
    {"q6_k", VT_TYPE_Q6_K, 18},  {"iq4_nl", VT_TYPE_IQ4_NL, 25}, {"iq4_xs", VT_TYPE_IQ4_XS, 30},
    {"mxfp4", VT_TYPE_MXFP4, 38},
    /* the low-bit types (valid blocks, no quantiser); file types: llama.h's
     * LLAMA_FTYPE_MOSTLY_* of d32676d77 and the iq1-narrow branch */
    {"iq2_xxs", VT_TYPE_IQ2_XXS, 19}, {"iq2_xs", VT_TYPE_IQ2_XS, 20}, {"iq2_s", VT_TYPE_IQ2_S, 28},
    {"iq3_xxs", VT_TYPE_IQ3_XXS, 23}, {"iq3_s", VT_TYPE_IQ3_S, 26},   {"iq1_s", VT_TYPE_IQ1_S, 24},
    {"iq1_m", VT_TYPE_IQ1_M, 31},     {"tq1_0", VT_TYPE_TQ1_0, 36},   {"tq2_0", VT_TYPE_TQ2_0, 37},
    {"nvfp4", VT_TYPE_NVFP4, 39},     {"q1_0", VT_TYPE_Q1_0, 40},     {"q2_0", VT_TYPE_Q2_0, 41},
    {"iq1_xs", VT_TYPE_IQ1_XS, 64},   {"iq1_xxs", VT_TYPE_IQ1_XXS, 65},
    {"iq1_xxxs", VT_TYPE_IQ1_XXXS, 66},
};
#define N_SINGLE ((int)(sizeof SINGLE / sizeof SINGLE[0]))

/* The low-bit types' blocks from vt_quantize_row: valid (they decode, to finite
 * values), of the row's magnitude (decoded max |y| within 1/64 .. 8 times the
 * source's max |x| in every block), the same for the same values and
 * different for different ones. They are not an approximation of x. */
void test_lowbit_blocks(void **state)
{
    (void)state;
    float x[512], y[512];
    uint8_t a[512], b[512];
    for (int i = 0; i < 512; i++) x[i] = 0.37f * sinf(0.61f * (float)i) * (1.0f + (float)(i / 256));
    for (int k = 0; k < N_SINGLE; k++) {
        const uint32_t t = SINGLE[k].type;
        if (vt_type_block_size(t) < 64) continue; /* the quantised types: test_round_trip */
        const int64_t bs = vt_type_block_size(t);
        assert_int_equal(vt_quantize_row(t, x, 512, a), VT_OK);
        assert_int_equal(vt_quantize_row(t, x, 512, b), VT_OK);
        const size_t bytes = (size_t)vt_type_row_bytes(t, 512);
        assert_memory_equal(a, b, bytes);
        assert_int_equal(vt_cpu_dequant_row(t, a, 512, y), VT_OK);
        for (int64_t b0 = 0; b0 < 512; b0 += bs) {
            float mx = 0, my = 0;
            for (int64_t i = b0; i < b0 + bs; i++) {
                if (!isfinite(y[i])) fail_msg("%s: value %lld decodes to %g", SINGLE[k].name, (long long)i, (double)y[i]);
                mx = fmaxf(mx, fabsf(x[i]));
                my = fmaxf(my, fabsf(y[i]));
            }
            if (!(my >= mx / 64 && my <= 8 * mx))
                fail_msg("%s block at %lld: decoded max %g for a source max %g", SINGLE[k].name,
                         (long long)b0, (double)my, (double)mx);
        }
        x[3] += 0.25f; /* another value: another block */
        assert_int_equal(vt_quantize_row(t, x, 512, b), VT_OK);
        if (!memcmp(a, b, (size_t)vt_type_size(t)))
            fail_msg("%s: a changed value left its block unchanged", SINGLE[k].name);
        x[3] -= 0.25f;
    }
}

/* The ud-* mixes, tensor by tensor, as the issue describes the real files:
 * routed experts in the named type (ud-iq1_s: IQ2_XXS down projections),
 * attention Q5_K, DeltaNet Q4_K, shared experts Q5_K, output Q6_K, the
 * embedding Q4_K; norms, routers, ssm_a/dt/conv1d F32; a row that is not
 * whole blocks llama.cpp's fallback. */
static uint32_t ud_expect(const vt_gguf_tensor *t, uint32_t exps, uint32_t down)
{
    const char *n = t->name;
    if (t->n_dims == 1 || strstr(n, "ffn_gate_inp") || strstr(n, "ssm_conv1d")) return VT_TYPE_F32;
    uint32_t want = strstr(n, "ffn_down_exps")             ? down
                    : strstr(n, "_exps.")                  ? exps
                    : !strcmp(n, "output.weight")          ? VT_TYPE_Q6_K
                    : !strcmp(n, "token_embd.weight")      ? VT_TYPE_Q4_K
                    : strstr(n, ".ssm_") || strstr(n, ".attn_qkv") || strstr(n, ".attn_gate")
                        ? VT_TYPE_Q4_K
                        : VT_TYPE_Q5_K;
    while (t->ne[0] % vt_type_block_size(want)) want = ref_fallback(want);
    return want;
}

static int runs(const char *what, const char *path); /* vt run on the model (below) */

void test_mkmodel_ud_mixes(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        uint32_t exps, down, file_type;
    } mixes[] = {{"ud-iq1_xxxs", VT_TYPE_IQ1_XXXS, VT_TYPE_IQ1_XXXS, 66},
                 {"ud-iq2_xs", VT_TYPE_IQ2_XS, VT_TYPE_IQ2_XS, 20},
                 {"ud-iq1_s", VT_TYPE_IQ1_S, VT_TYPE_IQ2_XXS, 24}};
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        vt_mkmodel_params p;
        small_qwen(&p);
        assert_int_equal(vt_mkmodel_set_type(&p, mixes[m].name), VT_OK);
        char file[64];
        snprintf(file, sizeof file, "qwen-%s.gguf", mixes[m].name);
        char *path = make_model(file, &p, 0);
        vt_gguf *g = open_path(path);
        uint32_t ft = 0;
        assert_int_equal(vt_gguf_get_u32(g, "general.file_type", &ft), VT_OK);
        assert_int_equal(ft, mixes[m].file_type);
        int n_exps = 0;
        for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
            const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
            const uint32_t want = ud_expect(t, mixes[m].exps, mixes[m].down);
            if (t->type != want)
                fail_msg("%s: tensor %s is %s, want %s", mixes[m].name, t->name,
                         vt_type_name(t->type), vt_type_name(want));
            n_exps += strstr(t->name, "_exps.") != NULL;
        }
        assert_int_equal(n_exps, 3 * (int)p.n_layer);
        vt_gguf_close(g);
        int failed = runs(mixes[m].name, path);
        unlink(path);
        free(path);
        if (failed) fail_msg("vt run failed on the %s model", mixes[m].name);
    }
}

void test_fallback(void **state)
{
    (void)state;
    /* the mapping itself */
    for (uint32_t t = 0; t < VT_TYPE_COUNT; t++) assert_int_equal(vt_quantize_fallback(t), ref_fallback(t));
    /* n_embd 64: rows of 64 values are not whole 256-blocks; n_ff_shexp 48 not whole
     * 32-blocks; n_ff_exp and the attention / linear-attention widths stay 256 */
    vt_mkmodel_params p;
    small_qwen(&p);
    p.n_embd = 64;
    p.n_ff_shexp = 48;
    static const char *const mixes[] = {"q4_k_m", "q5_k_m", "q2_k", "q3_k", "q6_k", "iq4_xs"};
    static const uint32_t base[] = {VT_TYPE_Q4_K, VT_TYPE_Q5_K, VT_TYPE_Q2_K,
                                    VT_TYPE_Q3_K, VT_TYPE_Q6_K, VT_TYPE_IQ4_XS};
    static const uint32_t ftype[] = {15, 17, 10, 11, 18, 30};
    for (int k = 0; k < 6; k++) {
        assert_int_equal(vt_mkmodel_set_type(&p, mixes[k]), VT_OK);
        char name[64];
        snprintf(name, sizeof name, "fallback-%s.gguf", mixes[k]);
        char *path = make_model(name, &p, 0);
        check_types(path, base[k], k < 2, ftype[k], 0);
        free(path);
    }
    /* the stated types, spelled out for q4_k_m */
    assert_int_equal(vt_mkmodel_set_type(&p, "q4_k_m"), VT_OK);
    char *path = vt_test_path(g_dir, "fallback-q4_k_m.gguf");
    vt_gguf *g = open_path(path);
    static const struct {
        const char *name;
        uint32_t type;
    } want[] = {
        {"token_embd.weight", VT_TYPE_Q5_0},          /* Q4_K, row 64 */
        {"output.weight", VT_TYPE_Q8_0},              /* Q6_K, row 64 */
        {"blk.0.attn_qkv.weight", VT_TYPE_Q5_0},      /* Q4_K, row 64 */
        {"blk.0.ssm_out.weight", VT_TYPE_Q4_K},       /* row 256 */
        {"blk.0.ffn_down_exps.weight", VT_TYPE_Q6_K}, /* row n_ff_exp 256 */
        {"blk.0.ffn_gate_exps.weight", VT_TYPE_Q5_0}, /* row 64 */
        {"blk.0.ffn_down_shexp.weight", VT_TYPE_F16}, /* Q6_K -> Q8_0 -> F16, row 48 */
        {"blk.0.ffn_up_shexp.weight", VT_TYPE_Q5_0},  /* row 64 */
        {"blk.1.attn_output.weight", VT_TYPE_Q4_K},   /* row n_head * head_dim 256 */
        {"blk.1.attn_q.weight", VT_TYPE_Q5_0},        /* row 64 */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const vt_gguf_tensor *t = vt_gguf_find_tensor(g, want[i].name);
        assert_non_null(t);
        if (t->type != want[i].type)
            fail_msg("%s is %s, want %s", want[i].name, vt_type_name(t->type),
                     vt_type_name(want[i].type));
    }
    vt_gguf_close(g);
    free(path);
    /* a 32-value block type has no fallback: refused, naming the row */
    assert_int_equal(vt_mkmodel_set_type(&p, "q4_0"), VT_OK);
    char *bad = vt_test_path(g_dir, "bad.gguf");
    assert_int_equal(vt_mkmodel_qwen35moe(bad, &p), VT_ERR_INVALID_ARG);
    assert_non_null(strstr(vt_last_error(), "Q4_0"));
    assert_non_null(strstr(vt_last_error(), "n_ff_shexp"));
    free(bad);
    /* every single type on the standard shape: all matrices that type */
    small_qwen(&p);
    for (int k = 0; k < N_SINGLE; k++) {
        assert_int_equal(vt_mkmodel_set_type(&p, SINGLE[k].name), VT_OK);
        assert_int_equal(p.weight_type, SINGLE[k].type);
        assert_int_equal(p.weight_mix, VT_MKMODEL_MIX_NONE);
        p.sparse = 1; /* the tensor table is what is checked here */
        char name[64];
        snprintf(name, sizeof name, "sparse-%s.gguf", SINGLE[k].name);
        char *sp = make_model(name, &p, 0);
        assert_true(check_types(sp, SINGLE[k].type, 0, SINGLE[k].file_type, SINGLE[k].type) > 0);
        free(sp);
    }
}

/* ------------------------------------------------------------------------ */
/* 5. vt run on a model of each type                                         */
/* ------------------------------------------------------------------------ */

/* Run the vt binary with args (NULL-terminated); stderr's tail into err. */
static int run_vt(const char *const *args, char *err, size_t err_size)
{
    char e_path[] = "/tmp/vt-quantize-err-XXXXXX";
    int efd = mkstemp(e_path);
    assert_true(efd >= 0);
    const char *argv[32];
    int n = 0;
    argv[n++] = vt_test_vt_bin();
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, 1);
        dup2(efd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    close(efd);
    size_t len;
    char *text = vt_test_read_file(e_path, &len);
    unlink(e_path);
    snprintf(err, err_size, "%s", len > err_size - 1 ? text + len - (err_size - 1) : text);
    free(text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* 0 when `vt run` of a few tokens on path exits 0; else prints why. */
static int runs(const char *what, const char *path)
{
    const char *args[] = {"run", "-m", path, "-p", "The river runs", "-n", "4", "--temp", "0",
                          "--ignore-eos", "-t", "2", NULL};
    char err[1024];
    int rc = run_vt(args, err, sizeof err);
    if (rc) print_error("vt run on the %s model exited %d:\n%s\n", what, rc, err);
    else printf("  vt run: %s ok\n", what);
    return rc != 0;
}

void test_run_q4_k_m(void **state)
{
    (void)state;
    vt_mkmodel_params p;
    small_qwen(&p);
    assert_int_equal(p.n_embd, 256);
    assert_int_equal(vt_mkmodel_set_type(&p, "q4_k_m"), VT_OK);
    char *path = make_model("run-qwen-q4_k_m.gguf", &p, 0);
    int failed = runs("qwen35moe q4_k_m", path);
    free(path);
    small_gemma(&p);
    assert_int_equal(vt_mkmodel_set_type(&p, "q4_k_m"), VT_OK);
    path = make_model("run-gemma-q4_k_m.gguf", &p, 1);
    failed += runs("gemma4 q4_k_m", path);
    free(path);
    if (failed) fail_msg("%d q4_k_m model(s) did not run", failed);
}

void test_run_each_type(void **state)
{
    (void)state;
    int failed = 0;
    char failed_names[512] = "";
    for (int k = 0; k < N_SINGLE + 1; k++) {
        const char *name = k < N_SINGLE ? SINGLE[k].name : "q5_k_m";
#ifdef VT_TEST_SANITIZED
        /* sanitizer builds: a sample that covers each block family */
        if (strcmp(name, "q4_0") && strcmp(name, "q5_1") && strcmp(name, "q3_k") &&
            strcmp(name, "iq4_xs") && strcmp(name, "mxfp4"))
            continue;
#endif
        vt_mkmodel_params p;
        small_qwen(&p);
        assert_int_equal(vt_mkmodel_set_type(&p, name), VT_OK);
        char file[64], what[64];
        snprintf(file, sizeof file, "run-%s.gguf", name);
        snprintf(what, sizeof what, "qwen35moe %s", name);
        char *path = make_model(file, &p, 0);
        if (runs(what, path)) {
            failed++;
            strncat(failed_names, " ", sizeof failed_names - strlen(failed_names) - 1);
            strncat(failed_names, name, sizeof failed_names - strlen(failed_names) - 1);
        }
        unlink(path);
        free(path);
    }
    if (failed) fail_msg("vt run failed on %d type(s):%s", failed, failed_names);
}

/*
 * test_cuda_ops_models.c - the model-level checks of test_cuda_ops (one
 * program with test_cuda_ops.c, whose rig it uses): the qwen35moe-tiny
 * fixtures (bf16 and q8_0) run through the engine on device "cuda" (prefill
 * in chunks, and token by token) against the Hugging Face reference logits
 * (fixtures/README.md criterion: max |Δ| <= 1e-2, same argmax where the
 * reference top-1/top-2 gap exceeds 1e-3) and against device "cpu" with the
 * scalar kernels; fused ops and merged matrices against the composed ones;
 * vt_engine_eval_last on the GPU.
 */
#include <math.h>

#include <cJSON.h>

#include "test_util.h"
#include "test_cuda_ops.h"

#include "engine.h"
#include "error.h"

#define N_PROMPTS 3

typedef struct ref_prompt {
    char name[16];
    int32_t *ids;
    int n;
    float *logits;
    int *argmax;
    double *margin;
} ref_prompt;

static int *json_ints(const cJSON *a, int *n)
{
    assert_true(cJSON_IsArray(a));
    *n = cJSON_GetArraySize(a);
    int *v = malloc(sizeof(int) * (size_t)(*n ? *n : 1));
    assert_non_null(v);
    for (int i = 0; i < *n; i++) v[i] = (int)cJSON_GetArrayItem(a, i)->valuedouble;
    return v;
}

static int64_t load_refs(const char *dir, ref_prompt *p)
{
    char *ip = vt_test_path(dir, "refs/index.json");
    char *txt = vt_test_read_file(ip, NULL);
    cJSON *root = cJSON_Parse(txt);
    assert_non_null(root);
    const cJSON *prompts = cJSON_GetObjectItem(root, "prompts");
    assert_int_equal(cJSON_GetArraySize(prompts), N_PROMPTS);
    int64_t vocab = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        const cJSON *j = cJSON_GetArrayItem(prompts, i);
        ref_prompt *r = &p[i];
        snprintf(r->name, sizeof r->name, "%s", cJSON_GetObjectItem(j, "name")->valuestring);
        int n;
        r->ids = (int32_t *)json_ints(cJSON_GetObjectItem(j, "prompt_ids"), &r->n);
        r->argmax = json_ints(cJSON_GetObjectItem(j, "argmax_per_position"), &n);
        const cJSON *mg = cJSON_GetObjectItem(j, "top1_minus_top2_per_position");
        r->margin = malloc(sizeof(double) * (size_t)r->n);
        for (int t = 0; t < r->n; t++) r->margin[t] = cJSON_GetArrayItem(mg, t)->valuedouble;
        vocab = (int64_t)cJSON_GetArrayItem(cJSON_GetObjectItem(j, "shape"), 1)->valuedouble;
        char rel[64];
        snprintf(rel, sizeof rel, "refs/%s", cJSON_GetObjectItem(j, "file")->valuestring);
        char *lp = vt_test_path(dir, rel);
        size_t len;
        r->logits = vt_test_read_file(lp, &len);
        assert_int_equal(len, (size_t)r->n * (size_t)vocab * sizeof(float));
        free(lp);
    }
    cJSON_Delete(root);
    free(txt);
    free(ip);
    return vocab;
}

static vt_engine *open_engine(const char *path, const char *device, const char *kernels)
{
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(), .device = device,
                          .n_threads = 0, .kernels = kernels, .n_ctx = 256, .n_batch = 16};
    vt_engine *e = NULL;
    if (vt_engine_open(&p, &e) != VT_OK)
        fail_msg("vt_engine_open(%s, device %s): %s", path, device, vt_last_error());
    return e;
}

static float *eval_all(vt_engine *e, const ref_prompt *p, int64_t vocab)
{
    float *out = fbuf((size_t)p->n * (size_t)vocab);
    OKC(vt_engine_reset(e));
    OKC(vt_engine_eval(e, p->ids, p->n, out, 1));
    return out;
}

static int argmax_of(const float *row, int64_t n)
{
    int b = 0;
    for (int64_t i = 1; i < n; i++)
        if (row[i] > row[b]) b = (int)i;
    return b;
}

/* top1 - top2 of a row */
static double margin_of(const float *row, int64_t n)
{
    double a = -INFINITY, b = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (row[i] > a) {
            b = a;
            a = row[i];
        } else if (row[i] > b) {
            b = row[i];
        }
    }
    return a - b;
}

/* The q8_0 fixture's criterion (README: a smoke test, lossy like llama.cpp's
 * q8 activations, pooled mean 0.34 there): mean |Δ| vs the HF reference <=
 * 0.5 (the logits' std is 1.6). No argmax check: rounding the activations
 * moves near-ties of the router, and the CPU's int8 path flips the same
 * positions of this random model. */
static void cmp_q8(const char *what, const float *got, const float *ref, int n, int64_t vocab)
{
    double sum = 0;
    int top1 = 0;
    for (size_t i = 0; i < (size_t)n * (size_t)vocab; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        sum += isnan(d) ? INFINITY : d;
    }
    for (int t = 0; t < n; t++)
        top1 += argmax_of(got + (size_t)t * vocab, vocab) == argmax_of(ref + (size_t)t * vocab, vocab);
    double mean = sum / ((double)n * (double)vocab);
    fprintf(stderr, "  %-58s mean|d| %.3g  top-1 %d/%d\n", what, mean, top1, n);
    if (!(mean <= 0.5)) fail_msg("%s: mean |d| %.3g > 0.5", what, mean);
}

/* max |Δ| over every position; argmax of got must equal want_argmax (or the
 * argmax of ref when want_argmax is NULL) where the margin exceeds 1e-3. */
static void cmp_logits(const char *what, const float *got, const float *ref, int n, int64_t vocab,
                       const int *want_argmax, const double *margin, double max_tol,
                       double *max_out, double *sum_out, int *top1_out)
{
    double mx = 0, sum = 0;
    int top1 = 0;
    for (int t = 0; t < n; t++) {
        const float *g = got + (size_t)t * vocab, *r = ref + (size_t)t * vocab;
        for (int64_t i = 0; i < vocab; i++) {
            double d = fabs((double)g[i] - (double)r[i]);
            if (!(d <= mx)) mx = d; /* NaN sticks */
            sum += d;
        }
        int ga = argmax_of(g, vocab), ra = want_argmax ? want_argmax[t] : argmax_of(r, vocab);
        double m = margin ? margin[t] : margin_of(r, vocab);
        top1 += ga == ra;
        if (ga != ra && m > 1e-3)
            fail_msg("%s: position %d: argmax %d, reference %d (reference margin %.3g)", what, t,
                     ga, ra, m);
    }
    fprintf(stderr, "  %-58s max|d| %.3g  mean|d| %.3g  top-1 %d/%d\n", what, mx,
            sum / ((double)n * (double)vocab), top1, n);
    if (!(mx <= max_tol)) fail_msg("%s: max |d| %.3g > %.3g", what, mx, max_tol);
    *max_out = mx > *max_out ? mx : *max_out;
    *sum_out += sum;
    *top1_out += top1;
}

/* The fusions of ABI 1.3 and the merged matrices replace compositions with
 * the same roundings, and a one-token matmul computes each output row on its
 * own: decoding token by token with them (the default) and with
 * VT_FUSED_OPS=0 (the composed ops, separate matrices) must give the same
 * bits, through the recorded graph and op by op (VT_GRAPH=0), as users run
 * it (int8 one-token matmuls). A prefill chunk's products: the same bits
 * too, with the tiled kernel (VT_GPU_GEMM=tiled), whose sum for an output
 * does not depend on how many rows the matrix has. The default tensor-core
 * prefill (cuBLAS) picks its kernels, and so its summation order, by the
 * matrix's shape, and a merged matrix has another shape than its parts: a
 * last-bit difference there can flip a near-tie of the router and move a
 * token's logits by 0.1 on these random-weight models (issue 42), so it is
 * held to the reference by test_model_fixtures instead. */
static void fused_case(const char *path, int graph)
{
    enum { N = 20 };
    int32_t ids[N];
    for (int t = 0; t < N; t++) ids[t] = 3 + (t * 37) % 200;
    float *dec[2] = {NULL, NULL}, *pre[2] = {NULL, NULL};
    int64_t V = 0;
    unsetenv("VT_GPU_INT8_DOT");
    if (!graph) setenv("VT_GRAPH", "0", 1);
    for (int f = 0; f < 2; f++) {
        setenv("VT_FUSED_OPS", f ? "0" : "1", 1);
        unsetenv("VT_GPU_GEMM");
        vt_engine *e = open_engine(path, "cuda", NULL);
        vt_model_info mi = {.struct_size = sizeof mi};
        vt_engine_model_info(e, &mi);
        V = mi.n_vocab;
        dec[f] = fbuf((size_t)N * (size_t)V);
        pre[f] = fbuf((size_t)16 * (size_t)V);
        OKC(vt_engine_reset(e));
        for (int t = 0; t < N; t++)
            OKC(vt_engine_eval(e, &ids[t], 1, dec[f] + (size_t)t * (size_t)V, 0));
        vt_engine_close(e);
        setenv("VT_GPU_GEMM", "tiled", 1);
        e = open_engine(path, "cuda", NULL);
        OKC(vt_engine_eval(e, ids, 16, pre[f], 1));
        vt_engine_close(e);
    }
    unsetenv("VT_FUSED_OPS");
    unsetenv("VT_GRAPH");
    setenv("VT_GPU_INT8_DOT", "0", 1);
    setenv("VT_GPU_GEMM", "cublas", 1);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (size_t i = 0; i < (size_t)N * (size_t)V; i++)
        if (memcmp(&dec[0][i], &dec[1][i], sizeof(float)))
            fail_msg("%s%s: token %zu logit %zu: fused %.9g, composed %.9g (the bits must agree)",
                     base, graph ? "" : " (VT_GRAPH=0)", i / (size_t)V, i % (size_t)V,
                     (double)dec[0][i], (double)dec[1][i]);
    for (size_t i = 0; i < (size_t)16 * (size_t)V; i++)
        if (memcmp(&pre[0][i], &pre[1][i], sizeof(float)))
            fail_msg("%s%s: prefill 16 (tiled) token %zu logit %zu: fused %.9g, composed %.9g "
                     "(the bits must agree)", base, graph ? "" : " (VT_GRAPH=0)", i / (size_t)V,
                     i % (size_t)V, (double)pre[0][i], (double)pre[1][i]);
    fprintf(stderr, "  %s%s: %d tokens one by one and a prefill of 16 (tiled), fused = composed "
            "bit for bit\n", base, graph ? "" : " (VT_GRAPH=0)", N);
    for (int f = 0; f < 2; f++) {
        free(dec[f]);
        free(pre[f]);
    }
}

/* vt_engine_eval_last on the GPU: the logits land in the engine's pinned
 * buffer; they must be vt_engine_eval's, step by step. */
static void eval_last_case(const char *path)
{
    vt_engine *e = open_engine(path, "cuda", NULL);
    vt_model_info mi = {.struct_size = sizeof mi};
    vt_engine_model_info(e, &mi);
    const int64_t V = mi.n_vocab;
    int32_t ids[12];
    for (int t = 0; t < 12; t++) ids[t] = 5 + (t * 29) % 150;
    float *ref = fbuf((size_t)5 * (size_t)V);
    const float *last = NULL;
    for (int pass = 0; pass < 2; pass++) {
        OKC(vt_engine_reset(e));
        for (int t = 0; t < 5; t++) {
            const int32_t *tk = t ? &ids[7 + t - 1] : ids;
            const int64_t n = t ? 1 : 7;
            if (!pass) {
                OKC(vt_engine_eval(e, tk, n, ref + (size_t)t * (size_t)V, 0));
            } else {
                OKC(vt_engine_eval_last(e, tk, n, &last));
                if (memcmp(last, ref + (size_t)t * (size_t)V, sizeof(float) * (size_t)V))
                    fail_msg("%s step %d: vt_engine_eval_last differs from vt_engine_eval", path, t);
            }
        }
    }
    fprintf(stderr, "  %s: vt_engine_eval_last == vt_engine_eval (prompt 7, 4 steps)\n",
            strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    free(ref);
    vt_engine_close(e);
}

void test_model_fused_vs_composed(void **s)
{
    (void)s;
    if (!ready()) return;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    static const char *files[] = {"qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf",
                                  "qwen35moe-tiny/gguf/qwen35moe-tiny-q8_0.gguf",
                                  "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf"};
    for (int f = 0; f < 3; f++) {
        char *path = vt_test_path(fx, files[f]);
        fused_case(path, 1);
        fused_case(path, 0);
        if (f != 1) eval_last_case(path);
        free(path);
    }
}

void test_model_fixtures(void **s)
{
    (void)s;
    if (!ready()) return;
    const char *fx = vt_test_fixtures();
    if (!fx) return;
    char *dir = vt_test_path(fx, "qwen35moe-tiny");
    ref_prompt p[N_PROMPTS];
    int64_t vocab = load_refs(dir, p);
    static const char *files[] = {"gguf/qwen35moe-tiny-bf16.gguf", "gguf/qwen35moe-tiny-q8_0.gguf"};
    for (int f = 0; f < 2; f++) {
        char *path = vt_test_path(dir, files[f]);
        vt_engine *eg = open_engine(path, "cuda", NULL);
        vt_engine *ec = open_engine(path, "cpu", "scalar");
        double m_ref = 0, s_ref = 0, m_cpu = 0, s_cpu = 0;
        int t_ref = 0, t_cpu = 0, n_pos = 0;
        for (int i = 0; i < N_PROMPTS; i++) {
            float *lg = eval_all(eg, &p[i], vocab), *lc = eval_all(ec, &p[i], vocab);
            char what[160];
            if (f == 0) { /* bf16 = the f32 model: the fixtures' f32 criterion */
                snprintf(what, sizeof what, "%s %s: cuda vs HF reference", files[f] + 5, p[i].name);
                cmp_logits(what, lg, p[i].logits, p[i].n, vocab, p[i].argmax, p[i].margin, 1e-2,
                           &m_ref, &s_ref, &t_ref);
            }
            /* cuda vs the CPU's scalar kernels on the same weights: float32 vs double sums */
            snprintf(what, sizeof what, "%s %s: cuda vs cpu scalar", files[f] + 5, p[i].name);
            cmp_logits(what, lg, lc, p[i].n, vocab, NULL, NULL, 1e-2, &m_cpu, &s_cpu, &t_cpu);
            n_pos += p[i].n;
            free(lg);
            free(lc);
        }
        fprintf(stderr, "  %s pooled over %d positions: cuda vs cpu max %.3g mean %.3g top-1 %d",
                files[f] + 5, n_pos, m_cpu, s_cpu / ((double)n_pos * (double)vocab), t_cpu);
        if (f == 0)
            fprintf(stderr, "; cuda vs HF max %.3g mean %.3g top-1 %d", m_ref,
                    s_ref / ((double)n_pos * (double)vocab), t_ref);
        fprintf(stderr, "\n");

        /* decode: the longest prompt token by token on the device (the
         * decode matmul kernel, attention over the growing cache) */
        const ref_prompt *L = &p[N_PROMPTS - 1];
        for (int i = 0; i < N_PROMPTS; i++)
            if (p[i].n > L->n) L = &p[i];
        float *step = fbuf((size_t)L->n * (size_t)vocab);
        OKC(vt_engine_reset(eg));
        for (int t = 0; t < L->n; t++)
            OKC(vt_engine_eval(eg, &L->ids[t], 1, step + (size_t)t * (size_t)vocab, 0));
        float *lc = eval_all(ec, L, vocab);
        char what[160];
        double m = 0, sm = 0;
        int t1 = 0;
        snprintf(what, sizeof what, "%s %s token by token: cuda vs cpu scalar", files[f] + 5, L->name);
        cmp_logits(what, step, lc, L->n, vocab, NULL, NULL, 1e-2, &m, &sm, &t1);
        if (f == 0) {
            snprintf(what, sizeof what, "%s %s token by token: cuda vs HF", files[f] + 5, L->name);
            cmp_logits(what, step, L->logits, L->n, vocab, L->argmax, L->margin, 1e-2, &m, &sm, &t1);
        } else {
            /* as users run it: one-token matmuls of the Q8_0 weights on int8
             * activations (gpu_matvec.cu), prefill products on TF32 tensor
             * cores (gpu_mma.cu), held to the rounding criterion */
            unsetenv("VT_GPU_INT8_DOT");
            unsetenv("VT_GPU_GEMM");
            vt_engine *eq = open_engine(path, "cuda", NULL);
            setenv("VT_GPU_INT8_DOT", "0", 1);
            setenv("VT_GPU_GEMM", "cublas", 1);
            for (int i = 0; i < N_PROMPTS; i++) {
                float *lq = eval_all(eq, &p[i], vocab);
                snprintf(what, sizeof what, "%s %s prefill, rounded activations: cuda vs HF",
                         files[f] + 5, p[i].name);
                cmp_q8(what, lq, p[i].logits, p[i].n, vocab);
                free(lq);
            }
            OKC(vt_engine_reset(eq));
            for (int t = 0; t < L->n; t++)
                OKC(vt_engine_eval(eq, &L->ids[t], 1, step + (size_t)t * (size_t)vocab, 0));
            snprintf(what, sizeof what, "%s %s token by token, int8 activations: cuda vs HF",
                     files[f] + 5, L->name);
            cmp_q8(what, step, L->logits, L->n, vocab);
            vt_engine_close(eq);
        }
        free(step);
        free(lc);
        vt_engine_close(eg);
        vt_engine_close(ec);
        free(path);
    }
    for (int i = 0; i < N_PROMPTS; i++) {
        free(p[i].ids);
        free(p[i].logits);
        free(p[i].argmax);
        free(p[i].margin);
    }
    free(dir);
}

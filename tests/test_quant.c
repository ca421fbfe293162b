/*
 * test_quant.c - backend-cpu's dequantisation against the fixtures.
 *
 * 1. quant-zoo (fixtures/quant-zoo/README.md): the F16, BF16 and Q8_0
 *    tensors of quant-zoo.gguf, read with the core GGUF reader, dequantised
 *    by vt (through the backend's get_rows over all 64 rows, and through
 *    vt_cpu_dequant_row) equal dequant-<TYPE>.f32.bin bit for bit.
 * 2. qwen35moe-tiny: every Q8_0 tensor of qwen35moe-tiny-q8_0.gguf,
 *    dequantised, is within 0.6·|d| of the same tensor of
 *    qwen35moe-tiny-bf16.gguf (d = the block's stored fp16 scale). Q8_0 rounds
 *    x/d to an integer (error <= d/2) and stores d in fp16 (relative error
 *    <= 2^-11, times |q| <= 127: 0.062·d), so 0.562·d bounds a correct decoder;
 *    a wrong scale, sign or element order is far outside it.
 */
#include "test_cpu_common.h"
#include "error.h"
#include "vt/gguf.h"

static void zoo_type(const char *dir, vt_gguf *g, uint32_t type)
{
    char name[64], file[64];
    snprintf(name, sizeof name, "%s.weight", vt_type_name(type));
    snprintf(file, sizeof file, "quant-zoo/dequant-%s.f32.bin", vt_type_name(type));
    const vt_gguf_tensor *t = vt_gguf_find_tensor(g, name);
    if (!t) fail_msg("quant-zoo.gguf has no tensor %s", name);
    assert_int_equal(t->type, type);
    assert_int_equal(t->ne[0], 256);
    assert_int_equal(t->ne[1], 64);
    assert_non_null(t->data);
    uint64_t rb = vt_type_row_bytes(type, 256);
    assert_int_equal(t->nbytes, 64 * rb);

    char *path = vt_test_path(dir, file);
    size_t len;
    float *want = vt_test_read_file(path, &len);
    assert_int_equal(len, 64 * 256 * sizeof(float));
    float *got = tc_alloc_f(64 * 256);

    /* (a) the dequantiser, row by row */
    for (int r = 0; r < 64; r++)
        assert_int_equal(vt_cpu_dequant_row(type, (const uint8_t *)t->data + r * rb, 256, got + r * 256), VT_OK);
    for (int i = 0; i < 64 * 256; i++)
        if (memcmp(&got[i], &want[i], 4))
            fail_msg("%s dequant: row %d column %d (block %d): %.9g, reference %.9g", name, i / 256,
                     i % 256, (i % 256) / (int)vt_type_block_size(type), (double)got[i], (double)want[i]);

    /* (b) get_rows over all 64 rows, in a shuffled order, on both kernel sets */
    int32_t ids[64];
    for (int i = 0; i < 64; i++) ids[i] = (i * 37) % 64;
    static const char *sets[] = {"scalar", "auto"};
    for (int s = 0; s < 2; s++) {
        vt_backend_ctx *ctx = tc_ctx(sets[s], 2);
        vt_weight w = {type, 256, 64, rb, t->data, name};
        memset(got, 0, 64 * 256 * sizeof(float));
        assert_int_equal(tc_api()->get_rows[type](ctx, &w, ids, 64, got), VT_OK);
        for (int i = 0; i < 64; i++)
            if (memcmp(got + i * 256, want + ids[i] * 256, 256 * sizeof(float)))
                fail_msg("%s get_rows (%s kernels): row %d differs from the reference", name, sets[s], ids[i]);
        tc_api()->shutdown(ctx);
    }
    free(got);
    free(want);
    free(path);
}

static void test_quant_zoo(void **state)
{
    (void)state;
    const char *dir = vt_test_fixtures();
    if (!dir) return;
    char *path = vt_test_path(dir, "quant-zoo/quant-zoo.gguf");
    vt_gguf *g = NULL;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("vt_gguf_open %s: %s", path, vt_last_error());
    assert_int_equal(vt_gguf_n_tensors(g), 15);
    zoo_type(dir, g, VT_TYPE_F16);
    zoo_type(dir, g, VT_TYPE_BF16);
    zoo_type(dir, g, VT_TYPE_Q8_0);
    vt_gguf_close(g);
    free(path);
}

static void dequant_tensor(const vt_gguf_tensor *t, float *out)
{
    int64_t n_in = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
    uint64_t rb = vt_type_row_bytes(t->type, (uint64_t)n_in);
    for (int64_t r = 0; r < rows; r++)
        if (vt_cpu_dequant_row(t->type, (const uint8_t *)t->data + r * rb, n_in, out + r * n_in) != VT_OK)
            fail_msg("tensor %s: type %s cannot be dequantised", t->name, vt_type_name(t->type));
}

static void test_q8_0_vs_bf16(void **state)
{
    (void)state;
    const char *dir = vt_test_fixtures();
    if (!dir) return;
    char *pq = vt_test_path(dir, "qwen35moe-tiny/gguf/qwen35moe-tiny-q8_0.gguf");
    char *pb = vt_test_path(dir, "qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf");
    vt_gguf *gq = NULL, *gb = NULL;
    if (vt_gguf_open(pq, 0, &gq) != VT_OK) fail_msg("vt_gguf_open %s: %s", pq, vt_last_error());
    if (vt_gguf_open(pb, 0, &gb) != VT_OK) fail_msg("vt_gguf_open %s: %s", pb, vt_last_error());
    int n_checked = 0;
    double worst = 0.0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(gq); i++) {
        const vt_gguf_tensor *tq = vt_gguf_tensor_at(gq, i);
        if (tq->type != VT_TYPE_Q8_0) continue;
        const vt_gguf_tensor *tb = vt_gguf_find_tensor(gb, tq->name);
        if (!tb) fail_msg("tensor %s is in the q8_0 file but not in the bf16 file", tq->name);
        for (int d = 0; d < 4; d++)
            if (tq->ne[d] != tb->ne[d]) fail_msg("tensor %s: shapes differ in dimension %d", tq->name, d);
        int64_t n = tq->ne[0] * tq->ne[1] * tq->ne[2] * tq->ne[3];
        float *a = tc_alloc_f(n), *b = tc_alloc_f(n);
        dequant_tensor(tq, a);
        dequant_tensor(tb, b);
        for (int64_t e = 0; e < n; e++) {
            const uint8_t *blk = (const uint8_t *)tq->data + (e / 32) * 34;
            double dd = fabs((double)vt_cpu_f16_to_f32(vt_cpu_rd16(blk)));
            double err = fabs((double)a[e] - (double)b[e]);
            if (dd > 0) worst = fmax(worst, err / dd);
            if (!(err <= 0.6 * dd))
                fail_msg("tensor %s element %lld (block %lld): q8_0 %.9g, bf16 %.9g, |diff| %.3g > 0.6·d = %.3g",
                         tq->name, (long long)e, (long long)(e / 32), (double)a[e], (double)b[e], err, 0.6 * dd);
        }
        free(a);
        free(b);
        n_checked++;
    }
    assert_true(n_checked > 10);
    fprintf(stderr, "[  INFO    ] %d Q8_0 tensors checked, worst |q8_0 - bf16| = %.3f·d\n", n_checked, worst);
    vt_gguf_close(gq);
    vt_gguf_close(gb);
    free(pq);
    free(pb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quant_zoo),
        cmocka_unit_test(test_q8_0_vs_bf16),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}

/*
 * test_qwen35_load.c - the Qwen3.5 model plugin's load-time behaviour,
 * driven through its vt_model_api table directly (no engine, no tokenizer):
 *   - required_caps lists the ops and the per-type mat_mul/get_rows of the
 *     file's weight types (bf16 and q8_0 fixtures), get_rows only for
 *     token_embd unless the LM head is tied to it;
 *   - refusals on edited copies of the fixture GGUF name the key or tensor
 *     (missing key, wrong shape with both shapes, non-F32 norm, MTP sidecar,
 *     qwen3next, key_length != value_length);
 *   - a 2-D [n_embd, 1] vs 1-D [n_embd] shared-expert gate both load;
 *   - an appended MTP block (block_count 5, nextn_predict_layers 1) is
 *     skipped: logits bit-identical to the file without it;
 *   - the copy path (backend without host-addressable memory) gives the same
 *     logits bit for bit as the zero-copy path;
 *   - absurd n_ctx / n_batch load parameters are refused by name.
 * (Hostile hyperparameters: test_qwen35_hostile.c.)
 * Logits here are compared with the plugin's own other path only where the
 * two computations must be identical by construction; agreement with the
 * reference is test_qwen35_fixtures.c's job.
 */
#include "test_util.h"

#include <math.h>
#include <unistd.h>

#include "error.h"
#include "registry.h"
#include "vt/backend.h"
#include "vt/gguf.h"
#include "vt/model.h"

static const char *g_fx;
static char g_tmp[512];
static vt_registry *g_reg;
static const vt_model_api *g_mapi;
static const vt_backend_api *g_bapi;

static int setup_env(void)
{
    if (g_reg) {
        if (!g_mapi) fail_msg("model plugin 'qwen35' not found in %s", vt_test_plugin_dir());
        return 1;
    }
    const char *fx = vt_test_fixtures();
    if (!fx) return 0;
    g_fx = vt_test_path(fx, "qwen35moe-tiny/gguf");
    const char *bin = getenv("VT_TEST_BINARY_DIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/qwen35-load-XXXXXX", bin ? bin : "/tmp");
    assert_non_null(mkdtemp(g_tmp));
    const char *dirs[] = {vt_test_plugin_dir(), NULL};
    assert_int_equal(vt_registry_open(dirs, &g_reg), VT_OK);
    const vt_plugin_entry *mp = vt_registry_find(g_reg, VT_PLUGIN_MODEL, "qwen35");
    if (!mp) fail_msg("model plugin 'qwen35' not found in %s", vt_test_plugin_dir());
    g_mapi = mp->desc->table;
    const vt_plugin_entry *bp = vt_registry_find(g_reg, VT_PLUGIN_BACKEND, "cpu");
    g_bapi = bp ? bp->desc->table : NULL;
    return 1;
}

/* The tests that run the model need the CPU backend. */
static int setup_backend(void)
{
    if (!setup_env()) return 0;
    if (!g_bapi) fail_msg("backend plugin 'cpu' not found in %s", vt_test_plugin_dir());
    return 1;
}

static char *fx_file(const char *name)
{
    return vt_test_path(g_fx, name);
}

/* ---- writing edited copies of the fixture ---- */

typedef struct edits {
    const char *drop_key;
    const char *drop_tensor;
    const char *set_u32_key;   /* add or override */
    uint32_t set_u32_val;
    const char *arch;          /* override general.architecture */
    const char *shape_tensor;  /* replace ne[1] (data truncated/zero-extended) */
    int64_t shape_ne1;
    const char *f16_tensor;    /* relabel an F32 tensor as F16 (half the bytes) */
    const char *relabel_tensor; /* relabel a tensor as relabel_type of the same byte size */
    uint32_t relabel_type;
    int shexp_1d;              /* store ffn_gate_inp_shexp as 1-D [n_embd] */
    int add_mtp;               /* block_count 5 + nextn 1 + blk.4 (copy of blk.3) + nextn.* */
    int per_layer_keys;        /* head_count[_kv] as per-block arrays + recurrent_layers */
    int dense;                 /* arch qwen35: FFN = the shared expert's matrices, no MoE */
    int moe_as_dense;          /* every routed expert = the shared expert's matrices, and
                                  ffn_down_shexp zeroed: the MoE FFN then equals `dense`'s */
} edits;

static void copy_kv(const vt_gguf *g, vt_gguf_writer *w, int64_t i, const edits *ed)
{
    const char *src = vt_gguf_kv_key(g, i), *key = src;
    char renamed[160];
    if (!strncmp(src, "GGUF.", 5) || !strcmp(src, "general.alignment")) return;
    if (ed->drop_key && !strcmp(src, ed->drop_key)) return;
    if (ed->dense && !strncmp(src, "qwen35moe.", 10)) {
        if (strstr(src, "expert")) return;
        snprintf(renamed, sizeof renamed, "qwen35.%s", src + 10);
        key = renamed;
    }
    vt_gguf_type t = vt_gguf_kv_type(g, i);
    switch (t) {
    case VT_GGUF_UINT32: {
        uint32_t v;
        assert_int_equal(vt_gguf_get_u32(g, src, &v), VT_OK);
        assert_int_equal(vt_gguf_writer_set_u32(w, key, v), VT_OK);
        break;
    }
    case VT_GGUF_INT32: case VT_GGUF_UINT16: {
        int64_t v;
        assert_int_equal(vt_gguf_get_i64(g, src, &v), VT_OK);
        if (t == VT_GGUF_INT32) assert_int_equal(vt_gguf_writer_set_i32(w, key, (int32_t)v), VT_OK);
        else assert_int_equal(vt_gguf_writer_set_u16(w, key, (uint16_t)v), VT_OK);
        break;
    }
    case VT_GGUF_FLOAT32: {
        float v;
        assert_int_equal(vt_gguf_get_f32(g, src, &v), VT_OK);
        assert_int_equal(vt_gguf_writer_set_f32(w, key, v), VT_OK);
        break;
    }
    case VT_GGUF_BOOL: {
        int v;
        assert_int_equal(vt_gguf_get_bool(g, src, &v), VT_OK);
        assert_int_equal(vt_gguf_writer_set_bool(w, key, v), VT_OK);
        break;
    }
    case VT_GGUF_STRING: {
        vt_gguf_str s;
        assert_int_equal(vt_gguf_get_str(g, src, &s), VT_OK);
        const char *v = s.ptr;
        if (ed->arch && !strcmp(key, "general.architecture")) v = ed->arch;
        if (ed->dense && !strcmp(key, "general.architecture")) v = "qwen35";
        assert_int_equal(vt_gguf_writer_set_str(w, key, v), VT_OK);
        break;
    }
    case VT_GGUF_ARRAY: {
        vt_gguf_type et;
        uint64_t n;
        const void *data;
        assert_int_equal(vt_gguf_get_arr(g, src, &et, &n, &data), VT_OK);
        if (et == VT_GGUF_STRING) {
            const char **v = malloc(sizeof(char *) * (size_t)(n ? n : 1));
            for (uint64_t j = 0; j < n; j++) {
                vt_gguf_str s;
                assert_int_equal(vt_gguf_get_arr_str(g, src, j, &s), VT_OK);
                v[j] = s.ptr;
            }
            assert_int_equal(vt_gguf_writer_set_arr_str(w, key, v, n), VT_OK);
            free(v);
        } else {
            assert_int_equal(vt_gguf_writer_set_arr(w, key, et, data, n), VT_OK);
        }
        break;
    }
    default:
        fail_msg("copy_kv: key %s has a type this test does not copy (%d)", key, (int)t);
    }
}

static void add_tensor_as(vt_gguf_writer *w, const vt_gguf_tensor *t, const char *name,
                          const edits *ed)
{
    int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
    uint32_t nd = t->n_dims, type = t->type;
    uint64_t nbytes = t->nbytes;
    const void *data = t->data;
    void *tmp = NULL;
    if (ed->shape_tensor && !strcmp(t->name, ed->shape_tensor)) {
        ne[1] = ed->shape_ne1;
        nbytes = t->nbytes / (uint64_t)t->ne[1] * (uint64_t)ed->shape_ne1;
        tmp = calloc(1, nbytes);
        memcpy(tmp, t->data, nbytes < t->nbytes ? nbytes : t->nbytes);
        data = tmp;
    }
    if (ed->f16_tensor && !strcmp(t->name, ed->f16_tensor)) {
        type = 1; /* F16 */
        nbytes = t->nbytes / 2;
    }
    if (ed->relabel_tensor && !strcmp(t->name, ed->relabel_tensor)) type = ed->relabel_type;
    if (ed->shexp_1d && strstr(t->name, "ffn_gate_inp_shexp")) nd = 1;
    assert_int_equal(vt_gguf_writer_add_tensor(w, name, type, nd, ne, data, nbytes), VT_OK);
    free(tmp);
}

/* FFN tensors of the dense / moe_as_dense variants (the fixture's n_ff_exp and
 * n_ff_shexp are both 256, so the shared expert's matrices fit either role). */
static void ffn_variant(const vt_gguf *g, vt_gguf_writer *w, const vt_gguf_tensor *t,
                        const edits *ed)
{
    static const char *const mats[3] = {"gate", "up", "down"};
    int il;
    char kind[64];
    assert_int_equal(sscanf(t->name, "blk.%d.%63[^.]", &il, kind), 2);
    for (int j = 0; j < 3; j++) {
        char want[64], nm[96], src[96];
        snprintf(want, sizeof want, "ffn_%s_shexp", mats[j]);
        if (strcmp(kind, want)) continue;
        snprintf(src, sizeof src, "blk.%d.ffn_%s_shexp.weight", il, mats[j]);
        const vt_gguf_tensor *sh = vt_gguf_find_tensor(g, src);
        assert_non_null(sh);
        if (ed->dense) {
            snprintf(nm, sizeof nm, "blk.%d.ffn_%s.weight", il, mats[j]);
            assert_int_equal(vt_gguf_writer_add_tensor(w, nm, sh->type, 2, sh->ne, sh->data,
                                                       sh->nbytes), VT_OK);
            return;
        }
        /* moe_as_dense: stack 8 copies; keep the shared expert, zero its down */
        int64_t ne[3] = {sh->ne[0], sh->ne[1], 8};
        uint8_t *stack = malloc(sh->nbytes * 8);
        for (int e = 0; e < 8; e++) memcpy(stack + (size_t)e * sh->nbytes, sh->data, sh->nbytes);
        snprintf(nm, sizeof nm, "blk.%d.ffn_%s_exps.weight", il, mats[j]);
        assert_int_equal(vt_gguf_writer_add_tensor(w, nm, sh->type, 3, ne, stack, sh->nbytes * 8),
                         VT_OK);
        free(stack);
        void *zero = calloc(1, sh->nbytes);
        assert_int_equal(vt_gguf_writer_add_tensor(w, sh->name, sh->type, 2, sh->ne,
                                                   j == 2 ? zero : sh->data, sh->nbytes), VT_OK);
        free(zero);
        return;
    }
    /* routed stacks are rebuilt above; the router and shared gate stay for the MoE variant */
    if (ed->moe_as_dense && (!strcmp(kind, "ffn_gate_inp") || !strcmp(kind, "ffn_gate_inp_shexp")))
        add_tensor_as(w, t, t->name, ed);
}

/* Write an edited copy of fixture file `src` to g_tmp/<out>; returns the path. */
static char *write_variant(const char *src, const char *out, const edits *ed)
{
    char *sp = fx_file(src);
    vt_gguf *g;
    if (vt_gguf_open(sp, 0, &g) != VT_OK) fail_msg("open %s: %s", sp, vt_last_error());
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    for (int64_t i = 0; i < vt_gguf_n_kv(g); i++) copy_kv(g, w, i, ed);
    if (ed->set_u32_key)
        assert_int_equal(vt_gguf_writer_set_u32(w, ed->set_u32_key, ed->set_u32_val), VT_OK);
    if (ed->add_mtp) {
        assert_int_equal(vt_gguf_writer_set_u32(w, "qwen35moe.block_count", 5), VT_OK);
        assert_int_equal(vt_gguf_writer_set_u32(w, "qwen35moe.nextn_predict_layers", 1), VT_OK);
    }
    if (ed->dense)
        assert_int_equal(vt_gguf_writer_set_u32(w, "qwen35.feed_forward_length", 256), VT_OK);
    if (ed->per_layer_keys) { /* §3: u32[] per block; zeros where a layer has no attention */
        const int32_t nh[4] = {0, 0, 0, 4}, nkv[4] = {0, 0, 0, 2};
        const uint8_t rec[4] = {1, 1, 1, 0};
        assert_int_equal(vt_gguf_writer_set_arr(w, "qwen35moe.attention.head_count", VT_GGUF_INT32,
                                                nh, 4), VT_OK);
        assert_int_equal(vt_gguf_writer_set_arr(w, "qwen35moe.attention.head_count_kv",
                                                VT_GGUF_INT32, nkv, 4), VT_OK);
        assert_int_equal(vt_gguf_writer_set_arr(w, "qwen35moe.attention.recurrent_layers",
                                                VT_GGUF_BOOL, rec, 4), VT_OK);
        assert_int_equal(vt_gguf_writer_set_u32(w, "qwen35moe.full_attention_interval", 3), VT_OK);
    }
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (ed->drop_tensor && !strcmp(t->name, ed->drop_tensor)) continue;
        if ((ed->dense || ed->moe_as_dense) && strstr(t->name, "ffn_")) {
            ffn_variant(g, w, t, ed);
            continue;
        }
        add_tensor_as(w, t, t->name, ed);
        if (ed->add_mtp && !strncmp(t->name, "blk.3.", 6)) {
            char nm[128];
            snprintf(nm, sizeof nm, "blk.4.%s", t->name + 6);
            add_tensor_as(w, t, nm, ed);
        }
    }
    if (ed->add_mtp) {
        /* the NextN head's own tensors (§4.7); F32 zeros are fine: never read */
        int64_t ne_eh[2] = {512, 256}, ne_n[1] = {256};
        float *z = calloc(512 * 256, sizeof(float));
        assert_int_equal(vt_gguf_writer_add_tensor(w, "blk.4.nextn.eh_proj.weight", 0, 2, ne_eh, z,
                                                   512 * 256 * 4), VT_OK);
        assert_int_equal(vt_gguf_writer_add_tensor(w, "blk.4.nextn.enorm.weight", 0, 1, ne_n, z,
                                                   256 * 4), VT_OK);
        assert_int_equal(vt_gguf_writer_add_tensor(w, "blk.4.nextn.hnorm.weight", 0, 1, ne_n, z,
                                                   256 * 4), VT_OK);
        free(z);
    }
    char *op = vt_test_path(g_tmp, out);
    if (vt_gguf_writer_write(w, op) != VT_OK) fail_msg("write %s: %s", op, vt_last_error());
    vt_gguf_writer_free(w);
    vt_gguf_close(g);
    free(sp);
    return op;
}

/* ---- driving the plugin ---- */

static vt_status caps_of(const char *path, uint32_t *ids, uint32_t *n)
{
    vt_gguf *g;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("open %s: %s", path, vt_last_error());
    vt_clear_error();
    vt_status st = g_mapi->required_caps(vt_host_table(), g, ids, 256, n);
    vt_gguf_close(g);
    return st;
}

static int has_cap(const uint32_t *ids, uint32_t n, uint32_t id)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

static void expect_refusal(const char *path, vt_status want, const char *n1, const char *n2,
                           const char *n3)
{
    uint32_t ids[256], n;
    vt_status st = caps_of(path, ids, &n);
    const char *msg = vt_last_error();
    printf("[qwen35] refused %s: %s\n", strrchr(path, '/') + 1, msg);
    if (st == VT_OK) fail_msg("%s was accepted", path);
    if (want != VT_OK && st != want) fail_msg("%s: status %d, expected %d (%s)", path, st, want, msg);
    const char *needles[3] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i] && !strstr(msg, needles[i]))
            fail_msg("refusal of %s does not mention '%s': %s", path, needles[i], msg);
}

static void test_required_caps(void **state)
{
    (void)state;
    if (!setup_env()) return;
    uint32_t ids[256], n;
    char *p = fx_file("qwen35moe-tiny-bf16.gguf");
    if (caps_of(p, ids, &n) != VT_OK) fail_msg("required_caps(bf16): %s", vt_last_error());
    assert_true(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_BF16)));
    assert_true(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_F32))); /* routers, shared-expert gate */
    assert_true(has_cap(ids, n, VT_CAP_GET_ROWS(VT_TYPE_BF16)));
    assert_false(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_Q8_0)));
    assert_false(has_cap(ids, n, VT_CAP_GET_ROWS(VT_TYPE_F32)));
    const uint32_t ops[] = {VT_CAP_OP_RMS_NORM, VT_CAP_OP_L2_NORM, VT_CAP_OP_ROPE_NEOX,
                            VT_CAP_OP_ATTENTION, VT_CAP_OP_SSM_CONV, VT_CAP_OP_GATED_DELTA_NET,
                            VT_CAP_OP_UNARY, VT_CAP_OP_BINARY, VT_CAP_OP_SCALE,
                            VT_CAP_OP_MUL_ROWS, VT_CAP_OP_COPY_2D, VT_CAP_OP_GATHER_ROWS,
                            VT_CAP_OP_SCATTER_ADD, VT_CAP_OP_SOFTMAX_TOPK};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) assert_true(has_cap(ids, n, ops[i]));
    free(p);
    p = fx_file("qwen35moe-tiny-q8_0.gguf");
    if (caps_of(p, ids, &n) != VT_OK) fail_msg("required_caps(q8_0): %s", vt_last_error());
    assert_true(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_Q8_0)));
    assert_true(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_F32)));
    assert_true(has_cap(ids, n, VT_CAP_GET_ROWS(VT_TYPE_Q8_0)));
    assert_false(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_BF16)));
    free(p);
    /* too small an id array is an error that says how many are needed */
    vt_gguf *g;
    p = fx_file("qwen35moe-tiny-bf16.gguf");
    assert_int_equal(vt_gguf_open(p, 0, &g), VT_OK);
    assert_int_equal(g_mapi->required_caps(vt_host_table(), g, ids, 3, &n), VT_ERR_RANGE);
    assert_true(n > 3);
    vt_gguf_close(g);
    free(p);
}

/* token_embd is read by get_rows only, unless it is also the LM head (no
 * output.weight): a token_embd type different from every matrix's (F16 here,
 * the bf16 bytes relabelled: only the types matter to required_caps) shows
 * which of the two it is asked for. */
static void test_required_caps_embd(void **state)
{
    (void)state;
    if (!setup_env()) return;
    uint32_t ids[256], n;
    const char *src = "qwen35moe-tiny-bf16.gguf";
    char *p = write_variant(src, "embd-f16.gguf",
                            &(edits){.relabel_tensor = "token_embd.weight",
                                     .relabel_type = VT_TYPE_F16});
    if (caps_of(p, ids, &n) != VT_OK) fail_msg("required_caps(embd f16): %s", vt_last_error());
    assert_true(has_cap(ids, n, VT_CAP_GET_ROWS(VT_TYPE_F16)));
    assert_false(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_F16)));
    assert_true(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_BF16))); /* output.weight */
    assert_false(has_cap(ids, n, VT_CAP_GET_ROWS(VT_TYPE_BF16)));
    free(p);
    p = write_variant(src, "embd-f16-tied.gguf",
                      &(edits){.relabel_tensor = "token_embd.weight", .relabel_type = VT_TYPE_F16,
                               .drop_tensor = "output.weight"});
    if (caps_of(p, ids, &n) != VT_OK) fail_msg("required_caps(tied f16): %s", vt_last_error());
    assert_true(has_cap(ids, n, VT_CAP_GET_ROWS(VT_TYPE_F16)));
    assert_true(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_F16)));
    free(p);
}

static void test_refusals(void **state)
{
    (void)state;
    if (!setup_env()) return;
    const char *src = "qwen35moe-tiny-bf16.gguf";
    char *p;

    p = write_variant(src, "no-key.gguf", &(edits){.drop_key = "qwen35moe.ssm.state_size"});
    expect_refusal(p, VT_ERR_NOT_FOUND, "qwen35moe.ssm.state_size", NULL, NULL);
    free(p);

    p = write_variant(src, "no-sections.gguf",
                      &(edits){.drop_key = "qwen35moe.rope.dimension_sections"});
    expect_refusal(p, VT_ERR_NOT_FOUND, "qwen35moe.rope.dimension_sections", NULL, NULL);
    free(p);

    p = write_variant(src, "bad-shape.gguf",
                      &(edits){.shape_tensor = "blk.1.attn_gate.weight", .shape_ne1 = 128});
    expect_refusal(p, VT_ERR_FORMAT, "blk.1.attn_gate.weight", "[256, 128]", "[256, 256]");
    free(p);

    p = write_variant(src, "bad-experts.gguf",
                      &(edits){.shape_tensor = "blk.2.ffn_down_exps.weight", .shape_ne1 = 128});
    expect_refusal(p, VT_ERR_FORMAT, "blk.2.ffn_down_exps.weight", "[256, 128, 8]",
                   "[256, 256, 8]");
    free(p);

    p = write_variant(src, "f16-norm.gguf", &(edits){.f16_tensor = "blk.3.attn_q_norm.weight"});
    expect_refusal(p, VT_ERR_UNSUPPORTED, "blk.3.attn_q_norm.weight", "F32", NULL);
    free(p);

    p = write_variant(src, "no-tensor.gguf", &(edits){.drop_tensor = "blk.2.ssm_a"});
    expect_refusal(p, VT_ERR_NOT_FOUND, "blk.2.ssm_a", NULL, NULL);
    free(p);

    p = write_variant(src, "sidecar.gguf", &(edits){.drop_tensor = "blk.0.attn_norm.weight"});
    expect_refusal(p, VT_ERR_UNSUPPORTED, "blk.0.attn_norm.weight", "MTP", NULL);
    free(p);

    p = write_variant(src, "next.gguf", &(edits){.arch = "qwen3next"});
    expect_refusal(p, VT_ERR_UNSUPPORTED, "qwen3next", NULL, NULL);
    free(p);

    p = write_variant(src, "kv-len.gguf",
                      &(edits){.set_u32_key = "qwen35moe.attention.value_length", .set_u32_val = 32});
    expect_refusal(p, VT_ERR_FORMAT, "value_length", NULL, NULL);
    free(p);

    p = write_variant(src, "nv-nk.gguf",
                      &(edits){.set_u32_key = "qwen35moe.ssm.time_step_rank", .set_u32_val = 3});
    expect_refusal(p, VT_ERR_FORMAT, "time_step_rank", NULL, NULL);
    free(p);

    p = write_variant(src, "topk.gguf",
                      &(edits){.set_u32_key = "qwen35moe.expert_used_count", .set_u32_val = 9});
    expect_refusal(p, VT_ERR_FORMAT, "expert_used_count", NULL, NULL);
    free(p);

    p = write_variant(src, "nextn.gguf",
                      &(edits){.set_u32_key = "qwen35moe.nextn_predict_layers", .set_u32_val = 4});
    expect_refusal(p, VT_ERR_FORMAT, "nextn_predict_layers", NULL, NULL);
    free(p);
}

/* ---- full loads through a CPU backend ---- */

typedef struct loaded {
    vt_gguf *g;
    vt_backend be;
    vt_model *m;
    vt_model_seq *s;
    vt_backend_api wrapped; /* table with edited capability list (copy path) */
    vt_capability *caps;
} loaded;

static void load_model(loaded *L, const char *path, int hide_host_addressable)
{
    memset(L, 0, sizeof *L);
    if (vt_gguf_open(path, 0, &L->g) != VT_OK) fail_msg("open %s: %s", path, vt_last_error());
    const vt_backend_api *api = g_bapi;
    if (hide_host_addressable) {
        L->wrapped = *g_bapi;
        L->caps = malloc(sizeof(vt_capability) * g_bapi->n_caps);
        memcpy(L->caps, g_bapi->caps, sizeof(vt_capability) * g_bapi->n_caps);
        for (uint32_t i = 0; i < g_bapi->n_caps; i++)
            if (L->caps[i].id == VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY) {
                L->caps[i].state = VT_CAP_ABSENT;
                L->caps[i].reason = "hidden by the test (copy path)";
            }
        L->wrapped.caps = L->caps;
        api = &L->wrapped;
    }
    vt_backend_params bp = {.struct_size = sizeof bp, .device = 0, .n_threads = 0,
                            .kernels = "scalar", .host = vt_host_table()};
    if (api->init(&bp, &L->be.ctx) != VT_OK) fail_msg("cpu init: %s", vt_last_error());
    L->be.api = api;
    L->be.name = "cpu";
    vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = 64, .n_batch = 16};
    if (g_mapi->load(vt_host_table(), L->g, &L->be, &mp, &L->m) != VT_OK)
        fail_msg("load %s: %s", path, vt_last_error());
    if (g_mapi->seq_new(L->m, &L->s) != VT_OK) fail_msg("seq_new: %s", vt_last_error());
}

static void unload_model(loaded *L)
{
    g_mapi->seq_free(L->m, L->s);
    g_mapi->free(L->m);
    L->be.api->shutdown(L->be.ctx);
    vt_gguf_close(L->g);
    free(L->caps);
}

static const int32_t k_prompt[8] = {539, 2784, 322, 1821, 71, 300, 294, 220};

static float *logits_of(loaded *L)
{
    vt_model_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    g_mapi->info(L->m, &info);
    assert_int_equal(info.n_layer, 4);
    float *out = malloc(sizeof(float) * 8 * (size_t)info.n_vocab);
    assert_int_equal(g_mapi->seq_reset(L->m, L->s), VT_OK);
    if (g_mapi->forward(L->m, L->s, k_prompt, 8, out, 1) != VT_OK)
        fail_msg("forward: %s", vt_last_error());
    assert_int_equal(g_mapi->seq_pos(L->m, L->s), 8);
    return out;
}

static void same_logits(const char *a_path, int a_copy, const char *b_path, int b_copy,
                        const char *what)
{
    loaded A, B;
    load_model(&A, a_path, a_copy);
    float *la = logits_of(&A);
    unload_model(&A);
    load_model(&B, b_path, b_copy);
    float *lb = logits_of(&B);
    unload_model(&B);
    if (memcmp(la, lb, sizeof(float) * 8 * 4096)) fail_msg("%s: logits differ", what);
    printf("[qwen35] %s: logits bit-identical\n", what);
    free(la);
    free(lb);
}

static void test_mtp_block_skipped(void **state)
{
    (void)state;
    if (!setup_backend()) return;
    char *orig = fx_file("qwen35moe-tiny-bf16.gguf");
    char *mtp = write_variant("qwen35moe-tiny-bf16.gguf", "mtp.gguf", &(edits){.add_mtp = 1});
    vt_gguf *g;
    uint32_t bc = 0;
    assert_int_equal(vt_gguf_open(mtp, 0, &g), VT_OK);
    assert_int_equal(vt_gguf_get_u32(g, "qwen35moe.block_count", &bc), VT_OK);
    assert_int_equal(bc, 5);
    assert_non_null(vt_gguf_find_tensor(g, "blk.4.attn_q.weight"));
    assert_non_null(vt_gguf_find_tensor(g, "blk.4.ffn_down_exps.weight"));
    vt_gguf_close(g);
    same_logits(orig, 0, mtp, 0, "file with an MTP block vs without");
    free(orig);
    free(mtp);
}

static void test_shexp_gate_1d(void **state)
{
    (void)state;
    if (!setup_backend()) return;
    char *orig = fx_file("qwen35moe-tiny-bf16.gguf");
    char *v = write_variant("qwen35moe-tiny-bf16.gguf", "shexp1d.gguf", &(edits){.shexp_1d = 1});
    same_logits(orig, 0, v, 0, "1-D vs 2-D ffn_gate_inp_shexp");
    free(orig);
    free(v);
}

/* The dense qwen35 path on a dense file whose FFN equals, by construction, the
 * MoE FFN of a qwen35moe file (all experts identical, shared expert off):
 * same logits up to rounding (the MoE sums w1·y + w2·y with w1 + w2 = 1). */
static void test_dense_variant(void **state)
{
    (void)state;
    if (!setup_backend()) return;
    char *d = write_variant("qwen35moe-tiny-bf16.gguf", "dense.gguf", &(edits){.dense = 1});
    char *m = write_variant("qwen35moe-tiny-bf16.gguf", "moe-dense.gguf",
                            &(edits){.moe_as_dense = 1});
    uint32_t ids[256], n;
    if (caps_of(d, ids, &n) != VT_OK) fail_msg("required_caps(dense): %s", vt_last_error());
    assert_false(has_cap(ids, n, VT_CAP_OP_SOFTMAX_TOPK));
    assert_true(has_cap(ids, n, VT_CAP_MAT_MUL(VT_TYPE_BF16)));
    loaded A, B;
    load_model(&A, d, 0);
    float *la = logits_of(&A);
    unload_model(&A);
    load_model(&B, m, 0);
    float *lb = logits_of(&B);
    unload_model(&B);
    double md = 0, mx = 0;
    for (size_t i = 0; i < 8 * 4096; i++) {
        double dd = fabs((double)la[i] - (double)lb[i]);
        if (!(dd <= md)) md = dd;
        if (fabs(lb[i]) > mx) mx = fabs(lb[i]);
    }
    printf("[qwen35] dense qwen35 vs equivalent qwen35moe: max |d| %.3g (max |logit| %.3g)\n", md,
           mx);
    if (!(md <= 1e-4 * mx)) fail_msg("dense vs MoE-equivalent: max |d| %.4g", md);
    free(la);
    free(lb);
    free(d);
    free(m);
}

/* Per-block head counts and an explicit recurrent_layers array (overriding a
 * deliberately wrong full_attention_interval) describe the same model. */
static void test_per_layer_keys(void **state)
{
    (void)state;
    if (!setup_backend()) return;
    char *orig = fx_file("qwen35moe-tiny-bf16.gguf");
    char *v = write_variant("qwen35moe-tiny-bf16.gguf", "per-layer.gguf",
                            &(edits){.per_layer_keys = 1});
    vt_gguf *g;
    uint32_t u;
    assert_int_equal(vt_gguf_open(v, 0, &g), VT_OK);
    assert_int_not_equal(vt_gguf_get_u32(g, "qwen35moe.attention.head_count", &u), VT_OK);
    vt_gguf_close(g);
    same_logits(orig, 0, v, 0, "per-layer head counts + recurrent_layers vs scalars");
    free(orig);
    free(v);
}

static void test_copy_path(void **state)
{
    (void)state;
    if (!setup_backend()) return;
    char *p = fx_file("qwen35moe-tiny-q8_0.gguf");
    same_logits(p, 0, p, 1, "copy_h2d path vs zero-copy path");
    free(p);
}

static void test_forward_errors(void **state)
{
    (void)state;
    if (!setup_backend()) return;
    char *p = fx_file("qwen35moe-tiny-q8_0.gguf");
    loaded L;
    load_model(&L, p, 0);
    float *out = malloc(sizeof(float) * 4096);
    int32_t bad = 4096;
    assert_int_equal(g_mapi->forward(L.m, L.s, &bad, 1, out, 0), VT_ERR_RANGE);
    assert_non_null(strstr(vt_last_error(), "n_vocab"));
    int32_t many[17] = {0};
    assert_int_equal(g_mapi->forward(L.m, L.s, many, 17, out, 0), VT_ERR_RANGE); /* > n_batch */
    assert_non_null(strstr(vt_last_error(), "n_batch"));
    for (int i = 0; i < 4; i++) assert_int_equal(g_mapi->forward(L.m, L.s, many, 16, NULL, 0), VT_OK);
    assert_int_equal(g_mapi->forward(L.m, L.s, many, 1, out, 0), VT_ERR_RANGE); /* n_ctx 64 full */
    assert_non_null(strstr(vt_last_error(), "n_ctx"));
    free(out);
    unload_model(&L);
    free(p);
}

/* Absurd n_ctx / n_batch from the caller are refused by name before any
 * allocation is sized from them (positions and routed pairs are int32). */
static void test_params_range(void **state)
{
    (void)state;
    if (!setup_backend()) return;
    char *p = fx_file("qwen35moe-tiny-q8_0.gguf");
    vt_gguf *g;
    assert_int_equal(vt_gguf_open(p, 0, &g), VT_OK);
    vt_backend be = {.api = g_bapi, .name = "cpu"};
    vt_backend_params bp = {.struct_size = sizeof bp, .kernels = "scalar", .host = vt_host_table()};
    assert_int_equal(g_bapi->init(&bp, &be.ctx), VT_OK);
    const uint32_t cases[2][2] = {{UINT32_MAX, 16}, {64, UINT32_MAX}};
    for (int i = 0; i < 2; i++) {
        vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = cases[i][0],
                              .n_batch = cases[i][1]};
        vt_model *m = NULL;
        assert_int_equal(g_mapi->load(vt_host_table(), g, &be, &mp, &m), VT_ERR_RANGE);
        assert_null(m);
        assert_non_null(strstr(vt_last_error(), i == 0 ? "n_ctx" : "n_batch"));
        printf("[qwen35] refused: %s\n", vt_last_error());
    }
    g_bapi->shutdown(be.ctx);
    vt_gguf_close(g);
    free(p);
}

static int teardown(void **state)
{
    (void)state;
    if (g_reg) vt_registry_close(g_reg);
    if (g_tmp[0]) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_tmp);
    }
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_required_caps),    cmocka_unit_test(test_required_caps_embd),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_mtp_block_skipped), cmocka_unit_test(test_shexp_gate_1d),
        cmocka_unit_test(test_copy_path),         cmocka_unit_test(test_forward_errors),
        cmocka_unit_test(test_dense_variant),     cmocka_unit_test(test_per_layer_keys),
        cmocka_unit_test(test_params_range),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, teardown));
}

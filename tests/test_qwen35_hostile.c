/*
 * test_qwen35_hostile.c - hostile hyperparameters against the Qwen3.5 model
 * plugin, through the whole load path.
 *
 * Every metadata key the loader reads (spec qwen35moe.md §3) is, one at a
 * time, in an otherwise unchanged copy of the qwen35moe-tiny q8_0 fixture
 * (written with the GGUF writer; q8_0 rather than bf16: half the bytes to
 * write, 190-odd times):
 *   - set to 0, 1, 2^31 and 2^32-1 (u32 keys; block_count also 2^28),
 *   - set to 0, 1, 2^31, 2^32-1, NaN, +inf, -inf and a negative value (f32
 *     keys: attention.layer_norm_rms_epsilon, rope.freq_base),
 *   - given a wrong type (a string; -1 as i32 or a float for u32 keys, a u32
 *     for f32 keys),
 *   - removed,
 * plus per-block arrays for the head counts and attention.recurrent_layers.
 * Each copy goes through the plugin's required_caps directly, then
 * vt_engine_open (required_caps, tokenizer, load, seq_new) and, when that
 * succeeds, one forward of 4 tokens. Each step must either work or refuse
 * with a message that names the key (a forward refused for lack of context
 * may name the context instead); nothing may crash (ASan/UBSan in the
 * sanitizer build), and the whole run must stay under 1 GiB of peak RSS.
 * The expected outcome of every case (refused at load, loads but the 4-token
 * forward is refused, or works with finite logits) is written in the tables:
 * it follows from §3's rules and the fixture's shapes (n_embd 256, 4 blocks
 * with blk.3 full attention, head_dim 64, 4/2 heads, 8 experts top-2,
 * d_conv 4, d_k 64, n_k 2, n_v 4, inner_size 256), not from the code.
 */
#include "test_util.h"

#include <math.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine.h"
#include "error.h"
#include "registry.h"
#include "vt/gguf.h"
#include "vt/model.h"

#define ARCH "qwen35moe."

/* Outcome of one case. */
typedef enum outcome {
    OUT_REFUSED = 'R',  /* refused at load (required_caps or engine open) */
    OUT_NO_FIT = 'C',   /* loads; the 4-token forward is refused (context too short) */
    OUT_WORKS = 'W'     /* loads, and the forward gives finite logits */
} outcome;

static const char *g_src;     /* fixture file */
static char g_tmp[512];       /* temp folder */
static vt_gguf *g_g;          /* the fixture, open */
static vt_gguf_writer *g_w;   /* the fixture's copy, edited key by key */
static vt_registry *g_reg;
static const vt_model_api *g_mapi;
static int g_cases, g_refused, g_works, g_nofit;

/* ---- copying the fixture ---- */

/* Copy metadata entry key of g_g into w (replacing any value w has for it).
 * The writer cannot remove a key: one the fixture lacks (nextn_predict_layers)
 * is restored as its default, which means the same. */
static void copy_key(vt_gguf_writer *w, const char *key)
{
    int64_t i = vt_gguf_find_key(g_g, key);
    if (i < 0 && !strcmp(key, ARCH "nextn_predict_layers")) {
        assert_int_equal(vt_gguf_writer_set_u32(w, key, 0), VT_OK);
        return;
    }
    if (i < 0) fail_msg("key %s is not in the fixture", key);
    vt_gguf_type t = vt_gguf_kv_type(g_g, i);
    switch (t) {
    case VT_GGUF_UINT32: {
        uint32_t v;
        assert_int_equal(vt_gguf_get_u32(g_g, key, &v), VT_OK);
        assert_int_equal(vt_gguf_writer_set_u32(w, key, v), VT_OK);
        break;
    }
    case VT_GGUF_INT32: {
        int64_t v;
        assert_int_equal(vt_gguf_get_i64(g_g, key, &v), VT_OK);
        assert_int_equal(vt_gguf_writer_set_i32(w, key, (int32_t)v), VT_OK);
        break;
    }
    case VT_GGUF_FLOAT32: {
        float v;
        assert_int_equal(vt_gguf_get_f32(g_g, key, &v), VT_OK);
        assert_int_equal(vt_gguf_writer_set_f32(w, key, v), VT_OK);
        break;
    }
    case VT_GGUF_STRING: {
        vt_gguf_str s;
        assert_int_equal(vt_gguf_get_str(g_g, key, &s), VT_OK);
        assert_int_equal(vt_gguf_writer_set_str(w, key, s.ptr), VT_OK);
        break;
    }
    case VT_GGUF_ARRAY: {
        vt_gguf_type et;
        uint64_t n;
        const void *data;
        assert_int_equal(vt_gguf_get_arr(g_g, key, &et, &n, &data), VT_OK);
        if (et == VT_GGUF_STRING) {
            const char **v = malloc(sizeof(char *) * (size_t)(n ? n : 1));
            assert_non_null(v);
            for (uint64_t j = 0; j < n; j++) {
                vt_gguf_str s;
                assert_int_equal(vt_gguf_get_arr_str(g_g, key, j, &s), VT_OK);
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
        fail_msg("key %s has a type this test does not copy (%d)", key, (int)t);
    }
}

/* A writer holding the whole fixture except metadata key `skip` (NULL: all). */
static vt_gguf_writer *copy_fixture(const char *skip)
{
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    assert_non_null(w);
    for (int64_t i = 0; i < vt_gguf_n_kv(g_g); i++) {
        const char *key = vt_gguf_kv_key(g_g, i);
        if (!strncmp(key, "GGUF.", 5) || !strcmp(key, "general.alignment")) continue;
        if (skip && !strcmp(key, skip)) continue;
        copy_key(w, key);
    }
    for (int64_t i = 0; i < vt_gguf_n_tensors(g_g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g_g, i);
        assert_int_equal(vt_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                                   t->nbytes), VT_OK);
    }
    return w;
}

/* Fixture, temp folder and plugin registry, once; a fresh unedited copy of
 * the fixture in g_w for each test. */
static int setup_env(void)
{
    if (g_g) {
        vt_gguf_writer_free(g_w);
        g_w = copy_fixture(NULL);
        return 1;
    }
    const char *fx = vt_test_fixtures();
    if (!fx) return 0;
    g_src = vt_test_path(fx, "qwen35moe-tiny/gguf/qwen35moe-tiny-q8_0.gguf");
    if (vt_gguf_open(g_src, 0, &g_g) != VT_OK) fail_msg("open %s: %s", g_src, vt_last_error());
    const char *bin = getenv("VT_TEST_BINARY_DIR");
    snprintf(g_tmp, sizeof g_tmp, "%s/qwen35-hostile-XXXXXX", bin ? bin : "/tmp");
    assert_non_null(mkdtemp(g_tmp));
    g_w = copy_fixture(NULL);
    const char *dirs[] = {vt_test_plugin_dir(), NULL};
    assert_int_equal(vt_registry_open(dirs, &g_reg), VT_OK);
    const vt_plugin_entry *mp = vt_registry_find(g_reg, VT_PLUGIN_MODEL, "qwen35");
    if (!mp) fail_msg("model plugin 'qwen35' not found in %s", vt_test_plugin_dir());
    g_mapi = mp->desc->table;
    return 1;
}

/* ---- running one case ---- */

/* Whether msg names key: the key text not followed by a name character (so
 * "attention.head_count" is not found inside "attention.head_count_kv"). */
static int names_key(const char *msg, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = strstr(msg, key); p; p = strstr(p + 1, key)) {
        char c = p[n];
        if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return 1;
    }
    return 0;
}

static const int32_t k_tokens[4] = {539, 2784, 322, 1821};

/* Load `path` (written for key `suffix`, described by `what`) and check that it
 * behaves as `want`. */
static void run_case(const char *path, const char *suffix, const char *what, outcome want)
{
    const char *key = suffix; /* messages name keys with or without the "qwen35moe." */
    g_cases++;

    /* 1. the plugin's required_caps, directly */
    vt_gguf *g;
    if (vt_gguf_open(path, 0, &g) != VT_OK) fail_msg("%s: open: %s", what, vt_last_error());
    uint32_t ids[512], n = 0;
    vt_clear_error();
    vt_status st_caps = g_mapi->required_caps(vt_host_table(), g, ids, 512, &n);
    char caps_msg[1024];
    snprintf(caps_msg, sizeof caps_msg, "%s", vt_last_error());
    vt_gguf_close(g);
    if (st_caps != VT_OK && (!caps_msg[0] || !names_key(caps_msg, key)))
        fail_msg("%s: required_caps refused (status %d) without naming '%s': '%s'", what, st_caps,
                 key, caps_msg);

    /* 2. the engine: required_caps, tokenizer, load, seq_new */
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(), .device = "cpu",
                          .n_threads = 1, .n_ctx = 0, .n_batch = 0};
    vt_engine *e = NULL;
    vt_clear_error();
    vt_status st = vt_engine_open(&p, &e);
    if (st != VT_OK) {
        const char *msg = vt_last_error();
        printf("[hostile] %-58s refused: %s\n", what, msg);
        if (!msg[0] || !names_key(msg, key))
            fail_msg("%s: refused at load (status %d) without naming '%s': '%s'", what, st, key,
                     msg);
        if (st_caps == VT_OK && st == VT_ERR_CAPABILITY)
            fail_msg("%s: required_caps accepted it but the engine refused a capability: %s",
                     what, msg);
        if (want != OUT_REFUSED) fail_msg("%s: expected it to load; refused: %s", what, msg);
        g_refused++;
        return;
    }
    if (st_caps != VT_OK)
        fail_msg("%s: required_caps refused it ('%s') but the engine loaded it", what, caps_msg);

    /* 3. one forward of 4 tokens */
    vt_model_info info;
    vt_engine_model_info(e, &info);
    float *logits = malloc(sizeof(float) * (size_t)info.n_vocab);
    assert_non_null(logits);
    vt_clear_error();
    st = vt_engine_eval(e, k_tokens, 4, logits, 0);
    if (st != VT_OK) {
        const char *msg = vt_last_error();
        printf("[hostile] %-58s loads, forward refused: %s\n", what, msg);
        if (!msg[0] || !(names_key(msg, key) || strstr(msg, "context")))
            fail_msg("%s: forward refused (status %d) without naming '%s' or the context: '%s'",
                     what, st, key, msg);
        if (want != OUT_NO_FIT) fail_msg("%s: forward refused unexpectedly: %s", what, msg);
        g_nofit++;
    } else {
        int64_t bad = 0;
        for (int64_t i = 0; i < info.n_vocab; i++) bad += !isfinite(logits[i]);
        printf("[hostile] %-58s works (%lld layers, n_ctx %lld)\n", what,
               (long long)info.n_layer, (long long)info.n_ctx);
        if (bad) fail_msg("%s: %lld of %lld logits are not finite", what, (long long)bad,
                          (long long)info.n_vocab);
        if (want != OUT_WORKS) fail_msg("%s: expected %c, but it loaded and ran", what, want);
        g_works++;
    }
    free(logits);
    vt_engine_close(e);
}

/* Write g_w (already edited) and run it. */
static void write_and_run(const char *suffix, const char *what, outcome want)
{
    char *path = vt_test_path(g_tmp, "case.gguf");
    if (vt_gguf_writer_write(g_w, path) != VT_OK) fail_msg("write %s: %s", path, vt_last_error());
    run_case(path, suffix, what, want);
    free(path);
}

/* ---- the cases ---- */

typedef struct u32_key {
    const char *suffix;   /* after "qwen35moe." */
    const char *want;     /* outcomes for 0, 1, 2^31, 2^32-1 */
    outcome drop;         /* outcome without the key */
} u32_key;

/* Expected outcomes, from §3 and the fixture's shapes (see the file comment). */
static const u32_key k_u32_keys[] = {
    {"block_count", "RWRR", OUT_REFUSED},             /* 1: blk.0 alone is a valid model */
    {"embedding_length", "RRRR", OUT_REFUSED},        /* 1: token_embd shape */
    {"attention.head_count", "RRRR", OUT_REFUSED},    /* 1: not a multiple of head_count_kv 2 */
    {"attention.head_count_kv", "RRRR", OUT_REFUSED}, /* 1 and absent (= 4): attn_k shape */
    {"attention.key_length", "RRRR", OUT_REFUSED},    /* != value_length */
    {"attention.value_length", "RRRR", OUT_REFUSED},
    {"rope.dimension_count", "RRRR", OUT_REFUSED},    /* odd, 0 or > head_dim */
    {"expert_count", "RRRR", OUT_REFUSED},            /* 1 < expert_used_count 2 */
    {"expert_used_count", "RWRR", OUT_REFUSED},       /* 1: top-1 routing */
    {"expert_feed_forward_length", "RRRR", OUT_REFUSED},
    {"expert_shared_feed_forward_length", "RRRR", OUT_REFUSED},
    {"ssm.conv_kernel", "RRRR", OUT_REFUSED},         /* 1: ssm_conv1d shape */
    {"ssm.state_size", "RRRR", OUT_REFUSED},          /* != inner_size / time_step_rank */
    {"ssm.group_count", "RRRR", OUT_REFUSED},         /* 1: attn_qkv shape */
    {"ssm.time_step_rank", "RRRR", OUT_REFUSED},      /* 1: not a multiple of group_count */
    {"ssm.inner_size", "RRRR", OUT_REFUSED},
    {"full_attention_interval", "RRRR", OUT_WORKS},   /* wrong layer kinds; default 4 */
    {"nextn_predict_layers", "WWRR", OUT_WORKS},      /* 1: blk.3 is taken as an MTP block */
    {"context_length", "WCWW", OUT_REFUSED},          /* 1: the engine caps n_ctx at 1 */
};

static const uint32_t k_u32_values[4] = {0, 1, 0x80000000u, 0xFFFFFFFFu};

static void test_u32_keys(void **state)
{
    (void)state;
    if (!setup_env()) return;
    for (size_t i = 0; i < sizeof k_u32_keys / sizeof k_u32_keys[0]; i++) {
        const u32_key *k = &k_u32_keys[i];
        char key[128], what[192];
        snprintf(key, sizeof key, ARCH "%s", k->suffix);
        for (int j = 0; j < 4; j++) {
            assert_int_equal(vt_gguf_writer_set_u32(g_w, key, k_u32_values[j]), VT_OK);
            snprintf(what, sizeof what, "%s = %u", k->suffix, k_u32_values[j]);
            write_and_run(k->suffix, what, (outcome)k->want[j]);
        }
        /* wrong types */
        assert_int_equal(vt_gguf_writer_set_str(g_w, key, "4"), VT_OK);
        snprintf(what, sizeof what, "%s = \"4\" (string)", k->suffix);
        write_and_run(k->suffix, what, OUT_REFUSED);
        assert_int_equal(vt_gguf_writer_set_i32(g_w, key, -1), VT_OK);
        snprintf(what, sizeof what, "%s = -1 (i32)", k->suffix);
        write_and_run(k->suffix, what, OUT_REFUSED);
        assert_int_equal(vt_gguf_writer_set_f32(g_w, key, 4.0f), VT_OK);
        snprintf(what, sizeof what, "%s = 4.0 (f32)", k->suffix);
        write_and_run(k->suffix, what, OUT_REFUSED);
        copy_key(g_w, key);
    }
    /* the reviewer's case: 2^28 blocks in a 20 MB file must be refused at once */
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "block_count", 1u << 28), VT_OK);
    write_and_run("block_count", "block_count = 2^28", OUT_REFUSED);
    /* and with nextn_predict_layers making n_layer = 4 */
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "nextn_predict_layers", (1u << 28) - 4),
                     VT_OK);
    write_and_run("block_count", "block_count = 2^28, nextn_predict_layers = 2^28 - 4",
                  OUT_REFUSED);
    copy_key(g_w, ARCH "block_count");
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "nextn_predict_layers", 0), VT_OK);
    /* the reviewer's other case: huge heads that overflowed 2·n_head·head_dim */
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "attention.head_count", 0xFFFFFFFFu), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "attention.head_count_kv", 1), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "attention.key_length", 0xFFFFFFFFu), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "attention.value_length", 0xFFFFFFFFu),
                     VT_OK);
    write_and_run("attention.key_length", "head_count = key_length = value_length = 2^32-1",
                  OUT_REFUSED);
    /* each dimension in range, their product not */
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "attention.head_count", 1u << 20), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "attention.key_length", 1u << 20), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "attention.value_length", 1u << 20), VT_OK);
    write_and_run("attention.head_count", "head_count = key_length = 2^20", OUT_REFUSED);
    copy_key(g_w, ARCH "attention.head_count");
    copy_key(g_w, ARCH "attention.head_count_kv");
    copy_key(g_w, ARCH "attention.key_length");
    copy_key(g_w, ARCH "attention.value_length");
    /* Gated DeltaNet sizes that wrapped in uint32 (conv_dim = 2·key_dim + value_dim) */
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "ssm.state_size", 1u << 20), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "ssm.group_count", 1u << 10), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "ssm.time_step_rank", 1u << 11), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "ssm.inner_size", 1u << 31), VT_OK);
    write_and_run("ssm.inner_size", "ssm: d_k 2^20, n_k 2^10, n_v 2^11, inner 2^31", OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "ssm.inner_size", 1u << 30), VT_OK);
    assert_int_equal(vt_gguf_writer_set_u32(g_w, ARCH "ssm.time_step_rank", 1u << 10), VT_OK);
    write_and_run("ssm.state_size", "ssm: d_k 2^20, n_k = n_v 2^10, inner 2^30", OUT_REFUSED);
    copy_key(g_w, ARCH "ssm.state_size");
    copy_key(g_w, ARCH "ssm.group_count");
    copy_key(g_w, ARCH "ssm.time_step_rank");
    copy_key(g_w, ARCH "ssm.inner_size");
    /* the unchanged copy still works */
    write_and_run("block_count", "unchanged copy", OUT_WORKS);
}

typedef struct f32_key {
    const char *suffix;
    const char *want; /* 0, 1, 2^31, 2^32-1, NaN, +inf, -inf, negative */
    outcome drop;
} f32_key;

static const f32_key k_f32_keys[] = {
    {"attention.layer_norm_rms_epsilon", "RWWWRRRR", OUT_REFUSED},
    {"rope.freq_base", "RWWWRRRR", OUT_WORKS},
};

static void test_f32_keys(void **state)
{
    (void)state;
    if (!setup_env()) return;
    const float values[8] = {0.0f, 1.0f, 2147483648.0f, 4294967295.0f, NAN, INFINITY, -INFINITY,
                             -1e-6f};
    for (size_t i = 0; i < sizeof k_f32_keys / sizeof k_f32_keys[0]; i++) {
        const f32_key *k = &k_f32_keys[i];
        char key[128], what[192];
        snprintf(key, sizeof key, ARCH "%s", k->suffix);
        for (int j = 0; j < 8; j++) {
            assert_int_equal(vt_gguf_writer_set_f32(g_w, key, values[j]), VT_OK);
            snprintf(what, sizeof what, "%s = %g", k->suffix, (double)values[j]);
            write_and_run(k->suffix, what, (outcome)k->want[j]);
        }
        assert_int_equal(vt_gguf_writer_set_str(g_w, key, "1e-6"), VT_OK);
        snprintf(what, sizeof what, "%s = \"1e-6\" (string)", k->suffix);
        write_and_run(k->suffix, what, OUT_REFUSED);
        assert_int_equal(vt_gguf_writer_set_u32(g_w, key, 1), VT_OK);
        snprintf(what, sizeof what, "%s = 1 (u32)", k->suffix);
        write_and_run(k->suffix, what, OUT_REFUSED);
        copy_key(g_w, key);
    }
}

/* Per-block arrays (§3: head counts may be u32[block_count]; recurrent_layers). */
static void test_arrays(void **state)
{
    (void)state;
    if (!setup_env()) return;
    const uint32_t big[4] = {0, 0, 0, 0x80000000u}, max[4] = {0, 0, 0, 0xFFFFFFFFu},
                   zero[4] = {0, 0, 0, 0}, ok[4] = {0, 0, 0, 4};
    const int32_t neg[4] = {0, 0, 0, -4};
    const char *hc = ARCH "attention.head_count", *hkv = ARCH "attention.head_count_kv";
    assert_int_equal(vt_gguf_writer_set_arr(g_w, hc, VT_GGUF_UINT32, big, 4), VT_OK);
    write_and_run("attention.head_count", "head_count = [0, 0, 0, 2^31]", OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, hc, VT_GGUF_UINT32, max, 4), VT_OK);
    write_and_run("attention.head_count", "head_count = [0, 0, 0, 2^32-1]", OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, hc, VT_GGUF_INT32, neg, 4), VT_OK);
    write_and_run("attention.head_count", "head_count = [0, 0, 0, -4] (i32)", OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, hc, VT_GGUF_UINT32, ok, 3), VT_OK);
    write_and_run("attention.head_count", "head_count = [0, 0, 0] (3 entries)", OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, hc, VT_GGUF_FLOAT32, (const float[4]){0, 0, 0, 4},
                                            4), VT_OK);
    write_and_run("attention.head_count", "head_count = [0, 0, 0, 4.0] (f32)", OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, hc, VT_GGUF_UINT32, ok, 4), VT_OK);
    write_and_run("attention.head_count", "head_count = [0, 0, 0, 4]", OUT_WORKS);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, hkv, VT_GGUF_UINT32, zero, 4), VT_OK);
    write_and_run("attention.head_count_kv", "head_count_kv = [0, 0, 0, 0]", OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, hkv, VT_GGUF_UINT32, max, 4), VT_OK);
    write_and_run("attention.head_count_kv", "head_count_kv = [0, 0, 0, 2^32-1]", OUT_REFUSED);
    copy_key(g_w, hc);
    copy_key(g_w, hkv);
    /* recurrent_layers naming every block full attention: blk.0 lacks attn_q */
    const char *rl = ARCH "attention.recurrent_layers";
    assert_int_equal(vt_gguf_writer_set_arr(g_w, rl, VT_GGUF_UINT32, zero, 4), VT_OK);
    write_and_run("attention.recurrent_layers", "recurrent_layers = [0, 0, 0, 0]", OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, rl, VT_GGUF_UINT32, zero, 2), VT_OK);
    write_and_run("attention.recurrent_layers", "recurrent_layers = [0, 0] (2 entries)",
                  OUT_REFUSED);
    assert_int_equal(vt_gguf_writer_set_str(g_w, rl, "1110"), VT_OK);
    write_and_run("attention.recurrent_layers", "recurrent_layers = \"1110\" (string)",
                  OUT_REFUSED);
    /* the writer cannot drop a key: recurrent_layers = the interval rule's [1, 1, 1, 0] */
    const uint8_t rule[4] = {1, 1, 1, 0};
    assert_int_equal(vt_gguf_writer_set_arr(g_w, rl, VT_GGUF_BOOL, rule, 4), VT_OK);
    write_and_run("attention.recurrent_layers", "recurrent_layers = [1, 1, 1, 0]", OUT_WORKS);
}

/* A tokenizer shorter than token_embd's rows (issue 17): the rows past it are
 * no token, and a sampler would pick them; the file is refused naming both
 * counts. The tokens and their types are cut to n - 8 together. */
static void test_short_tokenizer(void **state)
{
    (void)state;
    if (!setup_env()) return;
    const char *tk = "tokenizer.ggml.tokens", *tt = "tokenizer.ggml.token_type";
    vt_gguf_type et;
    uint64_t n;
    const void *data;
    assert_int_equal(vt_gguf_get_arr(g_g, tk, &et, &n, &data), VT_OK);
    assert_true(n > 8);
    const char **v = malloc(sizeof(char *) * (size_t)n);
    assert_non_null(v);
    for (uint64_t j = 0; j < n; j++) {
        vt_gguf_str sj;
        assert_int_equal(vt_gguf_get_arr_str(g_g, tk, j, &sj), VT_OK);
        v[j] = sj.ptr;
    }
    assert_int_equal(vt_gguf_writer_set_arr_str(g_w, tk, v, n - 8), VT_OK);
    assert_int_equal(vt_gguf_get_arr(g_g, tt, &et, &n, &data), VT_OK);
    assert_int_equal(vt_gguf_writer_set_arr(g_w, tt, et, data, n - 8), VT_OK);
    char *path = vt_test_path(g_tmp, "short-tokenizer.gguf");
    if (vt_gguf_writer_write(g_w, path) != VT_OK) fail_msg("write %s: %s", path, vt_last_error());
    vt_engine_params p = {.model_path = path, .plugin_dir = vt_test_plugin_dir(), .device = "cpu",
                          .n_threads = 1};
    vt_engine *e = NULL;
    vt_clear_error();
    vt_status st = vt_engine_open(&p, &e);
    char counts[64];
    snprintf(counts, sizeof counts, "%llu tokens", (unsigned long long)(n - 8));
    if (st == VT_OK || !strstr(vt_last_error(), counts) || !strstr(vt_last_error(), "token_embd") ||
        !strstr(vt_last_error(), path))
        fail_msg("a tokenizer of %llu tokens for %llu rows: status %d, '%s'",
                 (unsigned long long)(n - 8), (unsigned long long)n, st, vt_last_error());
    printf("[hostile] %-58s refused: %s\n", "tokenizer 8 tokens short of token_embd", vt_last_error());
    vt_engine_close(e);
    free(v);
    free(path);
}

/* Each key removed (a fresh copy without it). */
static void test_dropped_keys(void **state)
{
    (void)state;
    if (!setup_env()) return;
    char key[128], what[192];
    for (size_t i = 0; i < sizeof k_u32_keys / sizeof k_u32_keys[0] + 2; i++) {
        const char *suffix;
        outcome want;
        if (i < sizeof k_u32_keys / sizeof k_u32_keys[0]) {
            suffix = k_u32_keys[i].suffix;
            want = k_u32_keys[i].drop;
        } else {
            suffix = k_f32_keys[i - sizeof k_u32_keys / sizeof k_u32_keys[0]].suffix;
            want = k_f32_keys[i - sizeof k_u32_keys / sizeof k_u32_keys[0]].drop;
        }
        snprintf(key, sizeof key, ARCH "%s", suffix);
        vt_gguf_writer *w = copy_fixture(key);
        char *path = vt_test_path(g_tmp, "dropped.gguf");
        if (vt_gguf_writer_write(w, path) != VT_OK) fail_msg("write %s: %s", path, vt_last_error());
        vt_gguf_writer_free(w);
        snprintf(what, sizeof what, "%s absent", suffix);
        run_case(path, suffix, what, want);
        free(path);
    }
}

/* Last: the whole run stayed small. */
static void test_peak_rss(void **state)
{
    (void)state;
    if (!setup_env()) return;
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    printf("[hostile] %d cases: %d refused at load, %d loaded but could not fit 4 tokens, %d "
           "worked; peak RSS %ld MiB\n", g_cases, g_refused, g_nofit, g_works,
           ru.ru_maxrss / 1024);
    if (ru.ru_maxrss > 1024L * 1024) fail_msg("peak RSS %ld KiB exceeds 1 GiB", ru.ru_maxrss);
}

static int teardown(void **state)
{
    (void)state;
    vt_gguf_writer_free(g_w);
    if (g_g) vt_gguf_close(g_g);
    if (g_reg) vt_registry_close(g_reg);
    free((void *)g_src);
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
        cmocka_unit_test(test_u32_keys),     cmocka_unit_test(test_f32_keys),
        cmocka_unit_test(test_arrays),       cmocka_unit_test(test_dropped_keys),
        cmocka_unit_test(test_short_tokenizer),
        cmocka_unit_test(test_peak_rss),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, teardown));
}

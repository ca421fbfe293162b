/*
 * fuzz_seeds.c - writes the small seed corpora of the fuzz targets
 * (bench/fuzz.sh runs it before fuzzing; the test fuzz_seed_replay runs it in
 * every build, then replays each corpus through its harness: fuzz_replay.c).
 *
 *   fuzz_seeds OUT_DIR [FIXTURES_DIR]
 *
 * OUT_DIR/gguf/: GGUF files made with vt's writer (every metadata value and
 * array type, three tensor types, a small byte-level BPE vocabulary, a
 * two-shard split joined by the fuzz_gguf shard separator) and one hand-made
 * file with the scalar types the writer has no setter for; with FIXTURES_DIR,
 * also the whole metadata of the qwen35moe-tiny fixture (its real tokenizer)
 * over two tiny tensors, quant-zoo.gguf whole and the first 64 KiB (the
 * header region) of three other fixture files, and the texts of the
 * qwen35-tiny tokenizer cases. OUT_DIR/tokenize/: short texts for
 * fuzz_tokenize. OUT_DIR/vocab/: small vocabulary descriptions for fuzz_vocab.
 * OUT_DIR/nfc/: fuzz_nfc inputs (see fuzz_nfc.c): the texts of
 * OUT_DIR/tokenize/ as UTF-8 inputs, and palette runs (a run of 4,096 marks
 * in alternating canonical order, the input class that was quadratic).
 * The whole fixture models are too big to be seeds.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "error.h"
#include "vt/gguf.h"
#include "vt/types.h"

#define FUZZ_SHARD_SEP "VTSHARD!" /* as in fuzz_gguf.c */

static void die(const char *what)
{
    fprintf(stderr, "fuzz_seeds: %s: %s\n", what, vt_last_error());
    exit(1);
}

static void mkdir_p(const char *d)
{
    if (mkdir(d, 0755) != 0 && errno != EEXIST) {
        perror(d);
        exit(1);
    }
}

static void write_bytes(const char *dir, const char *name, const void *p, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void *read_bytes(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(len > 0 ? (size_t)len : 1);
    if (!p || fread(p, 1, (size_t)len, f) != (size_t)len) {
        perror(path);
        exit(1);
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

static void finish(vt_gguf_writer *w, const char *dir, const char *name)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (vt_gguf_writer_write(w, path) != VT_OK) die(path);
    vt_gguf_writer_free(w);
}

static void add_f32(vt_gguf_writer *w, const char *name, int64_t n0, int64_t n1)
{
    float data[64] = {0};
    const int64_t ne[2] = {n0, n1};
    if (vt_gguf_writer_add_tensor(w, name, VT_TYPE_F32, n1 > 1 ? 2 : 1, ne, data,
                                  (uint64_t)(n0 * n1) * 4) != VT_OK)
        die(name);
}

/* Every value type the writer can set, every array element type, 3 tensor types. */
static void seed_types(const char *dir)
{
    vt_gguf_writer *w = vt_gguf_writer_new(64);
    if (!w) die("writer");
    vt_gguf_writer_set_str(w, "general.architecture", "qwen35moe");
    vt_gguf_writer_set_str(w, "general.name", "fuzz 'seed'\n\ttab");
    vt_gguf_writer_set_u32(w, "qwen35moe.expert_count", 2);
    vt_gguf_writer_set_i32(w, "x.i32", -5);
    vt_gguf_writer_set_u16(w, "x.u16", 65535);
    vt_gguf_writer_set_f32(w, "x.f32", 0.25f);
    vt_gguf_writer_set_bool(w, "x.bool", 1);
    const uint8_t b[4] = {0, 1, 0x7f, 0xff};
    const int64_t i64[3] = {INT64_MIN, -1, INT64_MAX};
    const uint64_t u64[2] = {0, UINT64_MAX};
    const double f64[2] = {1.5, -0.0};
    const float f32[2] = {3.0f, -2.0f};
    const int16_t i16[2] = {-32768, 32767};
    vt_gguf_writer_set_arr(w, "x.arr.u8", VT_GGUF_UINT8, b, 4);
    vt_gguf_writer_set_arr(w, "x.arr.i8", VT_GGUF_INT8, b, 4);
    vt_gguf_writer_set_arr(w, "x.arr.bool", VT_GGUF_BOOL, b, 2);
    vt_gguf_writer_set_arr(w, "x.arr.i16", VT_GGUF_INT16, i16, 2);
    vt_gguf_writer_set_arr(w, "x.arr.u16", VT_GGUF_UINT16, i16, 2);
    vt_gguf_writer_set_arr(w, "x.arr.i64", VT_GGUF_INT64, i64, 3);
    vt_gguf_writer_set_arr(w, "x.arr.u64", VT_GGUF_UINT64, u64, 2);
    vt_gguf_writer_set_arr(w, "x.arr.f64", VT_GGUF_FLOAT64, f64, 2);
    vt_gguf_writer_set_arr(w, "x.arr.f32", VT_GGUF_FLOAT32, f32, 2);
    vt_gguf_writer_set_arr(w, "x.arr.empty", VT_GGUF_INT32, NULL, 0);
    const char *strs[3] = {"a", "", "long string \xc3\xa9"};
    vt_gguf_writer_set_arr_str(w, "x.arr.str", strs, 3);
    add_f32(w, "token_embd.weight", 8, 2);
    add_f32(w, "blk.0.ffn_up_exps.weight", 4, 2);
    uint8_t q8[34] = {0};
    const int64_t ne_q[1] = {32};
    if (vt_gguf_writer_add_tensor(w, "q", VT_TYPE_Q8_0, 1, ne_q, q8, 34) != VT_OK) die("q");
    finish(w, dir, "types.gguf");
}

/* GPT-2 bytes_to_unicode (tokenizers.md §4.1) */
static void byte_char(int b, char out[4])
{
    int cp;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) cp = b;
    else {
        int k = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) k++;
        cp = 0x100 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        out[2] = 0;
    }
}

/* A small byte-level BPE vocabulary (256 byte tokens + merges + specials). */
static void seed_vocab(const char *dir)
{
    static const char *const extra[] = {"ab", "bc", "abc", "aa", "<|im_end|>", "<tool>",
                                        "XYZ", "<|endoftext|>", "<|unused_1|>", "\xc4\xa0t"};
    static const int32_t extra_types[] = {1, 1, 1, 1, 3, 4, 4, 3, 3, 1};
    enum { N_EXTRA = sizeof extra / sizeof *extra, NV = 256 + N_EXTRA };
    char bytes[256][4];
    const char *tokens[NV];
    int32_t types[NV];
    float scores[NV] = {0};
    for (int i = 0; i < 256; i++) {
        byte_char(i, bytes[i]);
        tokens[i] = bytes[i];
        types[i] = 1;
    }
    for (int i = 0; i < N_EXTRA; i++) {
        tokens[256 + i] = extra[i];
        types[256 + i] = extra_types[i];
    }
    static const char *const merges[] = {"b c", "a b", "a bc", "a a", "x y", "\xc4\xa0 t"};
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    if (!w) die("writer");
    vt_gguf_writer_set_str(w, "general.architecture", "qwen35moe");
    vt_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    vt_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen35");
    vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, NV);
    vt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", VT_GGUF_INT32, types, NV);
    vt_gguf_writer_set_arr(w, "tokenizer.ggml.scores", VT_GGUF_FLOAT32, scores, NV);
    vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, sizeof merges / sizeof *merges);
    vt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 256 + 4);
    vt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 256 + 7);
    vt_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 256 + 7);
    vt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    vt_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", 0);
    add_f32(w, "output_norm.weight", 8, 1);
    finish(w, dir, "vocab.gguf");
}

/* Two shards of a split model joined by the separator fuzz_gguf splits at. */
static void seed_split(const char *dir)
{
    char path[2][1024];
    for (int k = 0; k < 2; k++) {
        vt_gguf_writer *w = vt_gguf_writer_new(32);
        if (!w) die("writer");
        if (k == 0) vt_gguf_writer_set_str(w, "general.architecture", "split");
        vt_gguf_writer_set_u16(w, "split.no", (uint16_t)k);
        vt_gguf_writer_set_u16(w, "split.count", 2);
        vt_gguf_writer_set_i32(w, "split.tensors.count", 2);
        add_f32(w, k ? "b" : "a", 4, 1);
        snprintf(path[k], sizeof path[k], "%s/split-part-%d.tmpgguf", dir, k);
        if (vt_gguf_writer_write(w, path[k]) != VT_OK) die(path[k]);
        vt_gguf_writer_free(w);
    }
    size_t n0, n1;
    uint8_t *a = read_bytes(path[0], &n0), *b = read_bytes(path[1], &n1);
    uint8_t *j = malloc(n0 + 8 + n1);
    if (!j) exit(1);
    memcpy(j, a, n0);
    memcpy(j + n0, FUZZ_SHARD_SEP, 8);
    memcpy(j + n0 + 8, b, n1);
    write_bytes(dir, "split2.gguf", j, n0 + 8 + n1);
    remove(path[0]);
    remove(path[1]);
    free(a);
    free(b);
    free(j);
}

/* Hand-made v2 file: the scalar types the writer has no setter for. */
static void seed_scalars(const char *dir)
{
    uint8_t p[512];
    size_t n = 0;
#define PUT(src, len) (memcpy(p + n, (src), (len)), n += (len))
#define U32(v) do { uint32_t x_ = (v); PUT(&x_, 4); } while (0)
#define U64(v) do { uint64_t x_ = (v); PUT(&x_, 8); } while (0)
#define KEY(k, t) do { U64(strlen(k)); PUT((k), strlen(k)); U32(t); } while (0)
    PUT("GGUF", 4);
    U32(2);
    U64(0);
    U64(7);
    KEY("s.u8", VT_GGUF_UINT8);
    PUT("\xff", 1);
    KEY("s.i8", VT_GGUF_INT8);
    PUT("\x80", 1);
    KEY("s.i16", VT_GGUF_INT16);
    PUT("\x00\x80", 2);
    KEY("s.u64", VT_GGUF_UINT64);
    U64(UINT64_MAX);
    KEY("s.i64", VT_GGUF_INT64);
    U64((uint64_t)INT64_MIN);
    KEY("s.f64", VT_GGUF_FLOAT64);
    double d = 1e300;
    PUT(&d, 8);
    KEY("general.alignment", VT_GGUF_UINT64);
    U64(16);
#undef KEY
#undef U64
#undef U32
#undef PUT
    write_bytes(dir, "scalars.gguf", p, n);
}

/* The qwen35moe-tiny fixture's metadata (real tokenizer) over two tiny tensors. */
static void seed_fixture_meta(const char *dir, const char *fx)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf", fx);
    vt_gguf *g;
    if (vt_gguf_open(path, VT_GGUF_NO_MMAP, &g) != VT_OK) die(path);
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    if (!w) die("writer");
    for (int64_t i = 0; i < vt_gguf_n_kv(g); i++) {
        const char *k = vt_gguf_kv_key(g, i);
        vt_gguf_type et;
        uint64_t cnt;
        const void *data;
        vt_gguf_str s;
        uint32_t u;
        float f;
        switch (vt_gguf_kv_type(g, i)) {
        case VT_GGUF_STRING:
            vt_gguf_get_str(g, k, &s);
            vt_gguf_writer_set_str(w, k, s.ptr);
            break;
        case VT_GGUF_UINT32:
            vt_gguf_get_u32(g, k, &u);
            vt_gguf_writer_set_u32(w, k, u);
            break;
        case VT_GGUF_FLOAT32:
            vt_gguf_get_f32(g, k, &f);
            vt_gguf_writer_set_f32(w, k, f);
            break;
        case VT_GGUF_ARRAY:
            vt_gguf_get_arr(g, k, &et, &cnt, &data);
            if (et != VT_GGUF_STRING) {
                vt_gguf_writer_set_arr(w, k, et, data, cnt);
                break;
            }
            {
                const char **v = malloc((cnt ? cnt : 1) * sizeof *v);
                if (!v) exit(1);
                for (uint64_t j = 0; j < cnt; j++) {
                    vt_gguf_get_arr_str(g, k, j, &s);
                    v[j] = s.ptr;
                }
                vt_gguf_writer_set_arr_str(w, k, v, cnt);
                free(v);
            }
            break;
        default: break; /* the fixture has no other types */
        }
    }
    vt_gguf_close(g);
    add_f32(w, "output_norm.weight", 8, 1);
    add_f32(w, "blk.0.ffn_gate_exps.weight", 4, 2);
    finish(w, dir, "qwen35moe-meta.gguf");
}

/* Up to max bytes of the fixture file rel, as OUT/name (a missing file is an
 * error: the folder was given, so the fixture set must be whole). */
static void seed_fixture_cut(const char *dir, const char *fx, const char *rel, const char *name,
                             size_t max)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", fx, rel);
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    uint8_t *p = malloc(max);
    if (!p) exit(1);
    size_t n = fread(p, 1, max, f);
    if (ferror(f)) {
        perror(path);
        exit(1);
    }
    fclose(f);
    write_bytes(dir, name, p, n);
    free(p);
}

static void seed_fixture_files(const char *dir, const char *fx)
{
    seed_fixture_cut(dir, fx, "quant-zoo/quant-zoo.gguf", "quant-zoo.gguf", (size_t)64 << 20);
    static const char *const heads[] = {
        "qwen35moe-tiny/gguf/qwen35moe-tiny-q8_0.gguf",
        "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf",
        "qwen35moe-tiny/gguf/split/qwen35moe-tiny-q8_0-split-00002-of-00003.gguf",
    };
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
        const char *base = strrchr(heads[i], '/') + 1;
        char name[256];
        snprintf(name, sizeof name, "head64k-%s", base);
        seed_fixture_cut(dir, fx, heads[i], name, 65536);
    }
}

/* The texts of the tokenizer's HF cases (tokenizer-tests.json "cases"[].text). */
static void seed_fixture_texts(const char *dir, const char *fx)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizers/qwen35-tiny/tokenizer-tests.json", fx);
    size_t n;
    char *js = read_bytes(path, &n);
    cJSON *root = cJSON_ParseWithLength(js, n);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    if (!cJSON_IsArray(cases)) {
        fprintf(stderr, "fuzz_seeds: %s: no \"cases\" array\n", path);
        exit(1);
    }
    int i = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "text");
        if (!cJSON_IsString(t)) continue;
        char name[64];
        snprintf(name, sizeof name, "case-%d", i++);
        write_bytes(dir, name, t->valuestring, strlen(t->valuestring));
    }
    cJSON_Delete(root);
    free(js);
}

static void seed_texts(const char *dir)
{
    static const struct {
        const char *name;
        const char *text;
        size_t len;
    } t[] = {
#define T(name, text) {name, text, sizeof(text) - 1}
        T("hello", "Hello world"),
        T("contractions", "It's  what we'd've DONE'S 'll 're"),
        T("spaces", "  leading\t\ttabs   and\n\n\r\n  trailing   "),
        T("digits", "12345 3.14159 1,000,000 0x1F"),
        T("code", "int main(void) {\n    return a->b[i] + 0x10; // done\n}\n"),
        T("cjk", "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c\xe3\x80\x82"),
        T("emoji", "\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd \xe2\x9d\xa4\xef\xb8\x8f"),
        T("marks", "e\xcc\x81 a\xcc\x8a \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87"),
        T("nfc", "Caf\xc3\xa9 \xc3\x85ngstr\xc3\xb6m \xea\xb0\x80"),
        T("special", "<|im_start|>user\nhi<|im_end|>\n<|endoftext|><think>x</think>"),
        T("invalid", "\xff\xfe\xc3 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf"),
        T("controls", "\x01\x02\x1f\x7f\xc2\x85\xe2\x80\xa8\xe3\x80\x80"),
        T("chat", "\x00sys prompt\x00\x01hello <think>\x00\x02<think>r</think>answer\x00\x03result\x00\x01q"),
        T("chat_tool", "\x00\x01<tool_response>x</tool_response>\x00\x03tool out\x00\x01 ask "),
#undef T
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        write_bytes(dir, t[i].name, t[i].text, t[i].len);
}

/* fuzz_vocab inputs: flags, bos, eos, token lines, merge lines, text (see fuzz_vocab.c). */
static void seed_vocabs(const char *dir)
{
    static const struct {
        const char *name;
        const char *text;
        size_t len;
    } v[] = {
#define V(name, text) {name, text, sizeof(text) - 1}
        V("bytes", "\x19\x05\x04" "1ab\n1bc\n1abc\n1aa\n3<|im_end|>\n4<tool>\n4XYZ\n\n"
                  "b c\na b\na bc\na a\nx y\n\n" "abc aaa <tool>WXYZ<|im_end|> \xc3\xa9\xff xy"),
        V("nobytes", "\x38\x00\x01" "1a\n1b\n1ab\n3</s>\n3<|tool_response>\n\n" "a b\n\n"
                    "ab ba </s><|tool_response> q"),
        V("qwen2", "\x5b\x00\x02" "1\xc4\xa0t\n1he\n3<|endoftext|>\n2<unk>\n6<0x41>\n\n"
                  "\xc4\xa0 t\nh e\n\n" " the <unk><0x41>\n\n 12"),
        V("nopre", "\x85\x00\x00" "1ab\n0zz\n5unused\n\n" "a b\n\n" "ab zz"),
#undef V
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) write_bytes(dir, v[i].name, v[i].text, v[i].len);

    /* few tokens, many merges of strings that are no token: the string table grows */
    static char big[64 * 1024];
    static const char head[] = "\x11\x00\x00" "1ab\n1abc\n\n";
    size_t n = sizeof head - 1;
    memcpy(big, head, n);
    for (int i = 0; i < 1500; i++) { /* "xAAA yAAA": letters only, so one word merges */
        char l[4] = {(char)('a' + i / 676), (char)('a' + i / 26 % 26), (char)('a' + i % 26), 0};
        n += (size_t)snprintf(big + n, sizeof big - n, "x%s y%s\n", l, l);
    }
    n += (size_t)snprintf(big + n, sizeof big - n, "a b\nab c\n\nxaahyaah abc xcejycej ab");
    write_bytes(dir, "many_merges", big, n);
}

/* fuzz_nfc inputs: the tokenizer texts behind a 0 byte (UTF-8 mode), and
 * palette-index runs behind a 1 byte (fuzz_nfc.c: index 0 is U+0301 and 1 is
 * U+0316, classes 230 and 220; 20 is U+0344, 22 'e', 40 and 41 Hangul L and
 * V jamo). */
static void seed_nfc(const char *dir, const char *tdir)
{
    static const char *const texts[] = {"hello", "marks", "nfc", "cjk", "invalid", "controls"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        char path[1100], name[64];
        snprintf(path, sizeof path, "%s/%s", tdir, texts[i]);
        size_t n;
        char *t = read_bytes(path, &n);
        char *p = malloc(n + 1);
        if (!p) die("out of memory");
        p[0] = 0;
        memcpy(p + 1, t, n);
        snprintf(name, sizeof name, "utf8-%s", texts[i]);
        write_bytes(dir, name, p, n + 1);
        free(p);
        free(t);
    }
    static uint8_t run[1 + 2 * 4096];
    run[0] = 1;
    for (size_t i = 0; i < 4096; i++) run[1 + 2 * i] = (uint8_t)(i & 1), run[2 + 2 * i] = 0;
    write_bytes(dir, "alternating-marks", run, sizeof run);
    static const uint8_t mixed[] = {1, 22, 0, 0, 0, 1, 0, 40, 0, 41, 0, 0, 0, 22, 0, 1, 0, 3, 0};
    write_bytes(dir, "mixed", mixed, sizeof mixed);
    /* U+0344 decomposes and stays so: NFC is longer than its input (the
     * harness once took that for a bug) */
    static const uint8_t longer[] = {1, 20, 0, 22, 0, 20, 0};
    write_bytes(dir, "longer", longer, sizeof longer);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_seeds OUT_DIR [FIXTURES_DIR]\n");
        return 2;
    }
    char gdir[1024], tdir[1024], vdir[1024], ndir[1024];
    snprintf(gdir, sizeof gdir, "%s/gguf", argv[1]);
    snprintf(tdir, sizeof tdir, "%s/tokenize", argv[1]);
    snprintf(vdir, sizeof vdir, "%s/vocab", argv[1]);
    snprintf(ndir, sizeof ndir, "%s/nfc", argv[1]);
    mkdir_p(argv[1]);
    mkdir_p(gdir);
    mkdir_p(tdir);
    mkdir_p(vdir);
    mkdir_p(ndir);
    seed_types(gdir);
    seed_vocab(gdir);
    seed_split(gdir);
    seed_scalars(gdir);
    if (argc > 2) {
        seed_fixture_meta(gdir, argv[2]);
        seed_fixture_files(gdir, argv[2]);
        seed_fixture_texts(tdir, argv[2]);
    }
    seed_texts(tdir);
    seed_vocabs(vdir);
    seed_nfc(ndir, tdir);
    return 0;
}

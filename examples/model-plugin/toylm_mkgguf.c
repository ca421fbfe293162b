/*
 * toylm_mkgguf.c - writes a toylm model file (toylm.c) and checks logits
 * against a plain-C double-precision reference of the same model. Uses only
 * the SDK headers for the type ids (vt/gguf.h, vt/types.h); the GGUF v3 file
 * is written here byte by byte (header, metadata, tensor infos, 32-byte
 * aligned data), so it needs no vt library.
 *
 *   toylm-mkgguf -o toy.gguf                     write the model
 *   toylm-mkgguf --check LOGITS --tokens 1,2,3   compare a `vt logits` output
 *                                                (float32 [n_tokens][n_vocab])
 *                                                with the reference; exit 1 when
 *                                                max |diff| > 1e-4
 *
 * The model: n_embd = 64, a byte-level BPE vocabulary (gpt2 kind) of 256
 * byte tokens (id = byte value), one merge "h e" (id 256) and <|endoftext|>
 * (id 257, EOS). Embeddings e_v are pseudo-random unit vectors; the output
 * row of lowercase letter u is 4 e_{u-1} (cyclic), every other row 0.5 r_u,
 * so greedy decoding after letter v gives the next letter: "a" -> "bcd...".
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vt/gguf.h>
#include <vt/types.h>

#define N_EMBD 64
#define N_VOCAB 258
#define N_CTX 256
#define EPS 1e-6f

static float emb[N_VOCAB][N_EMBD], out_w[N_VOCAB][N_EMBD], norm_w[N_EMBD];

static uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void unit_vector(uint64_t *s, float *v)
{
    double n = 0;
    for (int i = 0; i < N_EMBD; i++) {
        v[i] = (float)((double)(rng_next(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        n += (double)v[i] * v[i];
    }
    for (int i = 0; i < N_EMBD; i++) v[i] = (float)(v[i] / sqrt(n));
}

static void make_weights(void)
{
    uint64_t s = 42;
    for (int v = 0; v < N_VOCAB; v++) unit_vector(&s, emb[v]);
    for (int u = 0; u < N_VOCAB; u++) {
        if (u >= 'a' && u <= 'z') {
            int prev = u == 'a' ? 'z' : u - 1;
            for (int i = 0; i < N_EMBD; i++) out_w[u][i] = 4.0f * emb[prev][i];
        } else {
            unit_vector(&s, out_w[u]);
            for (int i = 0; i < N_EMBD; i++) out_w[u][i] *= 0.5f;
        }
    }
    /* rms of a unit vector is 1/sqrt(64) = 1/8: this weight brings it back to unit length */
    for (int i = 0; i < N_EMBD; i++) norm_w[i] = 0.125f;
}

/* ---- GGUF v3 writing (little-endian hosts) ---- */
static void w_raw(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }
static void w_u32(FILE *f, uint32_t v) { w_raw(f, &v, 4); }
static void w_u64(FILE *f, uint64_t v) { w_raw(f, &v, 8); }
static void w_str(FILE *f, const char *s)
{
    w_u64(f, strlen(s));
    w_raw(f, s, strlen(s));
}
static void kv_str(FILE *f, const char *k, const char *v)
{
    w_str(f, k);
    w_u32(f, VT_GGUF_STRING);
    w_str(f, v);
}
static void kv_u32(FILE *f, const char *k, uint32_t v)
{
    w_str(f, k);
    w_u32(f, VT_GGUF_UINT32);
    w_u32(f, v);
}
static void kv_f32(FILE *f, const char *k, float v)
{
    w_str(f, k);
    w_u32(f, VT_GGUF_FLOAT32);
    w_raw(f, &v, 4);
}

/* GPT-2's byte -> code point map: printable bytes are themselves, the others 256 + n. */
static uint32_t byte_cp(int b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return (uint32_t)b;
    int n = 0;
    for (int c = 0; c < b; c++)
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174)) n++;
    return 256u + (uint32_t)n;
}

static void utf8(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        o[1] = 0;
    } else { /* every code point here is < 0x800 */
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        o[2] = 0;
    }
}

static int write_model(const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    const uint64_t n_kv = 11, n_tensors = 3;
    w_raw(f, "GGUF", 4);
    w_u32(f, 3);
    w_u64(f, n_tensors);
    w_u64(f, n_kv);
    kv_str(f, "general.architecture", "toylm");
    kv_str(f, "general.name", "toylm example (next letter)");
    kv_u32(f, "toylm.embedding_length", N_EMBD);
    kv_u32(f, "toylm.context_length", N_CTX);
    kv_f32(f, "toylm.attention.layer_norm_rms_epsilon", EPS);
    kv_str(f, "tokenizer.ggml.model", "gpt2");
    kv_str(f, "tokenizer.ggml.pre", "qwen35");
    /* tokens: 256 byte tokens, "he", <|endoftext|> */
    w_str(f, "tokenizer.ggml.tokens");
    w_u32(f, VT_GGUF_ARRAY);
    w_u32(f, VT_GGUF_STRING);
    w_u64(f, N_VOCAB);
    for (int b = 0; b < 256; b++) {
        char s[4];
        utf8(byte_cp(b), s);
        w_str(f, s);
    }
    w_str(f, "he");
    w_str(f, "<|endoftext|>");
    w_str(f, "tokenizer.ggml.token_type");
    w_u32(f, VT_GGUF_ARRAY);
    w_u32(f, VT_GGUF_INT32);
    w_u64(f, N_VOCAB);
    for (int v = 0; v < N_VOCAB; v++) w_u32(f, v == N_VOCAB - 1 ? 3u : 1u); /* CONTROL : NORMAL */
    w_str(f, "tokenizer.ggml.merges");
    w_u32(f, VT_GGUF_ARRAY);
    w_u32(f, VT_GGUF_STRING);
    w_u64(f, 1);
    w_str(f, "h e");
    kv_u32(f, "tokenizer.ggml.eos_token_id", N_VOCAB - 1);

    /* tensor infos; data offsets relative to the data section, 32-aligned */
    const char *names[3] = {"token_embd.weight", "output_norm.weight", "output.weight"};
    const void *data[3] = {emb, norm_w, out_w};
    const uint64_t ne1[3] = {N_VOCAB, 1, N_VOCAB};
    uint64_t off = 0, sizes[3];
    for (int t = 0; t < 3; t++) {
        sizes[t] = (uint64_t)N_EMBD * ne1[t] * sizeof(float);
        w_str(f, names[t]);
        w_u32(f, ne1[t] > 1 ? 2 : 1);
        w_u64(f, N_EMBD);
        if (ne1[t] > 1) w_u64(f, ne1[t]);
        w_u32(f, VT_TYPE_F32);
        w_u64(f, off);
        off += (sizes[t] + 31) / 32 * 32;
    }
    static const char zeros[32];
    long pos = ftell(f);
    w_raw(f, zeros, (size_t)((32 - pos % 32) % 32));
    for (int t = 0; t < 3; t++) {
        w_raw(f, data[t], (size_t)sizes[t]);
        w_raw(f, zeros, (size_t)((32 - sizes[t] % 32) % 32));
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        perror(path);
        return 1;
    }
    return 0;
}

/* Reference logits of token v, in double: output · (rms_norm(e_v) * norm_w). */
static void reference(int v, double *logits)
{
    double ss = 0, x[N_EMBD];
    for (int i = 0; i < N_EMBD; i++) ss += (double)emb[v][i] * emb[v][i];
    double r = 1.0 / sqrt(ss / N_EMBD + EPS);
    for (int i = 0; i < N_EMBD; i++) x[i] = emb[v][i] * r * norm_w[i];
    for (int u = 0; u < N_VOCAB; u++) {
        double d = 0;
        for (int i = 0; i < N_EMBD; i++) d += out_w[u][i] * x[i];
        logits[u] = d;
    }
}

static int check(const char *path, const char *tokens)
{
    int ids[64], n = 0;
    for (const char *p = tokens; *p && n < 64;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= N_VOCAB) {
            fprintf(stderr, "toylm-mkgguf: bad --tokens '%s'\n", tokens);
            return 2;
        }
        ids[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    static float got[64][N_VOCAB];
    size_t r = fread(got, sizeof(float) * N_VOCAB, (size_t)n, f);
    int extra = fgetc(f) != EOF;
    fclose(f);
    if (r != (size_t)n || extra) {
        fprintf(stderr, "toylm-mkgguf: %s is not float32 [%d][%d]\n", path, n, N_VOCAB);
        return 1;
    }
    double worst = 0, ref[N_VOCAB];
    for (int t = 0; t < n; t++) {
        reference(ids[t], ref);
        for (int u = 0; u < N_VOCAB; u++) {
            double d = fabs(ref[u] - got[t][u]);
            if (!(d <= worst)) worst = d; /* NaN counts as worst */
        }
    }
    printf("toylm logits: %d positions, max |diff| vs the double reference = %.3g\n", n, worst);
    return worst <= 1e-4 ? 0 : 1;
}

int main(int argc, char **argv)
{
    make_weights();
    if (argc == 3 && !strcmp(argv[1], "-o")) return write_model(argv[2]);
    if (argc == 5 && !strcmp(argv[1], "--check") && !strcmp(argv[3], "--tokens"))
        return check(argv[2], argv[4]);
    fprintf(stderr, "usage: %s -o FILE.gguf | --check LOGITS --tokens 1,2,3\n", argv[0]);
    return 2;
}

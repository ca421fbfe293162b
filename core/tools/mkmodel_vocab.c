/*
 * mkmodel_vocab.c - the tokenizer of vt mkmodel's models: byte-level BPE
 * (tokenizers.md §4) trained on the embedded text below by greedily merging
 * the most frequent adjacent pair, written as a qwen35moe (GPT-2 byte
 * symbols, ChatML template) or gemma4 (SentencePiece-style symbols, the
 * specials at their real ids, a Gemma turn template) vocabulary.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mkmodel_internal.h"

/* Training text (written for vt; plain English with some digits and punctuation). */
static const char demo_text[] =
    "The river runs past the old mill and under the stone bridge, then out to the sea.\n"
    "In the morning the people of the town walk along the water and talk about the weather, "
    "the market and the news of the day. There is a small school near the bridge where the "
    "children learn to read, to write and to count from 1 to 100.\n"
    "A model is a set of numbers that turns one thing into another. This model reads a "
    "sentence, breaks it into tokens, and then guesses the next token again and again. "
    "It has many experts, but for each token it asks only two of them, and that is why it "
    "can be large and still fast.\n"
    "What is the time? It is ten past three in the afternoon, and the sun is still high.\n"
    "She said that they would meet at the station at 7:30, and that he should not be late "
    "this time. He was there at 7:15, and he waited with a cup of tea and a book.\n"
    "The weather was cold in the winter, warm in the spring, hot in the summer and wet in "
    "the autumn. Every season has its own colours and its own sounds.\n"
    "Computers store text as bytes. Each byte is a number between 0 and 255, and a token "
    "can stand for one byte or for a whole word that appears often in the training text.\n"
    "Hello! How are you today? I am fine, thank you. Where are you going? I am going to "
    "the library to find a book about the history of the world.\n"
    "Once upon a time there was a little house at the edge of a forest. In the house there "
    "lived an old man, his daughter and a very clever cat. The cat liked to sit by the "
    "window and watch the birds in the trees.\n"
    "The quick brown fox jumps over the lazy dog. The five boxing wizards jump quickly.\n"
    "We should write the code so that it is simple to read, simple to test and simple to "
    "change. A good test must be able to fail, and it should say clearly what went wrong.\n"
    "User: Can you tell me a story about the sea?\n"
    "Assistant: Of course. Long ago a young sailor left her village to see what lay beyond "
    "the horizon. She sailed for many days and nights, and she learned to read the stars, "
    "the wind and the waves. When she came home, she was older and wiser, and she told her "
    "friends everything she had seen.\n"
    "User: Thank you, that was a nice story.\n"
    "Assistant: You are welcome. Would you like to hear another one?\n";


/* GPT-2 bytes_to_unicode (tokenizers.md §4.1): the symbol of byte b as UTF-8. */
static void byte_symbol(unsigned b, char out[4])
{
    unsigned cp;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) {
        cp = b;
    } else { /* the 68 others in ascending order -> U+0100.. */
        unsigned k = 0;
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF)))
                k++;
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

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* Length of the pre-tokenizer chunk at s (a simplified qwen35 split: " word",
 * one digit, " punctuation run", whitespace). */
static size_t chunk_len(const char *s)
{
    size_t i = 0;
    if (is_digit((unsigned char)s[0])) return 1;
    if (s[0] == ' ' && (is_alpha((unsigned char)s[1]) || (s[1] && !is_digit((unsigned char)s[1]) &&
                                                          s[1] != ' ' && s[1] != '\n')))
        i = 1;
    if (is_alpha((unsigned char)s[i])) {
        while (is_alpha((unsigned char)s[i])) i++;
        return i;
    }
    if (s[i] == ' ' || s[i] == '\n') {
        while (s[i] == ' ' || s[i] == '\n') i++;
        return i;
    }
    while (s[i] && !is_alpha((unsigned char)s[i]) && !is_digit((unsigned char)s[i]) &&
           s[i] != ' ' && s[i] != '\n')
        i++;
    return i ? i : 1;
}

void mk_bpe_free(bpe *b)
{
    for (uint32_t i = 0; i < b->n_word; i++) free(b->word[i]);
    free(b->word);
    free(b->word_len);
    free(b->word_count);
    free(b->tok);
    free(b->merges);
}

static int32_t find_tok(const bpe *b, const char *s)
{
    for (uint32_t i = 0; i < b->n_tok; i++)
        if (!strcmp(b->tok[i], s)) return (int32_t)i;
    return -1;
}

typedef struct pair_count {
    uint64_t key; /* left << 32 | right */
    uint32_t count;
} pair_count;

static int cmp_key(const void *a, const void *b)
{
    uint64_t x = ((const pair_count *)a)->key, y = ((const pair_count *)b)->key;
    return x < y ? -1 : x > y;
}

/* The gemma4 form of byte b's initial symbol (tokenizers.md §5: raw UTF-8
 * characters, a space escaped as U+2581): printable ASCII, tab and newline as
 * themselves, space as "\u2581", any other byte "" (not in the text, no token). */
static void gemma_symbol(unsigned b, char out[4])
{
    if (b == ' ')
        memcpy(out, "\xE2\x96\x81", 4);
    else if ((b >= 0x21 && b <= 0x7E) || b == '\n' || b == '\t') {
        out[0] = (char)b;
        out[1] = 0;
    } else
        out[0] = 0;
}

/* gemma 0: byte-level BPE (GPT-2 byte symbols); 1: gemma4 symbols (gemma_symbol). */
vt_status mk_bpe_train(bpe *b, uint32_t max_merges, int gemma)
{
    const size_t text_len = sizeof demo_text - 1;
    b->cap_tok = 256 + max_merges;
    pair_count *pc = NULL;
    /* the first that fails names itself; the rest stay NULL for the caller's free */
    if (!(b->tok = vt_calloc_named(b->cap_tok, sizeof *b->tok, "mkmodel: tokenizer vocab")) ||
        !(b->merges = vt_calloc_named(max_merges ? max_merges : 1, sizeof *b->merges,
                                      "mkmodel: tokenizer merges table")) ||
        !(b->word = vt_calloc_named(text_len, sizeof *b->word, "mkmodel: training words")) ||
        !(b->word_len = vt_calloc_named(text_len, sizeof *b->word_len,
                                        "mkmodel: training word lengths")) ||
        !(b->word_count = vt_calloc_named(text_len, sizeof *b->word_count,
                                          "mkmodel: training word counts")) ||
        !(pc = vt_malloc_named(text_len * sizeof *pc, "mkmodel: training pair counts")))
        return VT_ERR_OUT_OF_MEMORY;
    for (unsigned i = 0; i < 256; i++) (gemma ? gemma_symbol : byte_symbol)(i, b->tok[i]);
    b->n_tok = 256;
    /* distinct chunks with counts */
    for (size_t pos = 0; pos < text_len;) {
        size_t n = chunk_len(demo_text + pos);
        uint32_t w;
        for (w = 0; w < b->n_word; w++) {
            if (b->word_len[w] != n) continue;
            uint32_t k = 0;
            while (k < n && b->word[w][k] == (unsigned char)demo_text[pos + k]) k++;
            if (k == n) break;
        }
        if (w == b->n_word) {
            if (!(b->word[w] = vt_malloc_named(n * sizeof **b->word, "mkmodel: training word"))) {
                free(pc);
                return VT_ERR_OUT_OF_MEMORY;
            }
            for (size_t k = 0; k < n; k++) b->word[w][k] = (unsigned char)demo_text[pos + k];
            b->word_len[w] = (uint32_t)n;
            b->n_word++;
        }
        b->word_count[w]++;
        pos += n;
    }
    /* greedy merges of the most frequent adjacent pair (ties: smallest ids), down to
     * pairs seen once, until max_merges or every chunk is a single token */
    while (b->n_merges < max_merges) {
        size_t np = 0;
        for (uint32_t w = 0; w < b->n_word; w++)
            for (uint32_t k = 0; k + 1 < b->word_len[w]; k++)
                pc[np++] = (pair_count){(uint64_t)b->word[w][k] << 32 | b->word[w][k + 1],
                                        b->word_count[w]};
        if (!np) break;
        qsort(pc, np, sizeof *pc, cmp_key);
        uint64_t best = 0;
        uint32_t best_n = 0;
        for (size_t i = 0; i < np;) {
            size_t j = i;
            uint32_t c = 0;
            while (j < np && pc[j].key == pc[i].key) c += pc[j++].count;
            if (c > best_n) {
                best_n = c;
                best = pc[i].key;
            }
            i = j;
        }
        if (best_n < 1) break;
        uint32_t l = (uint32_t)(best >> 32), r = (uint32_t)best;
        char joined[2 * MAX_SYM];
        snprintf(joined, sizeof joined, "%s%s", b->tok[l], b->tok[r]);
        if (strlen(joined) >= MAX_SYM) break;
        snprintf(b->merges[b->n_merges++], sizeof *b->merges, "%s %s", b->tok[l], b->tok[r]);
        int32_t id = find_tok(b, joined);
        if (id < 0) {
            id = (int32_t)b->n_tok;
            memcpy(b->tok[b->n_tok++], joined, strlen(joined) + 1);
        }
        for (uint32_t w = 0; w < b->n_word; w++) {
            uint32_t o = 0;
            for (uint32_t k = 0; k < b->word_len[w]; k++) {
                if (k + 1 < b->word_len[w] && b->word[w][k] == l && b->word[w][k + 1] == r) {
                    b->word[w][o++] = (uint32_t)id;
                    k++;
                } else {
                    b->word[w][o++] = b->word[w][k];
                }
            }
            b->word_len[w] = o;
        }
    }
    free(pc);
    return VT_OK;
}

static const char chatml_template[] =
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}";

vt_status mk_add_tokenizer(vt_gguf_writer *w, bpe *b, uint32_t want_vocab, uint32_t *n_vocab)
{
    static const char *const special[3] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    uint32_t n_real = b->n_tok + 3;
    uint32_t n = want_vocab > n_real ? want_vocab : n_real;
    const char **toks = NULL, **merges = NULL;
    int32_t *types = NULL;
    char *pad = NULL; /* "<|pad_N|>" strings of the padding tokens, 20 bytes each */
    vt_status st = VT_OK;
    if (n > n_real && !(pad = vt_malloc_named((size_t)(n - n_real) * 20, "mkmodel: padding tokens"))) {
        st = VT_ERR_OUT_OF_MEMORY;
        goto out;
    }
    if (!(toks = vt_malloc_named(n * sizeof *toks, "mkmodel: token list")) ||
        !(merges = vt_malloc_named((b->n_merges ? b->n_merges : 1) * sizeof *merges,
                                   "mkmodel: merge list")) ||
        !(types = vt_malloc_named(n * sizeof *types, "mkmodel: token types"))) {
        st = VT_ERR_OUT_OF_MEMORY;
        goto out;
    }
    for (uint32_t i = 0; i < b->n_tok; i++) {
        toks[i] = b->tok[i];
        types[i] = 1; /* NORMAL */
    }
    for (uint32_t i = 0; i < 3; i++) {
        toks[b->n_tok + i] = special[i];
        types[b->n_tok + i] = 3; /* CONTROL */
    }
    for (uint32_t i = n_real; i < n; i++) { /* padding up to n_vocab: UNUSED, never produced */
        char *t = pad + (size_t)(i - n_real) * 20;
        snprintf(t, 20, "<|pad_%u|>", i - n_real);
        toks[i] = t;
        types[i] = 5; /* UNUSED */
    }
    for (uint32_t i = 0; i < b->n_merges; i++) merges[i] = b->merges[i];
    if ((st = vt_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2")) ||
        (st = vt_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen35")) ||
        (st = vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, n)) ||
        (st = vt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", VT_GGUF_INT32, types, n)) ||
        (st = vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, b->n_merges)) ||
        (st = vt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", b->n_tok + 2)) ||
        (st = vt_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", b->n_tok)) ||
        (st = vt_gguf_writer_set_str(w, "tokenizer.chat_template", chatml_template)))
        goto out;
    *n_vocab = n;
out:
    free(pad);
    free(toks);
    free(merges);
    free(types);
    return st;
}


/* The gemma4-moe-tiny fixture's chat template (a Gemma turn template). */
static const char gemma_template[] =
    "{{- bos_token }}{%- for message in messages %}{%- set role = 'model' if message['role'] == "
    "'assistant' else message['role'] %}{{- '<|turn>' + role + '\\n' + message['content'] + "
    "'<turn|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|turn>model\\n' }}{%- endif %}";

/* tokenizers.md §1.2: the specials at the ids of the real vocabulary (types: 3
 * CONTROL, 4 USER_DEFINED for the seven always-rendered ones). */
static const struct {
    const char *text;
    int32_t type;
} gemma_special[] = {
    {"<pad>", 3},         {"<eos>", 3},          {"<bos>", 3},           {"<unk>", 3},
    {"<mask>", 3},        {"<|turn>", 3},        {"<turn|>", 3},         {"<|think|>", 3},
    {"<|channel>", 4},    {"<channel|>", 4},     {"<|tool>", 3},         {"<tool|>", 3},
    {"<|tool_call>", 4},  {"<tool_call|>", 4},   {"<|tool_response>", 4}, {"<tool_response|>", 4},
    {"<|\"|>", 4},
};
#define GEMMA_N_SPECIAL (sizeof gemma_special / sizeof gemma_special[0])

vt_status mk_add_tokenizer_gemma4(vt_gguf_writer *w, const bpe *b, uint32_t want_vocab,
                                      uint32_t *n_vocab)
{
    uint32_t n_chars = 0;
    for (uint32_t i = 0; i < 256; i++) n_chars += b->tok[i][0] != 0;
    const uint32_t n_real = (uint32_t)GEMMA_N_SPECIAL + 256 + n_chars + (b->n_tok - 256);
    const uint32_t n = want_vocab > n_real ? want_vocab : n_real;
    const char **toks = NULL, **merges = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    char *names = NULL; /* "<0xHH>" (7 bytes each), then "<unusedN>" (20 bytes each) */
    vt_status st = VT_OK;
    if (!(names = vt_malloc_named(256 * 7 + (size_t)(n - n_real) * 20, "mkmodel: token names")) ||
        !(toks = vt_malloc_named(n * sizeof *toks, "mkmodel: token list")) ||
        !(merges = vt_malloc_named((b->n_merges ? b->n_merges : 1) * sizeof *merges,
                                   "mkmodel: merge list")) ||
        !(types = vt_malloc_named(n * sizeof *types, "mkmodel: token types")) ||
        !(scores = vt_malloc_named(n * sizeof *scores, "mkmodel: token scores"))) {
        st = VT_ERR_OUT_OF_MEMORY;
        goto out;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < GEMMA_N_SPECIAL; i++, k++) {
        toks[k] = gemma_special[i].text;
        types[k] = gemma_special[i].type;
    }
    for (uint32_t i = 0; i < 256; i++, k++) { /* byte fallback tokens (§5 step 5) */
        snprintf(names + 7 * i, 7, "<0x%02X>", i);
        toks[k] = names + 7 * i;
        types[k] = 6; /* BYTE */
    }
    for (uint32_t i = 0; i < b->n_tok; i++) {
        if (!b->tok[i][0]) continue; /* a byte that is no character of the text */
        toks[k] = b->tok[i];
        types[k++] = 1; /* NORMAL */
    }
    for (uint32_t i = n_real; i < n; i++, k++) {
        char *t = names + 256 * 7 + (size_t)(i - n_real) * 20;
        snprintf(t, 20, "<unused%u>", i - n_real);
        toks[k] = t;
        types[k] = 5; /* UNUSED */
    }
    for (uint32_t i = 0; i < n; i++) scores[i] = -1000.0f;
    for (uint32_t i = 0; i < b->n_merges; i++) merges[i] = b->merges[i];
    if ((st = vt_gguf_writer_set_str(w, "tokenizer.ggml.model", "gemma4")) ||
        (st = vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, n)) ||
        (st = vt_gguf_writer_set_arr(w, "tokenizer.ggml.scores", VT_GGUF_FLOAT32, scores, n)) ||
        (st = vt_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", VT_GGUF_INT32, types, n)) ||
        (st = vt_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, b->n_merges)) ||
        (st = vt_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 2)) ||
        (st = vt_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 1)) ||
        (st = vt_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 3)) ||
        (st = vt_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0)) ||
        (st = vt_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 4)) ||
        (st = vt_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1)) ||
        (st = vt_gguf_writer_set_bool(w, "tokenizer.ggml.add_sep_token", 0)) ||
        (st = vt_gguf_writer_set_str(w, "tokenizer.chat_template", gemma_template)) ||
        (st = vt_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 0)))
        goto out;
    *n_vocab = n;
out:
    free(names);
    free(toks);
    free(merges);
    free(types);
    free(scores);
    return st;
}


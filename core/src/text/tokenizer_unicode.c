/*
 * tokenizer_unicode.c - UTF-8, code point classes, NFC, the Qwen
 * pre-tokenizer rule list and the GPT-2 byte map (see tokenizer_unicode.h;
 * spec: tokenizers.md §2, §4, §4.1, §4.2).
 *
 * Classes and NFC come from utf8proc. The pre-tokenizer is the hand-written,
 * non-backtracking form of the Qwen regexes (§4.2, rules R1-R8), applied to
 * the code points of one RAW fragment.
 */
#include "tokenizer_unicode.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "error.h"

/* ---- code point classes ---- */

unsigned vt_cp_flags(uint32_t cp)
{
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return VT_CP_L;
        if (cp >= '0' && cp <= '9') return VT_CP_N;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return VT_CP_WS;
        return 0;
    }
    if (cp == 0x85) return VT_CP_WS;
    switch (utf8proc_category((utf8proc_int32_t)cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return VT_CP_L;
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: return VT_CP_M;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return VT_CP_N;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: return VT_CP_WS;
    default: return 0;
    }
}

int vt_cp_is_strip_space(uint32_t cp)
{
    return (cp >= 0x1C && cp <= 0x1F) || (vt_cp_flags(cp) & VT_CP_WS) != 0;
}

/* ---- UTF-8 ---- */

int vt_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

int vt_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (n == 0) return 0;
    unsigned char b0 = s[0];
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    int len;
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        if (b0 == 0xE0) lo = 0xA0;      /* overlong */
        else if (b0 == 0xED) hi = 0x9F; /* surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        if (b0 == 0xF0) lo = 0x90;      /* overlong */
        else if (b0 == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else
        return 0;
    if (n < (size_t)len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (int k = 2; k < len; k++)
        if (!is_cont(s[k])) return 0;
    uint32_t v;
    if (len == 2) v = ((uint32_t)(b0 & 0x1F) << 6) | (s[1] & 0x3Fu);
    else if (len == 3)
        v = ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3Fu);
    else
        v = ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
            ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3Fu);
    *cp = v;
    return len;
}

vt_status vt_utf8_decode(const char *s, size_t n, uint32_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    uint32_t *cps = malloc((n ? n : 1) * sizeof *cps);
    if (!cps) {
        vt_set_error_oom((n ? n : 1) * sizeof *cps, "tokenizer: code points of %zu bytes of text",
                         n);
        return VT_ERR_OUT_OF_MEMORY;
    }
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        uint32_t cp;
        int len = vt_utf8_next(u + i, n - i, &cp);
        if (len == 0) {
            cps[k++] = 0xFFFD; /* one replacement per bad byte (§2) */
            i++;
        } else {
            cps[k++] = cp;
            i += (size_t)len;
        }
    }
    *out = cps;
    *n_out = k;
    return VT_OK;
}

/* ---- NFC ---- */

/*
 * NFC in time linear in the input (issue 43: utf8proc_map's canonical
 * ordering is a bubble sort, quadratic over a long run of combining marks in
 * alternating order). The three steps of UAX #15, each linear:
 *  1. canonical decomposition of each code point (utf8proc_decompose_char,
 *     Hangul included), at most 4 code points each (UAX #15: the longest
 *     canonical decomposition is 4);
 *  2. canonical ordering: every maximal run of code points with a nonzero
 *     combining class stably sorted by class (insertion sort for short runs,
 *     a counting sort over the 255 classes for long ones);
 *  3. canonical composition (utf8proc_normalize_utf32 with COMPOSE, one pass).
 * The options are those of the utf8proc_map call this replaces (STABLE |
 * COMPOSE), so the result is the same; tests/test_tokenizer_unicode.c holds
 * it to utf8proc_map on mixed text.
 */
#define NFC_SHORT_RUN 16

static void nfc_order_run(utf8proc_int32_t *c, size_t n, utf8proc_int32_t *tmp)
{
    if (n < 2) return;
    if (n <= NFC_SHORT_RUN) {
        for (size_t i = 1; i < n; i++) {
            utf8proc_int32_t x = c[i];
            int cx = utf8proc_get_property(x)->combining_class;
            size_t j = i;
            while (j > 0 && utf8proc_get_property(c[j - 1])->combining_class > cx) {
                c[j] = c[j - 1];
                j--;
            }
            c[j] = x;
        }
        return;
    }
    size_t start[257] = {0};
    for (size_t i = 0; i < n; i++) start[utf8proc_get_property(c[i])->combining_class + 1]++;
    for (int k = 0; k < 256; k++) start[k + 1] += start[k];
    for (size_t i = 0; i < n; i++) tmp[start[utf8proc_get_property(c[i])->combining_class]++] = c[i];
    memcpy(c, tmp, n * sizeof *c);
}

vt_status vt_unicode_nfc(uint32_t **cps, size_t *n)
{
    /* Every code point below U+0300 has canonical combining class 0 and is its
     * own NFC form, so such a sequence is already NFC. */
    size_t i;
    for (i = 0; i < *n; i++)
        if ((*cps)[i] >= 0x300) break;
    if (i == *n) return VT_OK;

    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    size_t cap = *n + 16, len = 0;
    utf8proc_int32_t *d = malloc(cap * sizeof *d);
    if (!d) {
        vt_set_error_oom(cap * sizeof *d, "tokenizer: NFC of %zu code points", *n);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (i = 0; i < *n; i++) {
        if (cap - len < 4) {
            size_t nc = cap + cap / 2 + 16;
            utf8proc_int32_t *g = realloc(d, nc * sizeof *d);
            if (!g) {
                free(d);
                vt_set_error_oom(nc * sizeof *d, "tokenizer: NFC of %zu code points", *n);
                return VT_ERR_OUT_OF_MEMORY;
            }
            d = g;
            cap = nc;
        }
        utf8proc_ssize_t r = utf8proc_decompose_char((utf8proc_int32_t)(*cps)[i], d + len, 4, opt, NULL);
        if (r < 0 || r > 4) {
            free(d);
            vt_set_error("tokenizer: NFC normalization of U+%04X failed: %s", (unsigned)(*cps)[i],
                         r < 0 ? utf8proc_errmsg(r) : "decomposition longer than 4");
            return VT_ERR_INTERNAL;
        }
        len += (size_t)r;
    }
    utf8proc_int32_t *tmp = malloc((len ? len : 1) * sizeof *tmp);
    if (!tmp) {
        free(d);
        vt_set_error_oom((len ? len : 1) * sizeof *tmp, "tokenizer: NFC of %zu code points", *n);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (size_t a = 0; a < len;) {
        if (!utf8proc_get_property(d[a])->combining_class) {
            a++;
            continue;
        }
        size_t b = a + 1;
        while (b < len && utf8proc_get_property(d[b])->combining_class) b++;
        nfc_order_run(d + a, b - a, tmp);
        a = b;
    }
    free(tmp);
    utf8proc_ssize_t r = utf8proc_normalize_utf32(d, (utf8proc_ssize_t)len, opt);
    if (r < 0) {
        free(d);
        vt_set_error("tokenizer: NFC normalization failed: %s", utf8proc_errmsg(r));
        return VT_ERR_INTERNAL;
    }
    free(*cps);
    *cps = (uint32_t *)d;
    *n = (size_t)r;
    return VT_OK;
}

/* ---- pre-tokenizer (§4.2) ---- */

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

vt_status vt_pretok_split(vt_pretok kind, const uint32_t *c, size_t n, vt_pretok_emit_fn emit,
                          void *ctx)
{
    /* LM = letter (qwen2) or letter-or-mark (qwen35). */
    const unsigned lm = kind == VT_PRETOK_QWEN35 ? (VT_CP_L | VT_CP_M) : VT_CP_L;
    size_t i = 0;
    while (i < n) {
        const uint32_t c0 = c[i];
        const unsigned f0 = vt_cp_flags(c0);
        const unsigned f1 = i + 1 < n ? vt_cp_flags(c[i + 1]) : 0;
        size_t len = 0;

        /* R1 contraction: 's 't 'm 'd 're 've 'll, ASCII apostrophe, any case */
        if (c0 == '\'' && i + 1 < n) {
            uint32_t a = ascii_lower(c[i + 1]);
            if (a == 's' || a == 't' || a == 'm' || a == 'd') len = 2;
            else if (i + 2 < n) {
                uint32_t b = ascii_lower(c[i + 2]);
                if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
                    len = 3;
            }
        }
        /* R2 word: [^\r\n\p{L}\p{N}]?[LM]+ */
        if (!len && c0 != '\r' && c0 != '\n' && !(f0 & VT_CP_N) && ((f0 & lm) || (f1 & lm))) {
            size_t j = i + 1;
            while (j < n && (vt_cp_flags(c[j]) & lm)) j++;
            len = j - i;
        }
        /* R3 digit: \p{N}, one at a time */
        if (!len && (f0 & VT_CP_N)) len = 1;
        /* R4 symbols: ' ?[^\s LM N]+[\r\n]*' */
        if (!len) {
            const unsigned stop = VT_CP_WS | lm | VT_CP_N;
            size_t x = c0 == ' ' ? i + 1 : i;
            if (x < n && !(vt_cp_flags(c[x]) & stop)) {
                size_t j = x + 1;
                while (j < n && !(vt_cp_flags(c[j]) & stop)) j++;
                while (j < n && (c[j] == '\r' || c[j] == '\n')) j++;
                len = j - i;
            }
        }
        if (!len) {
            size_t k = 0, last_nl = 0; /* whitespace run; 1 + index of its last \r/\n */
            while (i + k < n && (vt_cp_flags(c[i + k]) & VT_CP_WS)) {
                if (c[i + k] == '\r' || c[i + k] == '\n') last_nl = k + 1;
                k++;
            }
            if (last_nl) len = last_nl;             /* R5: \s*[\r\n]+ */
            else if (k > 1 && i + k < n) len = k - 1; /* R6: \s+(?!\S) */
            else if (k >= 1) len = k;                 /* R7: \s+ */
            else len = 1;                             /* R8 */
        }
        vt_status st = emit(ctx, i, len);
        if (st != VT_OK) return st;
        i += len;
    }
    return VT_OK;
}

/* ---- GPT-2 byte map (§4.1) ---- */

static int byte_is_identity(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t vt_byte_to_cp(uint8_t b)
{
    if (byte_is_identity(b)) return b;
    /* the 68 others in ascending order: 0x00-0x20, 0x7F-0xA0, 0xAD */
    if (b <= 0x20) return 0x100u + b;
    if (b <= 0xA0) return 0x100u + 33u + (uint32_t)(b - 0x7F);
    return 0x100u + 67u; /* 0xAD */
}

int vt_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100) return byte_is_identity(cp) ? (int)cp : -1;
    if (cp > 0x143) return -1;
    uint32_t k = cp - 0x100;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(0x7F + (k - 33));
    return 0xAD;
}

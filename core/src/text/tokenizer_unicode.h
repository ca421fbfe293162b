/*
 * tokenizer_unicode.h - the Unicode pieces the tokenizers need (private to
 * the core): lenient UTF-8 decoding (tokenizers.md §2), code point classes
 * from utf8proc (§4.2), NFC (§4), the Qwen pre-tokenizers as the operational
 * rule list of §4.2, and the GPT-2 byte <-> code point map (§4.1).
 *
 * Not a general Unicode library: only what tokenize/detokenize and the chat
 * templates use.
 */
#ifndef VT_TOKENIZER_UNICODE_H
#define VT_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "vt/status.h"

/* Code point classes (tokenizers.md §4.2). */
enum {
    VT_CP_L = 1,  /* letter: Lu Ll Lt Lm Lo */
    VT_CP_M = 2,  /* mark: Mn Mc Me */
    VT_CP_N = 4,  /* number: Nd Nl No */
    VT_CP_WS = 8  /* Unicode White_Space */
};

/* Class bits of a code point. White_Space is Zs/Zl/Zp plus U+0009-000D and
 * U+0085, which is exactly the Unicode White_Space property. */
unsigned vt_cp_flags(uint32_t cp);

/* Bytes needed to encode cp (1..4); cp must be <= 0x10FFFF. */
int vt_utf8_encode(uint32_t cp, char out[4]);

/*
 * Length of the valid UTF-8 sequence at s[0..n) (1..4), 0 when s[0] does not
 * start one (bad lead, bad continuation, truncated, overlong, surrogate or
 * above U+10FFFF). *cp gets the code point when valid.
 */
int vt_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/*
 * Decode n bytes to code points; every byte that does not start a valid
 * sequence becomes U+FFFD (one per bad byte, §2). *out is malloc-ed, at most
 * n entries. VT_ERR_OUT_OF_MEMORY on failure.
 */
vt_status vt_utf8_decode(const char *s, size_t n, uint32_t **out, size_t *n_out);

/*
 * NFC of cps[0..*n): on return *cps and *n hold the composed
 * code points (a new malloc-ed array when it changed; the old one is freed).
 * The input must be valid code points (vt_utf8_decode output).
 */
vt_status vt_unicode_nfc(uint32_t **cps, size_t *n);

/* Pre-tokenizers (§4.2). */
typedef enum vt_pretok {
    VT_PRETOK_QWEN2 = 0, /* letters only join letter runs */
    VT_PRETOK_QWEN35 = 1 /* letters and combining marks (\p{M}) join letter runs */
} vt_pretok;

/*
 * Split cps[0..n) into chunks with the rule list R1-R8 of §4.2. Calls
 * emit(ctx, start, len) for each chunk in order (len >= 1); stops and returns
 * the first non-VT_OK status emit returns.
 */
typedef vt_status (*vt_pretok_emit_fn)(void *ctx, size_t start, size_t len);
vt_status vt_pretok_split(vt_pretok kind, const uint32_t *cps, size_t n, vt_pretok_emit_fn emit,
                          void *ctx);

/* GPT-2 bytes_to_unicode (§4.1): the code point byte b stands for. */
uint32_t vt_byte_to_cp(uint8_t b);
/* Inverse: the byte cp stands for, or -1 if cp is not one of the 256. */
int vt_cp_to_byte(uint32_t cp);

/* Whitespace as Python's str.strip() sees it (Jinja `trim`): White_Space plus
 * U+001C-001F. */
int vt_cp_is_strip_space(uint32_t cp);

#endif

/*
 * tokenizer.h - tokenizers read from GGUF metadata, detokenization (streaming
 * safe) and the families' chat templates.
 *
 * Behaviour: llama.cpp's src/llama-vocab.cpp and src/unicode.cpp (pre-tokenizer
 * regexes, byte map, special-token partition), which vt matches token for
 * token. Kinds, chosen by tokenizer.ggml.model:
 * byte-level BPE ("gpt2", pre-tokenizers "qwen35" and "qwen2", with NFC
 * normalization for the Qwen families, §4) and Gemma 4 ("gemma4": BPE by merge
 * rank over raw UTF-8 with spaces as U+2581, split at newline runs, <0xHH> byte
 * fallback, BOS always added, §5). A tokenizer kind is core code, not a
 * model's private code. Chat templates: qwen35 (§10.1) and gemma4 (§10.2).
 */
#ifndef VT_TOKENIZER_H
#define VT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "vt/gguf.h"
#include "vt/status.h"

typedef struct vt_tokenizer vt_tokenizer;

/* Token attributes (tokenizers.md §1.1). */
enum {
    VT_TOKEN_NORMAL = 1,
    VT_TOKEN_UNKNOWN = 2,
    VT_TOKEN_CONTROL = 3,
    VT_TOKEN_USER_DEFINED = 4,
    VT_TOKEN_UNUSED = 5,
    VT_TOKEN_BYTE = 6
};

/* Build from the tokenizer.ggml.* keys of g (g may be closed afterwards).
 * Errors name the key: VT_ERR_FORMAT, VT_ERR_UNSUPPORTED (unknown model/pre).
 * Stricter than llama.cpp: a *_token_id key outside the vocabulary, array
 * lengths that differ from tokenizer.ggml.tokens, a token type outside 0..6
 * and a merge that is not "A B" are refused. gpt2 has no default BOS/EOS
 * (llama.cpp's placeholder id 11 is not used): absent keys give -1. A missing
 * tokenizer.ggml.pre falls back to the qwen2 split without NFC (WARN log).
 * gemma4 (§1.2, §5): add_bos is forced true whatever the file says (BOS from
 * bos_token_id, else the token "<bos>", else VT_ERR_FORMAT); pre is ignored;
 * merges are required. Also kept: tokenizer.ggml.suppress_tokens (ids checked)
 * and the tokenizer.chat_template text. */
vt_status vt_tokenizer_load(const vt_gguf *g, vt_tokenizer **out);
void vt_tokenizer_free(vt_tokenizer *t);

int64_t vt_tokenizer_n_vocab(const vt_tokenizer *t);
int32_t vt_tokenizer_bos(const vt_tokenizer *t); /* -1 when none */
int32_t vt_tokenizer_eos(const vt_tokenizer *t); /* -1 when none */
int vt_tokenizer_add_bos(const vt_tokenizer *t);
/* End-of-generation token (tokenizers.md §9)? */
int vt_tokenizer_is_eog(const vt_tokenizer *t, int32_t id);
/* Listed in tokenizer.ggml.suppress_tokens (its logit must be forced to -inf
 * when sampling; Gemma 4 "Unified" variants, §1)? 0 for an out-of-range id. */
int vt_tokenizer_is_suppressed(const vt_tokenizer *t, int32_t id);
/* The kind loaded: "gpt2" or "gemma4" (tokenizer.ggml.model). */
const char *vt_tokenizer_model(const vt_tokenizer *t);
/* tokenizer.chat_template as stored (NUL-terminated), NULL when absent. Valid
 * as long as t. */
const char *vt_tokenizer_chat_template(const vt_tokenizer *t);
/* Attribute of a token (VT_TOKEN_*), 0 for an out-of-range id. */
int vt_tokenizer_token_type(const vt_tokenizer *t, int32_t id);
/* Id of a token by its exact text, -1 if none. */
int32_t vt_tokenizer_find(const vt_tokenizer *t, const char *text);

/*
 * Tokenize len bytes of UTF-8 text (tokenizers.md §2): add_special adds BOS/EOS
 * as the file says; parse_special matches CONTROL tokens written in the text
 * (USER_DEFINED ones are always matched). *ids is malloc-ed (caller frees),
 * *n_ids its length (may be 0 with *ids NULL).
 */
vt_status vt_tokenize(const vt_tokenizer *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t **ids, int64_t *n_ids);

/* A byte range [off, off + len) of a text. */
typedef struct vt_text_span {
    size_t off, len;
} vt_text_span;

/*
 * vt_tokenize with parse_special on, except that a CONTROL (or UNKNOWN) token
 * whose text overlaps one of the n_plain spans is not matched there: those
 * bytes tokenize as the text they are (--no-special: message content that
 * spells "<|im_end|>" stays text, while the chat template's own control
 * tokens around it are parsed). Outside the spans, and with no special
 * token text inside them, the ids are vt_tokenize(..., 1, ...)'s exactly.
 * Spans may be in any order and may overlap.
 */
vt_status vt_tokenize_plain(const vt_tokenizer *t, const char *text, size_t len, int add_special,
                            const vt_text_span *plain, size_t n_plain, int32_t **ids,
                            int64_t *n_ids);

/* The bytes token id stands for (tokenizers.md §7): CONTROL/UNKNOWN render
 * only when special. Writes at most cap bytes; returns the full length
 * (may exceed cap), or -1 for an invalid id. */
int64_t vt_token_to_piece(const vt_tokenizer *t, int32_t id, int special, char *buf, size_t cap);

/*
 * Streaming detokenizer: push ids one at a time and get back only complete
 * UTF-8 characters; a multi-byte character split across tokens is held until
 * it completes. flush() returns what is left (invalid bytes as-is).
 */
typedef struct vt_detok_stream vt_detok_stream;
vt_detok_stream *vt_detok_stream_new(const vt_tokenizer *t, int special);
void vt_detok_stream_free(vt_detok_stream *s);
/* Returns a pointer to n bytes valid until the next call on s. gemma4 NORMAL
 * tokens render U+2581 as a space, <0xHH> tokens as the byte; no clean-up of
 * spaces is applied (HF parity, §7). */
const char *vt_detok_stream_push(vt_detok_stream *s, int32_t id, size_t *n);
const char *vt_detok_stream_flush(vt_detok_stream *s, size_t *n);

/* ---- chat templates (tokenizers.md §10) ---- */
typedef struct vt_chat_msg {
    const char *role;    /* "system", "user", "assistant" (qwen35 also "tool", gemma4 also
                            "developer") */
    const char *content; /* UTF-8; trimmed by the renderer as the templates do */
} vt_chat_msg;

/*
 * Render messages with the chat template of a family ("qwen35", "gemma4"), as
 * the released models' templates render them (§10.1, §10.2), ending with the
 * generation prompt when add_generation_prompt. *out is malloc-ed.
 * VT_ERR_UNSUPPORTED for an unknown family.
 *
 * gemma4 (§10.2, no tools): the prompt does NOT begin with the template's
 * "<bos>" text unless VT_CHAT_BOS is given, because vt_tokenize(add_special=1)
 * adds the BOS id itself (llama.cpp strips the text likewise): tokenize the
 * result with add_special=1, parse_special=1 and it holds exactly one BOS.
 * Thinking is off by default (the template's enable_thinking default); the
 * generation prompt is "<|turn>model\n", plus the empty thought channel with
 * VT_CHAT_EMPTY_THOUGHT (26B-A4B/31B templates; vt_chat_flags_for_template
 * tells from the GGUF's template text).
 */
vt_status vt_chat_render(const char *family, const vt_chat_msg *msgs, size_t n_msgs,
                         int add_generation_prompt, char **out);
/* vt_chat_render_ex flags */
#define VT_CHAT_NO_THINKING 0x1u /* qwen35: generation prompt with an empty, closed think
                                    block (the template's enable_thinking=false); gemma4:
                                    thinking off, which is its default */
#define VT_CHAT_THINKING 0x2u /* gemma4: enable_thinking=true: a system turn always, opened
                                 with "<|think|>\n"; qwen35: its default (no effect).
                                 Refused together with VT_CHAT_NO_THINKING. */
#define VT_CHAT_EMPTY_THOUGHT 0x4u /* gemma4, thinking off: the generation prompt ends with
                                      "<|channel>thought\n<channel|>" (an empty, closed
                                      thought channel, as the 26B-A4B/31B templates) */
#define VT_CHAT_BOS 0x8u /* gemma4: begin with the template's "<bos>" text (tokenize
                            with add_special=0 then) */
/* vt_chat_render with flags (VT_CHAT_*). The qwen35 renderer also accepts role
 * "tool" (results wrapped in <tool_response> inside a user turn, as the
 * template does) and refuses, with VT_ERR_INVALID_ARG, what the template
 * refuses: no messages, a system message that is not first, an unknown role,
 * no user query. */
vt_status vt_chat_render_ex(const char *family, const vt_chat_msg *msgs, size_t n_msgs,
                            int add_generation_prompt, unsigned flags, char **out);
/* vt_chat_render_ex, and where in *out the messages' content went: *spans
 * (malloc-ed, caller frees; NULL when *n_spans is 0) in output order, for
 * vt_tokenize_plain (content's special-token text stays text). */
vt_status vt_chat_render_spans(const char *family, const vt_chat_msg *msgs, size_t n_msgs,
                               int add_generation_prompt, unsigned flags, char **out,
                               vt_text_span **spans, size_t *n_spans);
/*
 * Render messages with a Jinja chat template (tmpl: the GGUF's
 * tokenizer.chat_template, vt_tokenizer_chat_template, or a file's) as
 * transformers' apply_chat_template does (chat_template.c, jinja.h): the
 * variables messages [{role, content}], add_generation_prompt, bos_token and
 * eos_token (tok's texts of those ids) and enable_thinking (false with
 * VT_CHAT_NO_THINKING, true with VT_CHAT_THINKING, else left to the
 * template's default; the other flags are the built-in renderers'). Where
 * tok adds the BOS id itself (vt_tokenizer_add_bos), a BOS text the
 * template wrote at the start is dropped, so that the prompt holds one BOS.
 * *out is malloc-ed; *spans (malloc-ed, NULL when *n_spans is 0; spans may
 * be NULL) gets the byte ranges that came from the messages (roles and
 * content), for vt_tokenize_plain. Errors: VT_ERR_NOT_FOUND (tmpl NULL),
 * the interpreter's (VT_ERR_FORMAT for a template error or what the
 * template raises, naming its line; VT_ERR_RANGE for a limit),
 * VT_ERR_OUT_OF_MEMORY.
 */
vt_status vt_chat_render_template(const vt_tokenizer *tok, const char *tmpl, const vt_chat_msg *msgs,
                                  size_t n_msgs, int add_generation_prompt, unsigned flags,
                                  char **out, vt_text_span **spans, size_t *n_spans);
/*
 * vt_chat_render_template with the variables as JSON text, as an OpenAI
 * request carries them: messages_json, a JSON array of message objects
 * (role, content, tool_calls, tool_call_id, reasoning_content, ...);
 * tools_json, a JSON array (the "tools" variable) or NULL; kwargs_json, a
 * JSON object whose members become variables too (chat_template_kwargs:
 * enable_thinking, reasoning_effort, ...) or NULL. Give enable_thinking in
 * kwargs_json or by flags, not both. The caller vouches that the texts are
 * valid JSON (the interpreter refuses them otherwise: VT_ERR_INVALID_ARG).
 * Output, spans and errors as vt_chat_render_template; every string of the
 * three is the request's (its spans stay text).
 */
vt_status vt_chat_render_template_json(const vt_tokenizer *tok, const char *tmpl,
                                       const char *messages_json, const char *tools_json,
                                       const char *kwargs_json, int add_generation_prompt,
                                       unsigned flags, char **out, vt_text_span **spans,
                                       size_t *n_spans);
/* Chat family of a GGUF architecture ("qwen35moe" -> "qwen35", "gemma4" ->
 * "gemma4"), NULL if unknown. */
const char *vt_chat_family_for_arch(const char *arch);
/*
 * Flags a family's renderer needs to match the template stored in the GGUF
 * (tokenizer.chat_template, vt_tokenizer_chat_template; NULL -> 0). gemma4:
 * VT_CHAT_EMPTY_THOUGHT when the text after the template's last
 * "add_generation_prompt" contains "<|channel>thought" followed by "<channel|>"
 * (§10.2: the 26B-A4B/31B templates do, the E2B/E4B ones and the tiny
 * fixtures' do not). 0 for other families.
 */
unsigned vt_chat_flags_for_template(const char *family, const char *chat_template);

#endif

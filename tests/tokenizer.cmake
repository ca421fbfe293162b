# Tokenizer and chat-template suites (tokenizers.md): the 45 HF cases of the
# qwen35-tiny fixture, streaming detokenization, the qwen35 chat template,
# a 100 kB input, the pre-tokenizer rules and hostile tokenizer metadata.

vt_add_test(test_tokenizer SOURCES test_tokenizer.c test_tokenizer_hostile.c
            LIBS vtcore PkgConfig::CJSON
            LABELS tokenizer TIMEOUT 120)

# Gemma 4 tokenizer kind (tokenizers.md §5) and chat template (§10.2): the 45 HF
# cases of the gemma4-tiny fixture with the vocab of gemma4-moe-tiny-f16.gguf,
# the §5 rules on a hand-made vocab, streaming detokenization, hostile inputs.
vt_add_test(test_tokenizer_gemma4 SOURCES test_tokenizer_gemma4.c test_tokenizer_gemma4_chat.c
            LIBS vtcore PkgConfig::CJSON
            LABELS tokenizer TIMEOUT 120)

# NFC normalization (issue 43 item 1): the same result as utf8proc_map on
# random text, and 200 KB of alternating combining marks normalized and
# tokenized in bounded time (linear, not utf8proc's quadratic ordering).
vt_add_test(test_unicode_nfc SOURCES test_unicode_nfc.c
            LIBS vtcore PkgConfig::UTF8PROC
            LABELS tokenizer TIMEOUT 120)

# The chat-template interpreter (core/src/text/jinja*.c, issue 45): the
# published Qwen3.5, Qwen3-Coder and Gemma 4 templates over the conversations
# of tests/jinja/conversations.json and the small cases of tests/jinja/
# cases.json, byte for byte against Python's jinja2 as transformers sets it up
# (tests/jinja/render_ref.py; python3-jinja2 at test time only), limits and
# mutated templates.
vt_add_test(test_jinja SOURCES test_jinja.c LIBS vtcore LABELS "tokenizer;template;fixtures" TIMEOUT 300)

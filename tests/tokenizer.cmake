# Tokenizer and chat-template suites (tokenizers.md): the 45 HF cases of the
# qwen35-tiny fixture, streaming detokenization, the qwen35 chat template,
# a 100 kB input, the pre-tokenizer rules and hostile tokenizer metadata.

vt_add_test(test_tokenizer SOURCES test_tokenizer.c
            LIBS vtcore PkgConfig::CJSON
            LABELS tokenizer TIMEOUT 120)

# Gemma 4 tokenizer kind (tokenizers.md §5) and chat template (§10.2): the 45 HF
# cases of the gemma4-tiny fixture with the vocab of gemma4-moe-tiny-f16.gguf,
# the §5 rules on a hand-made vocab, streaming detokenization, hostile inputs.
vt_add_test(test_tokenizer_gemma4 SOURCES test_tokenizer_gemma4.c
            LIBS vtcore PkgConfig::CJSON
            LABELS tokenizer TIMEOUT 120)

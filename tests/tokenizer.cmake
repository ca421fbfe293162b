# Tokenizer and chat-template suites (tokenizers.md): the 45 HF cases of the
# qwen35-tiny fixture, streaming detokenization, the qwen35 chat template,
# a 100 kB input, the pre-tokenizer rules and hostile tokenizer metadata.

vt_add_test(test_tokenizer SOURCES test_tokenizer.c
            LIBS vtcore PkgConfig::CJSON
            LABELS tokenizer TIMEOUT 120)

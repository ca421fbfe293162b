# GGUF reader/writer, `vt info` printing and the demo-model generator
# (core/src/gguf/gguf_*.c, core/tools/mkmodel.c). Suites that feed the parser
# malformed or external input carry the label "parser", so the sanitizer
# (ASan/UBSan) CI job runs them.
vt_add_test(test_gguf SOURCES test_gguf.c LIBS vtcore LABELS gguf parser TIMEOUT 60)
vt_add_test(test_gguf_info SOURCES test_gguf_info.c LIBS vtcore LABELS gguf TIMEOUT 60)
vt_add_test(test_gguf_hostile SOURCES test_gguf_hostile.c LIBS vtcore LABELS gguf parser TIMEOUT 60)
vt_add_test(test_gguf_mkmodel SOURCES test_gguf_mkmodel.c test_gguf_mkmodel_writer.c
            LIBS vtcore LABELS gguf TIMEOUT 120)

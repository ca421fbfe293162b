# GGUF reader/writer, `vt info` printing and the demo-model generator
# (core/src/gguf_*.c, core/src/mkmodel.c). Hostile-input tests carry the
# label "parser" so the sanitizer CI job runs them.
vt_add_test(test_gguf SOURCES test_gguf.c LIBS vtcore LABELS gguf parser TIMEOUT 60)

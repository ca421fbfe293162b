/*
 * gguf_guard.h - what happens when a mapped model file changes under a run
 * (gguf_reader.c keeps the table of mappings).
 *
 * A file truncated or overwritten in place while its pages are mapped makes
 * the next read of a page past the new end raise SIGBUS. With the report
 * installed, such a fault inside a mapping of vt_gguf_open is reported on
 * stderr, naming the file, the byte offset and the tensor read, and the
 * process exits with status 1 (never a bare signal death); a SIGBUS anywhere
 * else keeps the default action. The handler only reads the table and calls
 * write(2) and _exit(2) (async-signal-safe).
 */
#ifndef VT_GGUF_GUARD_H
#define VT_GGUF_GUARD_H

/* Install the SIGBUS report (idempotent; for programs such as the vt CLI). */
void vt_gguf_sigbus_report_install(void);

#endif

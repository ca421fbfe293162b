/*
 * gguf_guard.h - what happens when a mapped model file changes under a run
 * (gguf_guard.c; gguf_reader.c enters and removes its mappings).
 *
 * A file truncated or overwritten in place while its pages are mapped makes
 * the next read of a page past the new end raise SIGBUS. With the report
 * installed, such a fault inside a mapping of vt_gguf_open is reported on
 * stderr, naming the file, the byte offset and the tensor read, and the
 * process exits with status 1 (never a bare signal death, unless the table
 * was full: see vt_gguf_guard_add); a SIGBUS anywhere else keeps the default
 * action. The handler only reads the table and calls write(2), _exit(2),
 * signal(2) and raise(3) (async-signal-safe).
 */
#ifndef VT_GGUF_GUARD_H
#define VT_GGUF_GUARD_H

#include <stdint.h>

#include "vt/gguf.h"

#define GUARD_INTERNAL __attribute__((visibility("hidden")))

/* Install the SIGBUS report (idempotent; for programs such as the vt CLI). */
void vt_gguf_sigbus_report_install(void);

/* Enter the mapping [base, base + size) of shard `shard` of g (file `path`,
 * copied) in the table; g is read by the handler only to name the tensor.
 * A full table (GUARD_SLOTS in gguf_guard.c, 256 mappings) drops the entry:
 * a fault there then takes the default action (death by SIGBUS). */
GUARD_INTERNAL void vt_gguf_guard_add(const void *base, uint64_t size, const vt_gguf *g,
                                      uint32_t shard, const char *path);
/* Remove the mapping at base (before it is unmapped). */
GUARD_INTERNAL void vt_gguf_guard_remove(const void *base);

#endif

/*
 * op_profile.h - a per-op time table of a backend, for `vt bench --profile`.
 *
 * The engine gives the model a copy of the backend's table in which every op
 * is wrapped: while the profile is active on the calling thread, a wrapped op
 * runs, then the backend's synchronize() waits for it, and the wall time from
 * its call to the end of that wait is added to the op's row (with the call
 * count). The sync after every op serializes the device: the figures are each
 * op's time with its launch and completion, not an overlapped step, and a
 * profiled step is slower than an unprofiled one (vt bench prints both).
 * Ops of another thread, or outside vt_op_profile_begin/end, run unrecorded.
 *
 * The same wrapping reports load progress: vt_op_profile_watch_copies hands
 * every successful copy_h2d of the calling thread to a callback (the engine
 * installs a table with only copy_h2d wrapped for that, and restores the
 * plugin's copy_h2d after the load).
 */
#ifndef VT_OP_PROFILE_H
#define VT_OP_PROFILE_H

#include <stdint.h>

#include "vt/backend.h"

typedef struct vt_op_profile vt_op_profile;

typedef struct vt_op_profile_row {
    char name[64];    /* "mat_mul Q4_K (routed experts)", "attention", ... */
    uint64_t calls;
    double seconds;   /* wall time, op + synchronize */
} vt_op_profile_row;

/* Patch `table` (a copy of `real`, which the model will be given) so that its
 * copy_h2d, and with `all_ops` every op, goes through the profiler; `ctx` is
 * the backend context the ops receive. Returns NULL (and sets the error) when
 * out of memory or too many profiles exist at once. */
vt_op_profile *vt_op_profile_install(vt_backend_api *table, const vt_backend_api *real,
                                     vt_backend_ctx *ctx, int all_ops);
/* Until called again with fn NULL: every successful copy_h2d that this thread
 * makes through p's table calls fn(user, bytes) after the copy. */
void vt_op_profile_watch_copies(vt_op_profile *p, void (*fn)(void *user, size_t bytes),
                                void *user);
/* Undo the registration (the table keeps forwarding to the real functions
 * only while registered: call after the model is freed). NULL allowed. */
void vt_op_profile_free(vt_op_profile *p);
/* Record the calling thread's ops into p until vt_op_profile_end. */
void vt_op_profile_begin(vt_op_profile *p);
void vt_op_profile_end(void);
/* Clear every row. */
void vt_op_profile_reset(vt_op_profile *p);
/* The rows with at least one call, most time first, into rows[0..cap);
 * returns how many there are (may exceed cap). */
int vt_op_profile_rows(const vt_op_profile *p, vt_op_profile_row *rows, int cap);

#endif

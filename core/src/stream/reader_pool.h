/*
 * reader_pool.h - a fixed pool of threads that run the expert streamer's file
 * reads of one batch at once (issue 15: "a pool of reader threads").
 *
 * vt_reader_pool_run(pool, fn, ctx, n) calls fn(ctx, i, worker) once for
 * every i in [0, n), spread over the pool's threads and the calling thread,
 * and returns when every call has returned. worker names the thread running
 * the call, in [0, vt_reader_pool_size): 0 is the calling thread, and no two
 * calls with the same worker run at once, so per-worker scratch (a bounce
 * buffer) needs no lock. Calls run concurrently: fn must touch only what job
 * i owns (the caller's job array), its worker's scratch and thread-safe
 * state. One run at a time per pool (the streamer is used by one thread at a
 * time).
 *
 * Ownership: the pool owns its threads; destroy joins them. A pool of 1
 * reader has no thread: run calls fn in order on the calling thread.
 * Errors: create returns VT_ERR_OUT_OF_MEMORY or VT_ERR_INTERNAL (a thread
 * could not be started; the threads started are joined) with the error set.
 */
#ifndef VT_READER_POOL_H
#define VT_READER_POOL_H

#include <stdint.h>

#include "vt/status.h"

typedef struct vt_reader_pool vt_reader_pool;
typedef void (*vt_reader_job_fn)(void *ctx, uint64_t i, uint32_t worker);

/* n_readers >= 1: the calling thread plus n_readers - 1 threads. */
vt_status vt_reader_pool_create(uint32_t n_readers, vt_reader_pool **out);
void vt_reader_pool_destroy(vt_reader_pool *p);
uint32_t vt_reader_pool_size(const vt_reader_pool *p);
void vt_reader_pool_run(vt_reader_pool *p, vt_reader_job_fn fn, void *ctx, uint64_t n);

#endif

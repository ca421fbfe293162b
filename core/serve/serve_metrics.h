/*
 * serve_metrics.h - what GET /metrics reports (Prometheus text format 0.0.4),
 * kept by the scheduler under its lock.
 */
#ifndef VT_SERVE_METRICS_H
#define VT_SERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "expert_streamer.h"
#include "vt/plugin.h"

/* Latency histogram in seconds: counts[i] holds observations <= bounds[i]
 * (not cumulative here; the text is). */
#define VT_SERVE_HIST_N 14
typedef struct vt_serve_hist {
    uint64_t counts[VT_SERVE_HIST_N + 1]; /* the last: above every bound */
    double sum;
    uint64_t count;
} vt_serve_hist;
void vt_serve_hist_add(vt_serve_hist *h, double seconds);

typedef struct vt_serve_metrics {
    /* requests */
    uint32_t running, waiting, n_parallel;
    uint64_t finished_stop, finished_length, finished_error, cancelled, rejected;
    uint64_t prompt_tokens, generated_tokens;
    vt_serve_hist ttft, itl;
    /* KV cache: tokens held by the slots' sequences, of n_parallel x n_ctx */
    uint64_t kv_tokens_used, kv_tokens_total;
    /* the expert cache, copied from the streamer by the scheduler thread */
    int streamed;
    uint64_t dev_slots, dev_resident;
    vt_expert_stats dev;
    int host_tier;
    uint64_t host_slots, host_resident;
    vt_streamer_host_stats host;
    int prefetch_on;
    vt_streamer_prefetch_stats prefetch;
    uint64_t fallbacks;
} vt_serve_metrics;

/* The text for GET /metrics, malloc-ed (NULL: out of memory). */
char *vt_serve_metrics_render(const vt_serve_metrics *m, const char *model_id);

#endif

/*
 * serve_metrics.c - the Prometheus text of vt serve's /metrics.
 */
#include "serve_metrics.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double hist_bounds[VT_SERVE_HIST_N] = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                                    0.5,   1.0,  2.5,   5.0,  10.0,  30.0, 60.0};

void vt_serve_hist_add(vt_serve_hist *h, double s)
{
    int i = 0;
    while (i < VT_SERVE_HIST_N && s > hist_bounds[i]) i++;
    h->counts[i]++;
    h->sum += s;
    h->count++;
}

typedef struct tbuf {
    char *p;
    size_t n, cap;
    int oom;
} tbuf;

__attribute__((format(printf, 2, 3))) static void put(tbuf *b, const char *fmt, ...)
{
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 8192;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
}

static void metric(tbuf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void hist(tbuf *b, const char *name, const char *help, const vt_serve_hist *h)
{
    metric(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < VT_SERVE_HIST_N; i++) {
        cum += h->counts[i];
        put(b, "%s_bucket{le=\"%g\"} %llu\n", name, hist_bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[VT_SERVE_HIST_N];
    put(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
        (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

#define U(x) ((unsigned long long)(x))

char *vt_serve_metrics_render(const vt_serve_metrics *m, const char *model_id)
{
    tbuf b = {0};
    (void)model_id;
    metric(&b, "vt_requests_running", "gauge", "Requests holding a slot.");
    put(&b, "vt_requests_running %u\n", m->running);
    metric(&b, "vt_requests_waiting", "gauge", "Requests queued for a slot.");
    put(&b, "vt_requests_waiting %u\n", m->waiting);
    metric(&b, "vt_slots", "gauge", "Slots (--parallel).");
    put(&b, "vt_slots %u\n", m->n_parallel);
    metric(&b, "vt_requests_finished_total", "counter", "Requests finished, by finish reason.");
    put(&b, "vt_requests_finished_total{reason=\"stop\"} %llu\n", U(m->finished_stop));
    put(&b, "vt_requests_finished_total{reason=\"length\"} %llu\n", U(m->finished_length));
    put(&b, "vt_requests_finished_total{reason=\"error\"} %llu\n", U(m->finished_error));
    metric(&b, "vt_requests_cancelled_total", "counter", "Requests whose client went away.");
    put(&b, "vt_requests_cancelled_total %llu\n", U(m->cancelled));
    metric(&b, "vt_requests_rejected_total", "counter", "Requests refused with 503 (queue full).");
    put(&b, "vt_requests_rejected_total %llu\n", U(m->rejected));
    metric(&b, "vt_prompt_tokens_total", "counter", "Prompt tokens evaluated.");
    put(&b, "vt_prompt_tokens_total %llu\n", U(m->prompt_tokens));
    metric(&b, "vt_generated_tokens_total", "counter", "Tokens generated.");
    put(&b, "vt_generated_tokens_total %llu\n", U(m->generated_tokens));
    hist(&b, "vt_time_to_first_token_seconds", "From the request's arrival to its first token.",
         &m->ttft);
    hist(&b, "vt_inter_token_latency_seconds", "Between consecutive tokens of a request.", &m->itl);
    metric(&b, "vt_kv_cache_tokens", "gauge", "KV cache tokens in use by the slots.");
    put(&b, "vt_kv_cache_tokens %llu\n", U(m->kv_tokens_used));
    metric(&b, "vt_kv_cache_capacity_tokens", "gauge", "KV cache tokens of all slots.");
    put(&b, "vt_kv_cache_capacity_tokens %llu\n", U(m->kv_tokens_total));
    metric(&b, "vt_kv_cache_usage_ratio", "gauge", "KV cache tokens in use / capacity.");
    put(&b, "vt_kv_cache_usage_ratio %.6f\n",
        m->kv_tokens_total ? (double)m->kv_tokens_used / (double)m->kv_tokens_total : 0.0);

    metric(&b, "vt_experts_streamed", "gauge", "1 when routed experts stream through a slot cache.");
    put(&b, "vt_experts_streamed %d\n", m->streamed);
    if (m->streamed) {
        const char *t = "tier=\"device\"";
        metric(&b, "vt_expert_cache_slots", "gauge", "Slots of the expert cache, by tier.");
        put(&b, "vt_expert_cache_slots{%s} %llu\n", t, U(m->dev_slots));
        if (m->host_tier) put(&b, "vt_expert_cache_slots{tier=\"host\"} %llu\n", U(m->host_slots));
        metric(&b, "vt_expert_cache_resident", "gauge", "Expert slices resident, by tier.");
        put(&b, "vt_expert_cache_resident{%s} %llu\n", t, U(m->dev_resident));
        if (m->host_tier)
            put(&b, "vt_expert_cache_resident{tier=\"host\"} %llu\n", U(m->host_resident));
        metric(&b, "vt_expert_cache_hits_total", "counter", "Expert slices found resident, by tier.");
        put(&b, "vt_expert_cache_hits_total{%s} %llu\n", t, U(m->dev.hits));
        if (m->host_tier) put(&b, "vt_expert_cache_hits_total{tier=\"host\"} %llu\n", U(m->host.hits));
        metric(&b, "vt_expert_cache_misses_total", "counter", "Expert slices not resident, by tier.");
        put(&b, "vt_expert_cache_misses_total{%s} %llu\n", t, U(m->dev.misses));
        if (m->host_tier)
            put(&b, "vt_expert_cache_misses_total{tier=\"host\"} %llu\n", U(m->host.misses));
        metric(&b, "vt_expert_cache_hit_ratio", "gauge", "hits / (hits + misses), by tier.");
        uint64_t du = m->dev.hits + m->dev.misses, hu = m->host.hits + m->host.misses;
        put(&b, "vt_expert_cache_hit_ratio{%s} %.6f\n", t, du ? (double)m->dev.hits / (double)du : 0.0);
        if (m->host_tier)
            put(&b, "vt_expert_cache_hit_ratio{tier=\"host\"} %.6f\n",
                hu ? (double)m->host.hits / (double)hu : 0.0);
        metric(&b, "vt_expert_cache_fill_bytes_total", "counter",
               "Bytes filled into the tier (device: into slots; host: read from the file).");
        put(&b, "vt_expert_cache_fill_bytes_total{%s} %llu\n", t, U(m->dev.bytes_filled));
        if (m->host_tier)
            put(&b, "vt_expert_cache_fill_bytes_total{tier=\"host\"} %llu\n", U(m->host.bytes_read));
        metric(&b, "vt_expert_cache_fill_seconds_total", "counter", "Wall time spent filling, by tier.");
        put(&b, "vt_expert_cache_fill_seconds_total{%s} %.6f\n", t, m->dev.fill_seconds);
        if (m->host_tier)
            put(&b, "vt_expert_cache_fill_seconds_total{tier=\"host\"} %.6f\n", m->host.read_seconds);
        metric(&b, "vt_expert_cache_evictions_total", "counter", "Resident slices dropped, by tier.");
        put(&b, "vt_expert_cache_evictions_total{%s} %llu\n", t, U(m->dev.evictions));
        if (m->host_tier)
            put(&b, "vt_expert_cache_evictions_total{tier=\"host\"} %llu\n", U(m->host.evictions));
        metric(&b, "vt_expert_cache_fill_errors_total", "counter", "Fills that failed, by tier.");
        put(&b, "vt_expert_cache_fill_errors_total{%s} %llu\n", t, U(m->dev.fill_errors));
        if (m->host_tier)
            put(&b, "vt_expert_cache_fill_errors_total{tier=\"host\"} %llu\n", U(m->host.errors));
        if (m->prefetch_on) {
            metric(&b, "vt_expert_prefetch_total", "counter", "Prefetched keys, by outcome.");
            put(&b, "vt_expert_prefetch_total{outcome=\"issued\"} %llu\n", U(m->prefetch.issued));
            put(&b, "vt_expert_prefetch_total{outcome=\"used\"} %llu\n", U(m->prefetch.used));
            put(&b, "vt_expert_prefetch_total{outcome=\"wasted\"} %llu\n", U(m->prefetch.wasted));
            put(&b, "vt_expert_prefetch_total{outcome=\"skipped\"} %llu\n", U(m->prefetch.skipped));
        }
    }
    metric(&b, "vt_fallbacks_total", "counter",
           "Fallbacks that changed where or how work runs (each logged at WARN).");
    put(&b, "vt_fallbacks_total %llu\n", U(m->fallbacks));
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

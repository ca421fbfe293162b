/*
 * expert_streamer_stats.c - the expert streamer's per-layer counters, the
 * routing trace, the offline cache simulation and the getters.
 */
#include "streamer_tables.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache_sim.h"
#include "error.h"

/* ------------------------------------------------------------ trace */

/* Append one acquire to the trace; a failed allocation stops the recording
 * (the trace says so) instead of failing the acquire. */
void es_trace_add(vt_expert_streamer *s, uint32_t layer, const int32_t *ids, uint32_t n)
{
    vt_streamer_trace *t = &s->trace;
    if (t->n_acquires + 1 >= s->trace_cap_acq) {
        size_t c = s->trace_cap_acq ? 2 * s->trace_cap_acq : 4096;
        uint32_t *nl = realloc(t->layer, c * sizeof *nl);
        if (nl) t->layer = nl;
        uint8_t *np = nl ? realloc(t->phase, c) : NULL;
        if (np) t->phase = np;
        uint64_t *no = np ? realloc(t->off, (c + 1) * sizeof *no) : NULL;
        if (!no) goto full;
        t->off = no;
        s->trace_cap_acq = c;
    }
    if (t->off[t->n_acquires] + n > s->trace_cap_ids) {
        size_t c = s->trace_cap_ids ? 2 * s->trace_cap_ids : 65536;
        while (c < t->off[t->n_acquires] + n) c *= 2;
        int32_t *ni = realloc(t->ids, c * sizeof *ni);
        if (!ni) goto full;
        t->ids = ni;
        s->trace_cap_ids = c;
    }
    t->layer[t->n_acquires] = layer;
    t->phase[t->n_acquires] = s->trace_phase;
    if (n) memcpy(t->ids + t->off[t->n_acquires], ids, n * sizeof *ids);
    t->off[t->n_acquires + 1] = t->off[t->n_acquires] + n;
    t->n_acquires++;
    return;
full:
    t->truncated = 1;
    s->tracing = 0;
}

/* ------------------------------------------------------------ counters */

/* The stats getters' arguments: VT_OK with layer in range or < 0 (totals). */
static vt_status stats_args(const vt_expert_streamer *s, int32_t layer, const void *out)
{
    if (!s || !out) return VT_ERR_INVALID_ARG;
    if (layer >= 0 && (uint32_t)layer >= s->p.n_layer) {
        vt_set_error("expert streamer: stats of layer %d: only %u layers", layer, s->p.n_layer);
        return VT_ERR_RANGE;
    }
    return VT_OK;
}

vt_status vt_streamer_stats(const vt_expert_streamer *s, int32_t layer, vt_expert_stats *out)
{
    vt_status st = stats_args(s, layer, out);
    if (st != VT_OK) return st;
    memset(out, 0, sizeof *out);
    if (layer >= 0) {
        *out = s->stats[layer];
        return VT_OK;
    }
    for (uint32_t l = 0; l < s->p.n_layer; l++) {
        out->hits += s->stats[l].hits;
        out->misses += s->stats[l].misses;
        out->bytes_filled += s->stats[l].bytes_filled;
        out->evictions += s->stats[l].evictions;
        out->fill_errors += s->stats[l].fill_errors;
        out->fill_seconds += s->stats[l].fill_seconds;
        out->commit_seconds += s->stats[l].commit_seconds;
    }
    return VT_OK;
}

uint64_t vt_streamer_n_slots(const vt_expert_streamer *s) { return s->p.n_slots; }
uint64_t vt_streamer_n_resident(const vt_expert_streamer *s) { return s->dev.n_used; }
uint64_t vt_streamer_n_host_slots(const vt_expert_streamer *s) { return s->host.n; }
uint64_t vt_streamer_n_host_resident(const vt_expert_streamer *s) { return s->host.n_used; }
uint64_t vt_streamer_host_pinned_bytes(const vt_expert_streamer *s) { return s->host_pinned_bytes; }

int vt_streamer_is_host_resident(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                                 uint32_t expert)
{
    if (!stack_of_key(s, layer, matrix, expert)) return 0;
    const stack *k = stack_of_key(s, layer, s->p.slot_unit_expert ? 0 : matrix, expert);
    return k && k->hslot_of && k->hslot_of[expert] != NO_SLOT;
}

vt_status vt_streamer_host_stats_get(const vt_expert_streamer *s, int32_t layer,
                                     vt_streamer_host_stats *out)
{
    vt_status st = stats_args(s, layer, out);
    if (st != VT_OK) return st;
    memset(out, 0, sizeof *out);
    if (layer >= 0) {
        *out = s->hstats[layer];
        return VT_OK;
    }
    for (uint32_t l = 0; l < s->p.n_layer; l++) {
        out->hits += s->hstats[l].hits;
        out->misses += s->hstats[l].misses;
        out->bytes_read += s->hstats[l].bytes_read;
        out->evictions += s->hstats[l].evictions;
        out->errors += s->hstats[l].errors;
        out->read_seconds += s->hstats[l].read_seconds;
    }
    return VT_OK;
}

void vt_streamer_trace_start(vt_expert_streamer *s)
{
    s->trace.n_acquires = 0;
    s->trace.truncated = 0;
    if (!s->trace.off) {
        s->trace.off = malloc(sizeof *s->trace.off);
        if (!s->trace.off) {
            s->trace.truncated = 1;
            return;
        }
    }
    s->trace.off[0] = 0;
    s->tracing = 1;
}

void vt_streamer_trace_stop(vt_expert_streamer *s) { s->tracing = 0; }
void vt_streamer_trace_phase(vt_expert_streamer *s, uint8_t phase) { s->trace_phase = phase; }
const vt_streamer_trace *vt_streamer_get_trace(const vt_expert_streamer *s) { return &s->trace; }

uint32_t vt_streamer_n_matrices(const vt_expert_streamer *s, uint32_t layer)
{
    return layer < s->p.n_layer ? key_matrices(s, layer) : 0;
}

uint64_t vt_streamer_n_experts(const vt_expert_streamer *s, uint32_t layer)
{
    return layer < s->p.n_layer && s->n_matrices[layer] ? stack_at(s, layer, 0)->n_expert : 0;
}

vt_status vt_streamer_simulate(const vt_expert_streamer *s, uint64_t capacity, int counted_phase,
                               vt_cache_sim_result *lru, vt_cache_sim_result *belady)
{
    const vt_streamer_trace *t = &s->trace;
    uint64_t *base = calloc(s->p.n_layer + 1, sizeof *base);
    if (!base) {
        vt_set_error("out of memory: cache simulation");
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (uint32_t l = 0; l < s->p.n_layer; l++)
        base[l + 1] = base[l] + (uint64_t)vt_streamer_n_matrices(s, l) * vt_streamer_n_experts(s, l);
    uint64_t n_req = 0;
    for (size_t a = 0; a < t->n_acquires; a++)
        n_req += (t->off[a + 1] - t->off[a]) * vt_streamer_n_matrices(s, t->layer[a]);
    vt_status st = VT_OK;
    if (base[s->p.n_layer] > UINT32_MAX) {
        vt_set_error("cache simulation: %" PRIu64 " keys is more than it indexes",
                     base[s->p.n_layer]);
        free(base);
        return VT_ERR_RANGE;
    }
    uint32_t *key = malloc((n_req ? n_req : 1) * sizeof *key);
    uint64_t *batch = malloc((n_req ? n_req : 1) * sizeof *batch);
    uint8_t *counted = malloc(n_req ? n_req : 1);
    if (!key || !batch || !counted) {
        vt_set_error("out of memory: cache simulation of %" PRIu64 " requests", n_req);
        st = VT_ERR_OUT_OF_MEMORY;
        goto out;
    }
    uint64_t r = 0;
    for (size_t a = 0; a < t->n_acquires; a++) {
        uint32_t l = t->layer[a], M = vt_streamer_n_matrices(s, l);
        uint64_t ne = vt_streamer_n_experts(s, l);
        for (uint64_t i = t->off[a]; i < t->off[a + 1]; i++)
            for (uint32_t m = 0; m < M; m++) {
                key[r] = (uint32_t)(base[l] + m * ne + (uint64_t)t->ids[i]);
                batch[r] = a;
                counted[r] = counted_phase < 0 || t->phase[a] == counted_phase;
                r++;
            }
    }
    if (lru) st = vt_cache_sim_lru(key, batch, counted, (size_t)n_req,
                                   (uint32_t)base[s->p.n_layer], capacity, lru);
    if (st == VT_OK && belady)
        st = vt_cache_sim_belady(key, batch, counted, (size_t)n_req,
                                 (uint32_t)base[s->p.n_layer], capacity, belady);
out:
    free(base);
    free(key);
    free(batch);
    free(counted);
    return st;
}

void vt_streamer_set_fault(vt_expert_streamer *s, vt_streamer_fault_fn fn, void *ctx)
{
    s->fault_fn = fn;
    s->fault_ctx = ctx;
}

vt_status vt_streamer_quiesce(vt_expert_streamer *s) { return es_quiesce_publishes(s); }
uint32_t vt_streamer_n_layers(const vt_expert_streamer *s) { return s->p.n_layer; }
int vt_streamer_io_direct(const vt_expert_streamer *s) { return s->direct; }
uint64_t vt_streamer_n_ring_slots(const vt_expert_streamer *s) { return s->n_ring; }
uint32_t vt_streamer_n_readers(const vt_expert_streamer *s)
{
    return s->pool ? vt_reader_pool_size(s->pool) : 1;
}

int vt_streamer_is_resident(const vt_expert_streamer *s, uint32_t layer, uint32_t matrix,
                            uint32_t expert)
{
    if (!stack_of_key(s, layer, matrix, expert)) return 0;
    const stack *k = stack_of_key(s, layer, s->p.slot_unit_expert ? 0 : matrix, expert);
    return k && k->slot_of[expert] != NO_SLOT;
}

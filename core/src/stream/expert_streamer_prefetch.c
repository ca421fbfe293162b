/*
 * expert_streamer_prefetch.c - router-ahead prefetch: the next layer's
 * predicted experts copied from the host tier on the store's ahead queue.
 */
#include "streamer_tables.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* ------------------------------------------------------------ prefetch */

int vt_streamer_prefetch_on(const vt_expert_streamer *s) { return s && s->ahead_ok; }

uint32_t vt_streamer_prefetch_count(uint32_t top, uint32_t n)
{
    const uint32_t k = top ? top : (uint32_t)(((uint64_t)n * 3 + 3) / 4);
    return k < n ? k : n;
}

uint32_t vt_streamer_prefetch_max(uint32_t max, uint32_t n)
{
    const uint32_t k = max ? max : (uint32_t)(((uint64_t)n * 3 + 7) / 8);
    return k < n ? k : n;
}

/* Copy the host-tier keys of ids (layer) that the device tier lacks into
 * device slots on the store's ahead queue, forked at the end of the last
 * acquire (or here when none came since): of the first prefetch_top ids, at
 * most prefetch_max experts not yet resident, in the ids' order (an expert
 * partly copied because its slot class is full counts against that cap). A victim is never a slot of the
 * last acquire (ops queued after the fork read them) nor of this prefetch; a key the host tier lacks is skipped (a file read would
 * block here). Stops quietly when every slot is pinned. */
vt_status vt_streamer_prefetch(vt_expert_streamer *s, uint32_t layer, const int32_t *ids,
                               uint32_t n)
{
    uint32_t M = 0;
    vt_status st = es_check_ids(s, "prefetch", layer, ids, n, &M);
    if (st != VT_OK || !s->ahead_ok || !n) return st;
    /* copies for the first `top` ids only; a resident one past them is still
     * kept from this prefetch's victims (it is predicted, if less surely) */
    const uint32_t top = vt_streamer_prefetch_count(s->p.prefetch_top, n);
    const vt_store_api *a = s->p.store_api;
    if ((uint64_t)n * M > s->ahead_cap) {
        size_t c = (size_t)n * M;
        vt_store_publish *np = realloc(s->ahead_pub, c * sizeof *np);
        if (np) s->ahead_pub = np;
        uint32_t *nk = np ? realloc(s->ahead_key, c * 3 * sizeof *nk) : NULL;
        if (!nk) {
            vt_set_error("expert streamer: out of memory for a prefetch of %u experts", n);
            return VT_ERR_OUT_OF_MEMORY;
        }
        s->ahead_key = nk;
        s->ahead_cap = c;
    }
    s->keep_batch = s->acquired_batch;
    s->batch++;
    /* every predicted key already resident is kept first, so that no copy
     * below takes its slot (the last acquire's stay so) */
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t m = 0; m < M; m++) {
            const uint64_t slot = stack_at(s, layer, m)->slot_of[(uint32_t)ids[i]];
            if (slot == NO_SLOT) continue;
            slot_info *x = &s->dev.slots[slot];
            if (x->batch != s->keep_batch) x->batch = s->batch;
        }
    /* pick the slots (victims evicted now; a taken slot is off every list, so
     * none is taken twice), queue every copy in one call, then claim */
    uint32_t q = 0, full = 0; /* full: the slot classes with every slot pinned */
    /* at most `most` experts copied: those past it would still be in flight
     * when the next layer's demand copies need the link */
    const uint32_t most = vt_streamer_prefetch_max(s->p.prefetch_max, n);
    uint32_t n_copied = 0;
    for (uint32_t i = 0; i < top && n_copied < most; i++) {
        const uint32_t q_before = q;
        for (uint32_t m = 0; m < M; m++) {
            stack *k = stack_at(s, layer, m);
            const uint32_t e = (uint32_t)ids[i];
            uint64_t slot = k->slot_of[e];
            if (slot != NO_SLOT) continue; /* resident (kept above) or queued by this call */
            const uint64_t h = k->hslot_of[e];
            if (h == NO_SLOT) {
                s->pstats.skipped++;
                continue;
            }
            if (full & (1u << k->cls)) continue;
            if ((slot = es_take_slot(s, layer, k->cls)) == NO_SLOT) { /* the class is all pinned */
                full |= 1u << k->cls;
                continue;
            }
            k->slot_of[e] = slot; /* a repeated id finds it (unclaimed until the call) */
            s->dev.slots[slot].batch = s->batch;
            s->ahead_pub[q] = (vt_store_publish){.slot = slot, .src = s->host_addr[h] + s->hdoff[h],
                                                 .bytes = k->slice_bytes};
            s->ahead_key[3 * q] = m;
            s->ahead_key[3 * q + 1] = e;
            s->ahead_key[3 * q + 2] = (uint32_t)h;
            q++;
            if (es_fault_at(s, VT_STREAMER_FAULT_PUBLISH, layer, m, e)) {
                vt_set_error("injected publish failure");
                st = VT_ERR_IO;
                goto queue;
            }
        }
        n_copied += q != q_before;
    }
queue:
    if (q && st == VT_OK && !s->forked) { /* no acquire since: fork here, after every op so far */
        if ((st = a->begin_ahead(s->p.store)) != VT_OK)
            vt_error_prefix("expert streamer: begin_ahead for layer %u", layer);
        else
            s->forked = 1;
    }
    int called = 0;
    if (q && st == VT_OK) {
        st = a->publish_ahead(s->p.store, s->ahead_pub, q);
        called = 1;
    }
    if (called) {
        /* even a failed call may have queued some of its copies (a backend
         * queues them one by one): their sources stay held until a quiesce
         * and the next acquire joins before any fill reuses their slots */
        s->ahead_pending = 1;
        s->pub_pending = 1;
        for (uint32_t j = 0; j < q; j++) s->host.slots[s->ahead_key[3 * j + 2]].batch = s->pub_gen;
    }
    for (uint32_t j = 0; j < q; j++) {
        const uint32_t m = s->ahead_key[3 * j], e = s->ahead_key[3 * j + 1];
        const uint64_t h = s->ahead_key[3 * j + 2], slot = s->ahead_pub[j].slot;
        stack *k = stack_at(s, layer, m);
        if (st != VT_OK) { /* none of the call's keys is claimed */
            k->slot_of[e] = NO_SLOT;
            es_give_back(&s->dev, slot);
            s->stats[layer].fill_errors++;
            continue;
        }
        es_lru_touch(&s->host, h);
        es_claim(&s->dev, slot, layer, m, e, s->batch);
        s->dev.slots[slot].pub = s->pub_gen + 1;
        s->dev.slots[slot].ahead = 1;
        if (s->visits) s->dev.slots[slot].visit = s->visits[layer];
        s->pstats.issued++;
        s->pstats.bytes_issued += k->slice_bytes;
    }
    if (st != VT_OK)
        vt_error_prefix("expert streamer: prefetch of %u slices of layer %u (from expert %u of "
                        "%s on)", q, layer, q ? s->ahead_key[1] : 0u,
                        q ? stack_at(s, layer, s->ahead_key[0])->t->name : "-");
    s->keep_batch = 0;
    return st;
}

vt_status vt_streamer_prefetch_stats_get(const vt_expert_streamer *s,
                                         vt_streamer_prefetch_stats *out)
{
    if (!s || !out) return VT_ERR_INVALID_ARG;
    *out = s->pstats;
    return VT_OK;
}


/*
 * expert_streamer_slots.c - the expert streamer's tiers: LRU lists (one over
 * all layers and one per layer), the replacement policies ("lru", "layer",
 * "lfru"), slot claims and returns, the host tier's victims and the quiesce
 * of publishes.
 */
#include "streamer_tables.h"

#include <inttypes.h>

#include "error.h"

/* ------------------------------------------------------------ LRU */

static void lru_unlink(tier *t, uint64_t i)
{
    slot_info *x = &t->slots[i];
    if (x->prev != NO_SLOT) t->slots[x->prev].next = x->next;
    else t->lru_head = x->next;
    if (x->next != NO_SLOT) t->slots[x->next].prev = x->prev;
    else t->lru_tail = x->prev;
    if (t->lhead) {
        uint32_t l = x->layer;
        if (x->lprev != NO_SLOT) t->slots[x->lprev].lnext = x->lnext;
        else t->lhead[l] = x->lnext;
        if (x->lnext != NO_SLOT) t->slots[x->lnext].lprev = x->lprev;
        else t->ltail[l] = x->lprev;
        t->lcount[l]--;
    }
}

/* x->layer must be set */
static void lru_push_front(tier *t, uint64_t i)
{
    slot_info *x = &t->slots[i];
    x->prev = NO_SLOT;
    x->next = t->lru_head;
    if (t->lru_head != NO_SLOT) t->slots[t->lru_head].prev = i;
    t->lru_head = i;
    if (t->lru_tail == NO_SLOT) t->lru_tail = i;
    if (t->lhead) {
        uint32_t l = x->layer;
        x->lprev = NO_SLOT;
        x->lnext = t->lhead[l];
        if (t->lhead[l] != NO_SLOT) t->slots[t->lhead[l]].lprev = i;
        t->lhead[l] = i;
        if (t->ltail[l] == NO_SLOT) t->ltail[l] = i;
        t->lcount[l]++;
    }
}

void es_lru_touch(tier *t, uint64_t i)
{
    lru_unlink(t, i);
    lru_push_front(t, i);
}

/* Drop device slot i's key: off the LRU lists and the key table, counted as an
 * eviction (a prefetched key never acquired also as wasted); returns i. */
uint64_t es_evict(vt_expert_streamer *s, uint64_t i)
{
    tier *t = &s->dev;
    slot_info *x = &t->slots[i];
    lru_unlink(t, i);
    stack_at(s, x->layer, x->matrix)->slot_of[x->expert] = NO_SLOT;
    x->used = 0;
    t->n_used--;
    s->stats[x->layer].evictions++;
    if (x->ahead) { /* prefetched, never acquired: a wrong prediction */
        x->ahead = 0;
        s->pstats.wasted++;
        s->pstats.bytes_wasted += stack_at(s, x->layer, x->matrix)->slice_bytes;
    }
    return i;
}

/* A slot no fill may take now: acquired by the current batch, or, during a
 * prefetch, by the last acquire (the ahead queue was forked at its end, so
 * the ops queued after it, which read its slots, run beside the copies;
 * the ops of earlier acquires were queued before that fork). */
static int pinned(const vt_expert_streamer *s, const slot_info *x)
{
    return x->batch == s->batch || (s->keep_batch && x->batch == s->keep_batch);
}

/* The least recently used slot of layer l in class cls not pinned, or NO_SLOT. */
static uint64_t layer_victim(vt_expert_streamer *s, uint32_t l, uint32_t cls)
{
    tier *t = &s->dev;
    for (uint64_t i = t->ltail[l]; i != NO_SLOT; i = t->slots[i].lprev)
        if (t->slots[i].cls == cls && !pinned(s, &t->slots[i])) return i;
    return NO_SLOT;
}

/* Policy "layer": LRU by each layer's own clock. A slot's age is the number of
 * acquires of its layer since it was last used (visits[layer] - its visit);
 * the victim is the slot of greatest age (the tail of some layer's list), and
 * among equal ages the one of the layer whose next acquire is furthest away:
 * the current layer itself, then the one before it, and so on backwards,
 * since layers are acquired in order every token. It degrades to LRU when
 * the arena is large (stale slots of any layer go first) and, unlike one
 * global LRU, does not collapse once the arena is smaller than one token's
 * experts over all layers: there global LRU evicts exactly what the next
 * layers need (each layer's slots are the oldest when the next token comes
 * round), while equal ages here keep the slots of the layers coming next. */
static uint64_t policy_victim(vt_expert_streamer *s, uint32_t layer, uint32_t cls)
{
    tier *t = &s->dev;
    const uint32_t L = s->p.n_layer;
    uint64_t best = NO_SLOT, best_age = 0;
    for (uint32_t d = 0; d < L; d++) {
        uint32_t j = (layer + L - d) % L;
        if (!t->lcount[j]) continue;
        uint64_t v = layer_victim(s, j, cls);
        if (v == NO_SLOT) continue;
        uint64_t age = s->visits[j] - t->slots[v].visit;
        if (best == NO_SLOT || age > best_age) {
            best = v;
            best_age = age;
        }
    }
    return best;
}

/* Policy "lfru": the least frequently used of a sample of 32 slots (counts
 * of every key, resident or not, halved every 64 x n_slots uses), ties to the
 * older by its layer's clock, then to the layer acquired furthest ahead (as
 * "layer"); an approximation of LFU with aging that keeps
 * the experts a layer keeps coming back to. Falls back to "layer" when the
 * sample finds no slot outside the batch. The sample and the victim are of
 * the slot class cls. */
#define LFRU_SAMPLE 32
#define LFRU_AGING 64 /* halve every count each LFRU_AGING x n_slots uses */
static uint64_t lfru_victim(vt_expert_streamer *s, uint32_t layer, uint32_t cls)
{
    tier *t = &s->dev;
    const uint64_t first = t->first[cls], count = t->first[cls + 1] - first;
    uint64_t best = NO_SLOT;
    uint32_t best_f = 0, best_d = 0;
    uint64_t best_age = 0;
    const uint32_t L = s->p.n_layer;
    for (int k = 0; k < LFRU_SAMPLE; k++) {
        s->rng ^= s->rng << 13;
        s->rng ^= s->rng >> 7;
        s->rng ^= s->rng << 17;
        uint64_t i = first + s->rng % count;
        slot_info *x = &t->slots[i];
        if (!x->used || pinned(s, x)) continue;
        uint32_t f = stack_at(s, x->layer, x->matrix)->freq[x->expert];
        uint64_t age = s->visits[x->layer] - x->visit;
        uint32_t d = (layer + L - x->layer) % L; /* 0: this layer, acquired again last */
        if (best == NO_SLOT || f < best_f || (f == best_f && age > best_age) ||
            (f == best_f && age == best_age && d < best_d)) {
            best = i;
            best_f = f;
            best_age = age;
            best_d = d;
        }
    }
    return best != NO_SLOT ? best : policy_victim(s, layer, cls);
}

void es_count_use(vt_expert_streamer *s, uint32_t layer, uint32_t matrix, uint32_t expert)
{
    stack *k = stack_at(s, layer, matrix);
    if (!k->freq) return;
    if (k->freq[expert] < UINT32_MAX) k->freq[expert]++;
    if (++s->freq_uses >= LFRU_AGING * s->dev.n) {
        s->freq_uses = 0;
        for (uint64_t i = 0; i < (uint64_t)s->p.n_layer * MAX_MATRICES; i++)
            if (s->stacks[i].freq)
                for (uint64_t e = 0; e < s->stacks[i].n_expert; e++) s->stacks[i].freq[e] >>= 1;
    }
}

/* A device-tier slot of class cls for a new key of layer: a free one, else
 * the policy's victim among the class's slots not pinned (evicted); NO_SLOT
 * when every slot of the class is pinned. A victim needs no wait: the store
 * orders a publish or commit into it after the ops issued before (vt/store.h). */
uint64_t es_take_slot(vt_expert_streamer *s, uint32_t layer, uint32_t cls)
{
    tier *t = &s->dev;
    if (t->free_head[cls] != NO_SLOT) {
        uint64_t i = t->free_head[cls];
        t->free_head[cls] = t->slots[i].next;
        return i;
    }
    if (t->lhead) {
        uint64_t v = s->p.policy == VT_CACHE_POLICY_LFRU ? lfru_victim(s, layer, cls)
                                                          : policy_victim(s, layer, cls);
        if (v != NO_SLOT) return es_evict(s, v);
    }
    for (uint64_t i = t->lru_tail; i != NO_SLOT; i = t->slots[i].prev)
        if (t->slots[i].cls == cls && !pinned(s, &t->slots[i])) return es_evict(s, i);
    return NO_SLOT;
}

/* store->quiesce for every publish so far. When it fails, a copy may not have
 * landed: every device key published in this generation is dropped (its slot
 * freed) before the error returns, so no hit is reported over bytes that may
 * not be there; the host tier's copies are intact. */
vt_status es_quiesce_publishes(vt_expert_streamer *s)
{
    if (!s->pub_pending) return VT_OK;
    vt_status st = s->p.store_api->quiesce(s->p.store);
    if (st != VT_OK) {
        uint64_t dropped = 0;
        for (uint64_t i = 0; i < s->dev.n; i++) {
            slot_info *x = &s->dev.slots[i];
            if (!x->used || x->pub != s->pub_gen + 1) continue;
            x->ahead = 0; /* an error, not a wrong prediction */
            es_evict(s, i);
            s->stats[x->layer].evictions--; /* not an eviction: an error */
            s->stats[x->layer].fill_errors++;
            es_give_back(&s->dev, i);
            dropped++;
        }
        vt_error_prefix("expert streamer: the host-tier copies failed (%" PRIu64 " keys dropped "
                        "from the device tier)", dropped);
    }
    s->pub_pending = 0;
    s->pub_gen++;
    if (st == VT_OK) s->ahead_pending = 0; /* the whole device waited: nothing left to join */
    return st;
}

/* A host-tier slot for a new key: a free one, else the least recently used
 * (evicted). A victim that is the source of a publish not yet quiesced is
 * waited for first (one quiesce covers every publish issued so far). */
vt_status es_take_host_slot(vt_expert_streamer *s, uint64_t *out)
{
    tier *t = &s->host;
    if (t->free_head[0] != NO_SLOT) {
        *out = t->free_head[0];
        t->free_head[0] = t->slots[*out].next;
        return VT_OK;
    }
    uint64_t i = t->lru_tail; /* never NO_SLOT: the tier has slots and none is free */
    slot_info *x = &t->slots[i];
    if (s->pub_pending && x->batch == s->pub_gen) {
        vt_status st = es_quiesce_publishes(s);
        if (st != VT_OK) {
            vt_error_prefix("expert streamer: waiting for the host-tier copies before reusing "
                            "host slot %" PRIu64, i);
            return st;
        }
    }
    lru_unlink(t, i);
    stack_at(s, x->layer, x->matrix)->hslot_of[x->expert] = NO_SLOT;
    x->used = 0;
    t->n_used--;
    s->hstats[x->layer].evictions++;
    *out = i;
    return VT_OK;
}

void es_give_back(tier *t, uint64_t i)
{
    t->slots[i].used = 0;
    t->slots[i].ahead = 0;
    t->slots[i].next = t->free_head[t->slots[i].cls];
    t->free_head[t->slots[i].cls] = i;
}

void es_claim(tier *t, uint64_t i, uint32_t layer, uint32_t matrix, uint32_t expert,
             uint64_t batch)
{
    slot_info *x = &t->slots[i];
    x->layer = layer;
    x->matrix = matrix;
    x->expert = expert;
    x->used = 1;
    x->ahead = 0;
    x->batch = batch;
    lru_push_front(t, i);
    t->n_used++;
}

int es_fault_at(vt_expert_streamer *s, vt_streamer_fault_point pt, uint32_t layer,
                uint32_t matrix, uint32_t expert)
{
    return s->fault_fn && s->fault_fn(s->fault_ctx, pt, layer, matrix, expert);
}

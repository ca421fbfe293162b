/*
 * model_decode_graph.c - one-token decode steps recorded as backend graphs
 * (vt/model_common.h vt_mc_graph_decode), for every family: the whole step
 * of a sequence recorded once and replayed (experts resident), or, with
 * streamed experts, the step cut into segments at each MoE layer's routing,
 * the host's acquire between them. A backend graph replays the ops it
 * recorded, so a replayed step computes the bits of the op path.
 */
#include <stdio.h>
#include <stdlib.h>

#include "vt/model_common.h"
#include "vt/plugin_util.h"

#define TRY(x) do { vt_status st_ = (x); if (st_ != VT_OK) return st_; } while (0)

static vt_model *fm_of(vt_mc_model *m) { return (vt_model *)(void *)m; }
static vt_model_seq *fs_of(vt_mc_seq *s) { return (vt_model_seq *)(void *)s; }

void vt_mc_free_segments(vt_mc_model *m, vt_mc_seq *s)
{
    for (uint32_t i = 0; s->seg && m && i <= m->d.n_layer; i++)
        if (s->seg[i]) m->api->graph_free(m->ctx, s->seg[i]);
    free(s->seg);
    free(s->seg_pred);
    s->seg = NULL;
    s->seg_pred = NULL;
}

const char *vt_mc_decode_path(const vt_mc_model *m)
{
    return m->use_graph ? "graph (recorded once per sequence, replayed per token)"
           : m->use_seg_graph ? "graph segments (recorded once per sequence, replayed per token; "
                                "each MoE layer's expert acquire between them)"
                              : "ops (one backend call per op)";
}

/* The rows for d_pos to the device, the graph g launched, the position
 * advanced, logits_buf to logits (NULL: not wanted). */
static vt_status launch(vt_mc_model *m, vt_mc_seq *s, vt_graph *g, const int32_t *rows,
                        size_t n_rows, float *logits)
{
    const vt_backend_api *A = m->api;
    if (rows) TRY(A->copy_h2d(m->ctx, m->d_pos, rows, n_rows * sizeof(int32_t)));
    if (g) TRY(A->graph_launch(m->ctx, g));
    s->pos += 1;
    if (!logits) return VT_OK;
    return A->copy_d2h(m->ctx, logits, m->logits_buf, (size_t)m->d.n_vocab * sizeof(float));
}

/* Graphs off for the model after a refused recording, said once. */
static void graphs_off(vt_mc_model *m, const char *what)
{
    char why[512];
    snprintf(why, sizeof why, "%s: %s could not be recorded as a graph (%s); decode runs op by op",
             m->family, what, m->host->last_error());
    vt_util_note_fallback(m->host, why);
}

/* The whole step: recorded on the sequence's first one-token step. */
static vt_status step_graph(vt_mc_model *m, vt_mc_seq *s, const int32_t *rows, size_t n_rows,
                            float *logits, int *done)
{
    const vt_backend_api *A = m->api;
    if (!s->graph) {
        vt_status st = A->graph_begin(m->ctx), st_end = VT_OK;
        vt_graph *g = NULL;
        if (st == VT_OK) {
            st = m->fam->step_layers(fm_of(m), fs_of(s));
            if (st == VT_OK) st = vt_mc_head_row(m, 0);
            st_end = A->graph_end(m->ctx, &g);
        }
        if (st != VT_OK || st_end != VT_OK) {
            if (g) A->graph_free(m->ctx, g);
            graphs_off(m, "the decode step");
            m->use_graph = 0;
            return VT_OK; /* *done stays 0: the ops run it */
        }
        s->graph = g;
    }
    *done = 1;
    return launch(m, s, s->graph, rows, n_rows, logits);
}

/* Record segment j into s->seg[j]; on a refusal the host state the ops
 * touched is restored and segments go off for the model (said once): the
 * caller runs the segment's ops instead. */
static int seg_record(vt_mc_model *m, vt_mc_seq *s, uint32_t j, uint32_t after)
{
    const vt_backend_api *A = m->api;
    const float *res_a = m->res_a, *res_gate = m->res_gate;
    vt_graph *g = NULL;
    vt_status st = A->graph_begin(m->ctx), st_end = VT_OK;
    if (st == VT_OK) {
        st = m->fam->seg_ops(fm_of(m), fs_of(s), j, after);
        st_end = A->graph_end(m->ctx, &g);
    }
    if (st == VT_OK && st_end == VT_OK && g) {
        s->seg[j] = g;
        return 1;
    }
    if (g) A->graph_free(m->ctx, g);
    m->res_a = res_a;
    m->res_gate = res_gate;
    char what[64];
    snprintf(what, sizeof what, "segment %u of the streamed decode step", j);
    graphs_off(m, what);
    m->use_seg_graph = 0;
    return 0;
}

/* The streamed step in segments (recorded on the sequence's first one-token
 * step, replayed after), the host's part after each: the prefetch the last
 * acquire's prediction asked for, the routing ids to the host, the acquire
 * and the table upload; the last segment writes logits_buf. */
static vt_status step_segments_run(vt_mc_model *m, vt_mc_seq *s, const int32_t *rows,
                                   size_t n_rows, float *logits)
{
    const vt_backend_api *A = m->api;
    vt_backend_ctx *c = m->ctx;
    const vt_mc_family *F = m->fam;
    const uint32_t L = m->d.n_layer;
    const int64_t K = m->d.n_expert_used;
    int rec = !s->seg, live = 0;
    if (rec) {
        s->seg = calloc((size_t)L + 1, sizeof *s->seg);
        s->seg_pred = calloc((size_t)L + 1, 1);
        if (!s->seg || !s->seg_pred) {
            m->host->set_error("%s: allocation of %u graph segments failed: out of memory",
                               m->family, L + 1);
            return VT_ERR_OUT_OF_MEMORY;
        }
    }
    TRY(A->copy_h2d(c, m->d_pos, rows, n_rows * sizeof(int32_t)));
    m->res_a = NULL;
    uint32_t after = UINT32_MAX, n_ahead = 0;
    for (uint32_t j = 0; j <= L; j++) {
        if (rec && !live && !seg_record(m, s, j, after)) live = 1;
        if (live) TRY(F->seg_ops(fm_of(m), fs_of(s), j, after));
        else TRY(A->graph_launch(c, s->seg[j]));
        const uint32_t cut = F->next_cut(fm_of(m), after == UINT32_MAX ? 0 : after + 1);
        if (n_ahead) { /* copies beside the segment just queued (layer `after`'s experts on) */
            if (vt_util_prefetch_on(m->host, m->experts))
                TRY(m->host->experts_prefetch(m->experts, cut, m->topk_ids + K, n_ahead));
            n_ahead = 0;
        }
        if (cut >= L) break;
        const uint32_t ahead = s->seg_pred[j] ? (uint32_t)K : 0;
        vt_moe_ffn_args a = vt_mc_moe_args(m, cut, 1);
        m->exp_tab_queued = 1;
        vt_status st = vt_util_moe_streamed_acquire_one(m->host, A, c, m->experts, cut, &a,
                                                        m->topk_ids, m->exp_count, m->exp_ids,
                                                        m->exp_slots, vt_mc_table_cb, m,
                                                        m->family, cut + 1, ahead);
        m->exp_tab_queued = 0;
        TRY(st);
        n_ahead = ahead;
        after = cut;
    }
    if (live) vt_mc_free_segments(m, s); /* recorded in part: never replayed */
    return launch(m, s, NULL, NULL, 0, logits);
}

vt_status vt_mc_graph_decode(vt_mc_model *m, vt_mc_seq *s, int64_t T, const int32_t *rows,
                             size_t n_rows, float *logits, int *done)
{
    *done = 0;
    if (T == 1 && !m->dump_path && m->use_graph) {
        TRY(step_graph(m, s, rows, n_rows, logits, done));
        if (*done) return VT_OK;
    }
    if (T == 1 && !m->dump_path && m->use_seg_graph) {
        /* an error on the recording step (a refused acquire, copy or launch)
         * leaves the segments recorded in part: they are freed, and the next
         * step records them again instead of launching a missing one */
        const int rec = !s->seg;
        vt_status st = step_segments_run(m, s, rows, n_rows, logits);
        if (st != VT_OK && rec) vt_mc_free_segments(m, s);
        *done = st == VT_OK;
        return st;
    }
    if (s->seg) vt_mc_free_segments(m, s); /* graphs went off since they were recorded */
    return VT_OK;
}

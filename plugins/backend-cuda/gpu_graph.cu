/*
 * gpu_graph.cu - decode graphs of backend-cuda and backend-rocm
 * (vt/backend.h graph_begin .. graph_free): the ops issued on the context's
 * stream between graph_begin and graph_end are captured, instantiated once
 * and launched as one unit; ops with host array arguments refuse to be
 * recorded (their values would be those of the recording).
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"
#include "gpu_device.cuh"

/* ======================= decode graphs ======================= */

/* A recorded op sequence: the instantiated graph of the context's stream. */
struct vt_graph {
    vt_gpu_graph_exec exec;
};

extern "C" vt_status vt_gpu_graph_begin(vt_backend_ctx *ctx)
{
    NEED_CTX("graph_begin");
    if (ctx->capturing)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "graph_begin: already recording");
    TRY(vt_gpu_select_device(ctx, "graph_begin"));
    vt_gpu_xq_forget(ctx); /* a recording must round its own activations */
    /* the argument ring is set up now: its first use allocates, which a recording cannot do */
    (void)vt_gpu_ring_ready(ctx);
    vt_gpu_xq_reserve(ctx); /* the same for the rounded activations' buffer */
    vt_gpu_attn_reserve(ctx); /* and for decode attention's parts */
    vt_gpu_error e = vt_gpu_stream_begin_capture(VT_ST);
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "graph_begin: " VT_GPU_RT
                           "StreamBeginCapture on device %d failed: %s", ctx->device,
                           vt_gpu_get_error_string(e));
    ctx->capturing = 1;
    return VT_OK;
}

extern "C" vt_status vt_gpu_graph_end(vt_backend_ctx *ctx, vt_graph **out)
{
    NEED_CTX("graph_end");
    if (out) *out = NULL;
    if (!ctx->capturing)
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "graph_end: not recording");
    ctx->capturing = 0;
    vt_gpu_xq_forget(ctx);
    vt_gpu_graph_t g = NULL;
    vt_gpu_error e = vt_gpu_stream_end_capture(VT_ST, &g);
    if (e != vt_gpu_success || !g) {
        (void)vt_gpu_get_last_error();
        return vt_gpu_fail(ctx->host, e != vt_gpu_success ? vt_gpu_status_of(e) : VT_ERR_IO,
                           "graph_end: " VT_GPU_RT "StreamEndCapture on device %d failed: %s "
                           "(an op of the recording failed or used another stream)", ctx->device,
                           e != vt_gpu_success ? vt_gpu_get_error_string(e) : "no graph");
    }
    if (!out) {
        (void)vt_gpu_graph_destroy(g);
        return vt_gpu_fail(ctx->host, VT_ERR_INVALID_ARG, "graph_end: out is NULL");
    }
    vt_graph *vg = (vt_graph *)calloc(1, sizeof *vg);
    if (!vg) {
        (void)vt_gpu_graph_destroy(g);
        return vt_gpu_fail(ctx->host, VT_ERR_OUT_OF_MEMORY, "graph_end: %zu bytes", sizeof *vg);
    }
    e = vt_gpu_graph_instantiate(&vg->exec, g);
    (void)vt_gpu_graph_destroy(g);
    if (e != vt_gpu_success) {
        free(vg);
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "graph_end: " VT_GPU_RT
                           "GraphInstantiate on device %d failed: %s", ctx->device,
                           vt_gpu_get_error_string(e));
    }
    *out = vg;
    return VT_OK;
}

extern "C" vt_status vt_gpu_graph_launch(vt_backend_ctx *ctx, vt_graph *g)
{
    NEED_CTX("graph_launch");
    CHECK(g, "graph_launch: graph is NULL");
    CHECK(!ctx->capturing, "graph_launch: the context is recording a graph");
    TRY(vt_gpu_select_device(ctx, "graph_launch"));
    vt_gpu_xq_forget(ctx);
    vt_gpu_tl_mark(ctx, 'g', 0);
    vt_gpu_error e = vt_gpu_graph_exec_launch(g->exec, VT_ST);
    vt_gpu_tl_mark(ctx, 'G', 0);
    if (e != vt_gpu_success)
        return vt_gpu_fail(ctx->host, vt_gpu_status_of(e), "graph_launch: " VT_GPU_RT
                           "GraphLaunch on device %d failed: %s", ctx->device,
                           vt_gpu_get_error_string(e));
    return VT_OK;
}

extern "C" void vt_gpu_graph_free(vt_backend_ctx *ctx, vt_graph *g)
{
    if (!g) return;
    if (ctx) (void)vt_gpu_select_device(ctx, "graph_free");
    (void)vt_gpu_graph_exec_destroy(g->exec);
    (void)vt_gpu_get_last_error();
    free(g);
}

/*
 * capabilities.c - declared capabilities: every optional backend member is a
 * capability that the plugin must declare PRESENT (function set) or ABSENT
 * (function NULL, with a reason). Nothing is inferred from a NULL pointer.
 */
#include "capabilities.h"

#include <stdio.h>
#include <string.h>

#include "vt/types.h"

typedef struct cap_def {
    uint32_t id;
    const char *name;
    uint16_t minor; /* ABI minor that introduced it */
} cap_def;

static const cap_def fixed_caps[] = {
    {VT_CAP_MEMORY_PROBE, "memory_probe", 0},
    {VT_CAP_PINNED_HOST_ALLOC, "pinned_host_alloc", 0},
    {VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY, "host_addressable_device_memory", 0},
    {VT_CAP_ASYNC_QUEUE, "async_queue", 0},
    {VT_CAP_PEER_COPY, "peer_copy", 0},
    {VT_CAP_DEVICE_NAME, "device_name", 1},
    {VT_CAP_OP_RMS_NORM, "op.rms_norm", 0},
    {VT_CAP_OP_L2_NORM, "op.l2_norm", 0},
    {VT_CAP_OP_ROPE_NEOX, "op.rope_neox", 0},
    {VT_CAP_OP_ATTENTION, "op.attention", 0},
    {VT_CAP_OP_SSM_CONV, "op.ssm_conv", 0},
    {VT_CAP_OP_GATED_DELTA_NET, "op.gated_delta_net", 0},
    {VT_CAP_OP_UNARY, "op.unary", 0},
    {VT_CAP_OP_BINARY, "op.binary", 0},
    {VT_CAP_OP_SCALE, "op.scale", 0},
    {VT_CAP_OP_MUL_ROWS, "op.mul_rows", 0},
    {VT_CAP_OP_COPY_2D, "op.copy_2d", 0},
    {VT_CAP_OP_GATHER_ROWS, "op.gather_rows", 0},
    {VT_CAP_OP_SCATTER_ADD, "op.scatter_add", 0},
    {VT_CAP_OP_SOFTMAX_TOPK, "op.softmax_topk", 0},
    {VT_CAP_OP_MOE_ROUTE, "op.moe_route", 2},
    {VT_CAP_OP_MOE_FFN, "op.moe_ffn", 2},
    {VT_CAP_GRAPH, "graph", 2},
    {VT_CAP_OP_MUL_ACT, "op.mul_act", 3},
    {VT_CAP_OP_ADD_RMS_NORM, "op.add_rms_norm", 3},
    {VT_CAP_OP_DELTA_NET_GATES, "op.delta_net_gates", 3},
    {VT_CAP_COPY_H2D_ASYNC, "copy.h2d_async", 4},
    {VT_CAP_COPY_H2D_AHEAD, "copy.h2d_ahead", 5},
};
#define N_FIXED (sizeof fixed_caps / sizeof fixed_caps[0])

size_t vt_abi_table_size(uint32_t kind, uint16_t minor)
{
    switch (kind) {
    case VT_PLUGIN_BACKEND:
        return minor >= 9 ? VT_BACKEND_API_SIZE_1_9
               : minor >= 5 ? VT_BACKEND_API_SIZE_1_5
               : minor >= 4 ? VT_BACKEND_API_SIZE_1_4
               : minor >= 3 ? VT_BACKEND_API_SIZE_1_3
               : minor >= 2 ? VT_BACKEND_API_SIZE_1_2
               : minor >= 1 ? VT_BACKEND_API_SIZE_1_1 : VT_BACKEND_API_SIZE_1_0;
    case VT_PLUGIN_MODEL:
        return minor >= 8   ? VT_MODEL_API_SIZE_1_8
               : minor >= 1 ? VT_MODEL_API_SIZE_1_1 : VT_MODEL_API_SIZE_1_0;
    case VT_PLUGIN_STORE:
        return minor >= 5   ? VT_STORE_API_SIZE_1_5
               : minor >= 4 ? VT_STORE_API_SIZE_1_4
               : minor >= 1 ? VT_STORE_API_SIZE_1_1 : 0;
    }
    return 0;
}

int vt_cap_known(uint32_t id, uint16_t *minor)
{
    for (size_t i = 0; i < N_FIXED; i++)
        if (fixed_caps[i].id == id) {
            if (minor) *minor = fixed_caps[i].minor;
            return 1;
        }
    uint32_t t;
    int gr;
    if (!vt_cap_weight_type(id, &t, &gr)) return 0;
    if (t >= VT_TYPE_COUNT || vt_type_block_size(t) == 0) return 0;
    if (minor) *minor = t < VT_TYPE_SLOTS ? 0 : 9;
    return 1;
}

void vt_cap_for_each(void (*fn)(uint32_t id, void *arg), void *arg)
{
    for (uint32_t id = 0; id < VT_CAP_ID_LIMIT; id++)
        if (vt_cap_known(id, NULL)) fn(id, arg);
    for (uint32_t t = VT_TYPE_SLOTS; t < VT_TYPE_COUNT; t++) {
        if (!vt_cap_known(VT_CAP_MAT_MUL(t), NULL)) continue;
        fn(VT_CAP_MAT_MUL(t), arg);
        fn(VT_CAP_GET_ROWS(t), arg);
    }
}

const char *vt_cap_name(uint32_t id, char *buf, size_t cap)
{
    for (size_t i = 0; i < N_FIXED; i++)
        if (fixed_caps[i].id == id) {
            snprintf(buf, cap, "%s", fixed_caps[i].name);
            return buf;
        }
    uint32_t t;
    int gr;
    if (vt_cap_weight_type(id, &t, &gr))
        snprintf(buf, cap, "%s.%s", gr ? "get_rows" : "mat_mul", vt_type_name(t));
    else
        snprintf(buf, cap, "capability#%u", id);
    return buf;
}

/* The function a capability stands for; NULL for capabilities without one
 * (host_addressable_device_memory, async_queue), reported via *has_fn = 0. */
static const void *cap_function(const vt_backend_api *t, uint32_t id, int *has_fn)
{
    *has_fn = 1;
    switch (id) {
    case VT_CAP_MEMORY_PROBE: return (const void *)t->memory_probe;
    case VT_CAP_PINNED_HOST_ALLOC:
        return (t->host_alloc_pinned && t->host_free_pinned) ? (const void *)t->host_alloc_pinned
               : (t->host_alloc_pinned || t->host_free_pinned) ? (const void *)1 /* half set */
                                                              : NULL;
    case VT_CAP_PEER_COPY: return (const void *)t->copy_peer;
    case VT_CAP_DEVICE_NAME: return (const void *)t->device_name; /* minor >= 1 only */
    case VT_CAP_OP_RMS_NORM: return (const void *)t->rms_norm;
    case VT_CAP_OP_L2_NORM: return (const void *)t->l2_norm;
    case VT_CAP_OP_ROPE_NEOX: return (const void *)t->rope_neox;
    case VT_CAP_OP_ATTENTION: return (const void *)t->attention;
    case VT_CAP_OP_SSM_CONV: return (const void *)t->ssm_conv;
    case VT_CAP_OP_GATED_DELTA_NET: return (const void *)t->gated_delta_net;
    case VT_CAP_OP_UNARY: return (const void *)t->unary;
    case VT_CAP_OP_BINARY: return (const void *)t->binary;
    case VT_CAP_OP_SCALE: return (const void *)t->scale;
    case VT_CAP_OP_MUL_ROWS: return (const void *)t->mul_rows;
    case VT_CAP_OP_COPY_2D: return (const void *)t->copy_2d;
    case VT_CAP_OP_GATHER_ROWS: return (const void *)t->gather_rows;
    case VT_CAP_OP_SCATTER_ADD: return (const void *)t->scatter_add;
    case VT_CAP_OP_SOFTMAX_TOPK: return (const void *)t->softmax_topk;
    case VT_CAP_OP_MOE_ROUTE: return (const void *)t->moe_route; /* minor >= 2 only */
    case VT_CAP_OP_MOE_FFN: return (const void *)t->moe_ffn;
    case VT_CAP_OP_MUL_ACT: return (const void *)t->mul_act; /* minor >= 3 only */
    case VT_CAP_OP_ADD_RMS_NORM: return (const void *)t->add_rms_norm;
    case VT_CAP_OP_DELTA_NET_GATES: return (const void *)t->delta_net_gates;
    case VT_CAP_COPY_H2D_ASYNC: return (const void *)t->copy_h2d_async; /* minor >= 4 only */
    case VT_CAP_COPY_H2D_AHEAD: /* all three members or none (minor >= 5 only) */
        if (t->ahead_fork && t->copy_h2d_ahead && t->ahead_join) return (const void *)t->ahead_fork;
        return (t->ahead_fork || t->copy_h2d_ahead || t->ahead_join) ? (const void *)1 : NULL;
    case VT_CAP_GRAPH: /* all seven members or none */
        if (t->graph_begin && t->graph_end && t->graph_launch && t->graph_free && t->rope_neox_dpos &&
            t->attention_dpos && t->copy_rows_dpos)
            return (const void *)t->graph_begin;
        return (t->graph_begin || t->graph_end || t->graph_launch || t->graph_free ||
                t->rope_neox_dpos || t->attention_dpos || t->copy_rows_dpos) ? (const void *)1 : NULL;
    default: break;
    }
    uint32_t ty;
    int gr;
    if (vt_cap_weight_type(id, &ty, &gr)) {
        if (ty < VT_TYPE_SLOTS) return gr ? (const void *)t->get_rows[ty] : (const void *)t->mat_mul[ty];
        /* one function serves every extended type (minor >= 9 only): it must
         * be set for a PRESENT one, and may be for an ABSENT one */
        *has_fn = 2;
        return gr ? (const void *)t->get_rows_ext : (const void *)t->mat_mul_ext;
    }
    *has_fn = 0;
    return NULL;
}

static const vt_capability *find_decl(const vt_backend_api *t, uint32_t id)
{
    for (uint32_t i = 0; i < t->n_caps; i++)
        if (t->caps[i].id == id) return &t->caps[i];
    return NULL;
}

struct undeclared {
    const vt_plugin_desc *d;
    int found;
    uint32_t id; /* the first capability of the plugin's minor it does not declare */
};

static void find_undeclared(uint32_t id, void *arg)
{
    struct undeclared *u = arg;
    uint16_t minor;
    if (u->found || !vt_cap_known(id, &minor) || minor > u->d->abi_minor) return;
    if (!find_decl(u->d->table, id)) {
        u->found = 1;
        u->id = id;
    }
}

vt_status vt_caps_validate(const vt_plugin_desc *d, char *why, size_t why_cap)
{
    const vt_backend_api *t = d->table;
    char name[64];
    if (t->n_caps && !t->caps) {
        snprintf(why, why_cap, "capability list is NULL but n_caps = %u", t->n_caps);
        return VT_ERR_ABI;
    }
    if (t->n_caps > VT_CAP_ID_LIMIT * 2) {
        snprintf(why, why_cap, "capability list has %u entries, more than the ABI knows", t->n_caps);
        return VT_ERR_ABI;
    }
    /* each declaration: known (or newer: ignored), not duplicated, consistent with its function */
    for (uint32_t i = 0; i < t->n_caps; i++) {
        const vt_capability *c = &t->caps[i];
        uint16_t minor;
        if (!vt_cap_known(c->id, &minor)) continue; /* from a newer minor than this core */
        for (uint32_t j = 0; j < i; j++)
            if (t->caps[j].id == c->id) {
                snprintf(why, why_cap, "capability '%s' declared twice",
                         vt_cap_name(c->id, name, sizeof name));
                return VT_ERR_ABI;
            }
        if (minor > d->abi_minor) continue; /* reads as ABSENT, see vt_caps_state */
        int has_fn;
        const void *fn = cap_function(t, c->id, &has_fn);
        if (c->state == VT_CAP_PRESENT) {
            if (has_fn && (!fn || (c->id == VT_CAP_PINNED_HOST_ALLOC &&
                                   (!t->host_alloc_pinned || !t->host_free_pinned)) ||
                           ((c->id == VT_CAP_GRAPH || c->id == VT_CAP_COPY_H2D_AHEAD) &&
                            fn == (const void *)1))) {
                snprintf(why, why_cap, "capability '%s' declared PRESENT but its function is NULL",
                         vt_cap_name(c->id, name, sizeof name));
                return VT_ERR_ABI;
            }
        } else if (c->state == VT_CAP_ABSENT) {
            if (has_fn == 1 && fn) {
                snprintf(why, why_cap, "capability '%s' declared ABSENT but its function is set",
                         vt_cap_name(c->id, name, sizeof name));
                return VT_ERR_ABI;
            }
            if (!c->reason || !*c->reason) {
                snprintf(why, why_cap, "capability '%s' declared ABSENT without a reason",
                         vt_cap_name(c->id, name, sizeof name));
                return VT_ERR_ABI;
            }
        } else {
            snprintf(why, why_cap, "capability '%s' has invalid state %u",
                     vt_cap_name(c->id, name, sizeof name), c->state);
            return VT_ERR_ABI;
        }
    }
    /* every capability the plugin's minor knows must be declared */
    struct undeclared u = {d, 0, 0};
    vt_cap_for_each(find_undeclared, &u);
    if (u.found) {
        snprintf(why, why_cap, "capability '%s' is not declared (every capability must be "
                 "declared PRESENT or ABSENT)", vt_cap_name(u.id, name, sizeof name));
        return VT_ERR_ABI;
    }
    return VT_OK;
}

vt_cap_state vt_caps_state(const vt_plugin_desc *d, uint32_t id, const char **reason)
{
    static _Thread_local char buf[64];
    const vt_backend_api *t = d->table;
    uint16_t minor;
    if (!vt_cap_known(id, &minor)) {
        *reason = "capability unknown to this vt";
        return VT_CAP_ABSENT;
    }
    if (minor > d->abi_minor) {
        snprintf(buf, sizeof buf, "plugin built for ABI %u.%u", d->abi_major, d->abi_minor);
        *reason = buf;
        return VT_CAP_ABSENT;
    }
    const vt_capability *c = find_decl(t, id);
    if (!c || c->state != VT_CAP_PRESENT) {
        *reason = c && c->reason ? c->reason : "not declared";
        return VT_CAP_ABSENT;
    }
    *reason = c->reason ? c->reason : "";
    return VT_CAP_PRESENT;
}

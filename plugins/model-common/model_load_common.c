/*
 * model_load_common.c - the tensor loader and weight allocations every model
 * family shares (vt/model_common.h): shape checks that name the metadata a
 * shape came from, weight types against the backend's ops, placement in
 * backend memory (the mmap itself when it is host-addressable), merged
 * matrices, expert stacks, the op capabilities a forward pass calls.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vt/model_common.h"
#include "vt/plugin_util.h"
#include "vt/types.h"

/* ---------------------------------------------------------------- allocations */

vt_status vt_mc_dev_alloc(vt_mc_model *m, size_t bytes, const char *what, void **out)
{
    return vt_util_alloc_named(m->host, m->api, m->ctx, m->family, bytes, what, out);
}

vt_status vt_mc_weight_alloc(vt_mc_model *m, size_t bytes, const char *what, void **out)
{
    *out = NULL;
    if (m->n_dev_allocs == m->cap_dev_allocs) {
        size_t nc = m->cap_dev_allocs ? 2 * m->cap_dev_allocs : 64;
        void **na = realloc(m->dev_allocs, nc * sizeof *na);
        if (!na) {
            char human[32];
            m->host->set_error("%s: allocation of %s (%zu bytes) for the list of %zu device "
                               "allocations failed: out of memory", m->family,
                               vt_format_bytes(nc * sizeof *na, 0, human, sizeof human),
                               nc * sizeof *na, nc);
            return VT_ERR_OUT_OF_MEMORY;
        }
        m->dev_allocs = na;
        m->cap_dev_allocs = nc;
    }
    vt_status st = vt_mc_dev_alloc(m, bytes, what, out);
    if (st == VT_OK) m->dev_allocs[m->n_dev_allocs++] = *out;
    return st;
}

void vt_mc_weight_free(vt_mc_model *m, const void *p)
{
    for (size_t i = 0; i < m->n_dev_allocs; i++)
        if (m->dev_allocs[i] == p) {
            m->api->free(m->ctx, m->dev_allocs[i]);
            m->dev_allocs[i] = m->dev_allocs[--m->n_dev_allocs];
            return;
        }
}

void vt_mc_free_weights(vt_mc_model *m)
{
    for (size_t i = 0; i < m->n_dev_allocs; i++) m->api->free(m->ctx, m->dev_allocs[i]);
    free(m->dev_allocs);
    m->dev_allocs = NULL;
    m->n_dev_allocs = m->cap_dev_allocs = 0;
}

vt_status vt_mc_merge(vt_mc_model *m, vt_weight *const *parts, int n, vt_weight *out)
{
    memset(out, 0, sizeof *out);
    const size_t bytes = m->zero_copy || n > 4 ? 0 : vt_util_merge_bytes(parts, n);
    if (!bytes) return VT_OK;
    void *p = NULL;
    const void *old[4];
    vt_status st = vt_mc_weight_alloc(m, bytes, parts[0]->name, &p);
    if (st == VT_ERR_OUT_OF_MEMORY) { /* an optimisation after the fit check: run the parts */
        m->host->log(VT_LOG_INFO, "%s: %s and the matrices after it stay separate: no room "
                     "for their merged copy (%s)", m->family, parts[0]->name, m->host->last_error());
        return VT_OK;
    }
    if (st == VT_OK) st = vt_util_merge_weights(m->api, m->ctx, parts, n, p, old, out);
    if (st != VT_OK) { /* the parts are untouched until the copies are done */
        if (p) vt_mc_weight_free(m, p);
        memset(out, 0, sizeof *out);
        return st;
    }
    for (int i = 0; i < n; i++) vt_mc_weight_free(m, old[i]);
    return VT_OK;
}

vt_status vt_mc_carve_scratch(vt_mc_model *m, const vt_mc_scratch_part *parts, size_t n,
                              size_t *bytes_only, void **scratch)
{
    size_t total = 0, bytes = 0;
    int ovf = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = 0;
        ovf |= __builtin_mul_overflow(parts[i].rows, parts[i].cols, &k);
        ovf |= __builtin_add_overflow(k, (size_t)15, &k);
        ovf |= __builtin_add_overflow(total, k / 16 * 16, &total);
    }
    ovf |= __builtin_mul_overflow(total, sizeof(float), &bytes);
    if (ovf) {
        m->host->set_error("%s: the activation scratch for n_batch = %u tokens overflows the "
                           "address space", m->family, m->n_batch);
        return VT_ERR_RANGE;
    }
    if (bytes_only) {
        *bytes_only = bytes;
        return VT_OK;
    }
    char what[64];
    snprintf(what, sizeof what, "%s activation scratch", m->family);
    vt_status st = vt_mc_dev_alloc(m, bytes, what, scratch);
    if (st != VT_OK) return st;
    float *p = *scratch;
    for (size_t i = 0; i < n; i++) {
        *parts[i].p = p;
        p += (parts[i].rows * parts[i].cols + 15) / 16 * 16;
    }
    return VT_OK;
}

void vt_mc_info(const vt_mc_model *m, int64_t n_vocab, uint32_t n_embd, uint32_t n_layer,
                uint32_t n_ctx_train, const char *moe_path, const char *decode_path,
                vt_model_info *out)
{
    vt_model_info i;
    memset(&i, 0, sizeof i);
    i.n_vocab = n_vocab;
    i.n_embd = n_embd;
    i.n_layer = n_layer;
    i.n_ctx = m->n_ctx;
    i.n_ctx_train = n_ctx_train;
    i.moe_path = moe_path;
    i.decode_path = decode_path;
    const size_t n11 = offsetof(vt_model_info, moe_path);
    size_t n = out->struct_size >= sizeof i ? sizeof i
               : out->struct_size > n11 ? out->struct_size : n11;
    i.struct_size = (uint32_t)n;
    memcpy(out, &i, n);
}

vt_status vt_mc_seq_alloc(vt_mc_model *m, size_t bytes, const char *what, uint32_t il, float **out)
{
    char name[96];
    snprintf(name, sizeof name, "%s blk.%u", what, il);
    void *p = NULL;
    vt_status st = vt_mc_dev_alloc(m, bytes ? bytes : 64, name, &p);
    if (st != VT_OK) return st;
    *out = p;
    return m->api->memset_zero(m->ctx, p, bytes ? bytes : 64);
}

/* ---------------------------------------------------------------- the loader */

vt_status vt_mc_key_arch(const vt_host_api *host, const vt_gguf *g, const char *family,
                         vt_gguf_str *arch)
{
    vt_status st = host->gguf_get_str(g, "general.architecture", arch);
    if (st == VT_ERR_NOT_FOUND)
        host->set_error("%s: required metadata key 'general.architecture' is missing", family);
    return st;
}

/* The key "<arch>.<suffix>" of g read as an f32 (f32 set) or a u32 into out;
 * absent: VT_ERR_NOT_FOUND naming it when required, else *absent = 1. */
static vt_status key_read(const vt_host_api *host, const vt_gguf *g, const char *family,
                          const char *arch, const char *suffix, int required, int f32, void *out,
                          int *absent)
{
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    vt_status st = f32 ? host->gguf_get_f32(g, key, out) : host->gguf_get_u32(g, key, out);
    *absent = 0;
    if (st != VT_ERR_NOT_FOUND) return st; /* VT_ERR_FORMAT names the key */
    if (required) {
        host->set_error("%s: required metadata key '%s' is missing", family, key);
        return VT_ERR_NOT_FOUND;
    }
    *absent = 1;
    return VT_OK;
}

vt_status vt_mc_key_u32(const vt_host_api *host, const vt_gguf *g, const char *family,
                        const char *arch, const char *suffix, int required, uint32_t dflt,
                        uint32_t *out)
{
    int absent;
    vt_status st = key_read(host, g, family, arch, suffix, required, 0, out, &absent);
    if (absent) *out = dflt;
    return st;
}

vt_status vt_mc_key_f32(const vt_host_api *host, const vt_gguf *g, const char *family,
                        const char *arch, const char *suffix, int required, float dflt,
                        float *out)
{
    int absent;
    vt_status st = key_read(host, g, family, arch, suffix, required, 1, out, &absent);
    if (absent) *out = dflt;
    return st;
}

void vt_mc_add_cap(vt_mc_loader *L, uint32_t id)
{
    /* only the ids stored can be compared: past the caller's capacity the count
     * may include repeats, which only makes the "needs room for" figure larger */
    for (uint32_t i = 0; i < L->n_caps && i < L->cap_caps; i++)
        if (L->caps[i] == id) return;
    if (L->n_caps < L->cap_caps) L->caps[L->n_caps] = id;
    L->n_caps++; /* counts past the capacity so the caller can report it */
}

const vt_gguf_tensor *vt_mc_find(vt_mc_loader *L, const char *name)
{
    return L->host->gguf_find_tensor(L->g, name);
}

vt_status vt_mc_missing(vt_mc_loader *L, const char *name, const char *why)
{
    L->host->set_error("%s: required tensor '%s' is missing%s%s", L->family, name, why ? ": " : "",
                       why ? why : "");
    return VT_ERR_NOT_FOUND;
}

vt_status vt_mc_refuse_if_present(vt_mc_loader *L, const char *name, const char *why)
{
    if (vt_mc_find(L, name)) {
        L->host->set_error("%s: tensor '%s' is present: %s", L->family, name, why);
        return VT_ERR_UNSUPPORTED;
    }
    return VT_OK;
}

/* "[256, 512]" with trailing 1s dropped, keeping at least min_n dims. */
static void fmt_shape(const int64_t *ne, int n, int min_n, char *buf, size_t cap)
{
    while (n > min_n && n > 1 && ne[n - 1] == 1) n--;
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

vt_status vt_mc_check_shape(vt_mc_loader *L, const vt_gguf_tensor *t, int n, const int64_t *want,
                            const char *from)
{
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        int64_t e = i < n ? want[i] : 1;
        if (t->ne[i] != e) ok = 0;
    }
    if (ok) return VT_OK;
    char have[96], wants[96];
    fmt_shape(t->ne, 4, n, have, sizeof have);
    fmt_shape(want, n, n, wants, sizeof wants);
    L->host->set_error("%s: tensor '%s' has shape %s, expected %s = %s from the metadata",
                       L->family, t->name, have, wants, from);
    return VT_ERR_FORMAT;
}

int vt_mc_is_weight_type(uint32_t type)
{
    if (vt_type_block_size(type) == 0) return 0;
    switch (type) {
    case VT_TYPE_I8: case VT_TYPE_I16: case VT_TYPE_I32: case VT_TYPE_I64: case VT_TYPE_F64:
        return 0;
    default:
        return 1;
    }
}

vt_status vt_mc_need_typed(vt_mc_loader *L, const char *tname, uint32_t type, int get_rows)
{
    if (L->dry) {
        vt_mc_add_cap(L, get_rows ? VT_CAP_GET_ROWS(type) : VT_CAP_MAT_MUL(type));
        return VT_OK;
    }
    const vt_backend_api *api = L->mc->api;
    if (get_rows ? !vt_backend_get_rows_fn(api, type) : !vt_backend_mat_mul_fn(api, type)) {
        L->host->set_error("%s: tensor '%s' has type %s, but backend '%s' has no %s for it",
                           L->family, tname, vt_type_name(type),
                           L->mc->backend && L->mc->backend->name ? L->mc->backend->name : "?",
                           get_rows ? "get_rows" : "mat_mul");
        return VT_ERR_CAPABILITY;
    }
    return VT_OK;
}

vt_status vt_mc_place(vt_mc_loader *L, const vt_gguf_tensor *t, uint64_t bytes, const void **out)
{
    *out = NULL;
    if (L->dry) return VT_OK;
    vt_mc_model *m = L->mc;
    if (bytes > t->nbytes) {
        L->host->set_error("%s: tensor '%s' holds %" PRIu64 " bytes, its shape needs %" PRIu64,
                           L->family, t->name, t->nbytes, bytes);
        return VT_ERR_FORMAT;
    }
    if (!t->data) {
        L->host->set_error("%s: tensor '%s' has no mapped data (GGUF opened without mmap)",
                           L->family, t->name);
        return VT_ERR_INVALID_ARG;
    }
    if (m->zero_copy) {
        *out = t->data;
        return VT_OK;
    }
    void *p = NULL;
    vt_status st = vt_mc_weight_alloc(m, (size_t)bytes, t->name, &p);
    if (st != VT_OK) return st;
    st = m->api->copy_h2d(m->ctx, p, t->data, (size_t)bytes);
    if (st != VT_OK) return st;
    vt_util_release_pages(L->host, L->g, t); /* read from the device from now on */
    *out = p;
    return VT_OK;
}

/* Row bytes of a weight of type t->type with rows of n_in, or 0 (message set)
 * when the type is no weight type. */
static uint64_t weight_row_bytes(vt_mc_loader *L, const vt_gguf_tensor *t, int64_t n_in,
                                 const char *what)
{
    uint64_t rb = vt_type_row_bytes(t->type, (uint64_t)n_in);
    if (!vt_mc_is_weight_type(t->type) || rb == 0) {
        L->host->set_error("%s: tensor '%s' has unsupported type %s (id %u) for %s with rows of "
                           "%" PRId64, L->family, t->name, vt_type_name(t->type), t->type, what, n_in);
        return 0;
    }
    return rb;
}

vt_status vt_mc_weight(vt_mc_loader *L, const char *name, const char *from, int64_t n_in,
                       int64_t n_out, int uses, vt_weight *w, int *found)
{
    memset(w, 0, sizeof *w);
    const vt_gguf_tensor *t = vt_mc_find(L, name);
    if (found) *found = t != NULL;
    if (!t) return found ? VT_OK : vt_mc_missing(L, name, NULL);
    int64_t want[2] = {n_in, n_out};
    vt_status st = vt_mc_check_shape(L, t, 2, want, from);
    if (st != VT_OK) return st;
    uint64_t rb = weight_row_bytes(L, t, n_in, "a weight");
    if (!rb) return VT_ERR_UNSUPPORTED;
    if ((uses & VT_MC_USE_MAT_MUL) && (st = vt_mc_need_typed(L, t->name, t->type, 0)) != VT_OK)
        return st;
    if ((uses & VT_MC_USE_GET_ROWS) && (st = vt_mc_need_typed(L, t->name, t->type, 1)) != VT_OK)
        return st;
    w->type = t->type;
    w->n_in = n_in;
    w->n_out = n_out;
    w->row_bytes = rb;
    w->name = t->name;
    return vt_mc_place(L, t, rb * (uint64_t)n_out, &w->data);
}

vt_status vt_mc_f32(vt_mc_loader *L, const char *name, const char *from, int n,
                    const int64_t *want, const float **out, int *found)
{
    *out = NULL;
    const vt_gguf_tensor *t = vt_mc_find(L, name);
    if (found) *found = t != NULL;
    if (!t) return found ? VT_OK : vt_mc_missing(L, name, NULL);
    vt_status st = vt_mc_check_shape(L, t, n, want, from);
    if (st != VT_OK) return st;
    if (t->type != VT_TYPE_F32) {
        L->host->set_error("%s: tensor '%s' has type %s; expected F32", L->family, name,
                           vt_type_name(t->type));
        return VT_ERR_UNSUPPORTED;
    }
    uint64_t count = 1;
    for (int i = 0; i < n; i++) count *= (uint64_t)want[i];
    const void *p;
    st = vt_mc_place(L, t, count * 4, &p);
    *out = p;
    return st;
}

vt_status vt_mc_stack_map(vt_mc_loader *L, const char *name, const char *from, int64_t n_in,
                          int64_t n_out, int64_t n_expert, vt_mc_stack *s)
{
    memset(s, 0, sizeof *s);
    const vt_gguf_tensor *t = vt_mc_find(L, name);
    if (!t) return vt_mc_missing(L, name, NULL);
    int64_t want[3] = {n_in, n_out, n_expert};
    vt_status st = vt_mc_check_shape(L, t, 3, want, from);
    if (st != VT_OK) return st;
    uint64_t rb = weight_row_bytes(L, t, n_in, "an expert stack");
    if (!rb) return VT_ERR_UNSUPPORTED;
    if ((st = vt_mc_need_typed(L, t->name, t->type, 0)) != VT_OK) return st;
    s->type = t->type;
    s->n_in = n_in;
    s->n_out = n_out;
    s->n_expert = n_expert;
    s->row_bytes = rb;
    s->name = t->name;
    s->tensor = t;
    const uint64_t bytes = rb * (uint64_t)n_out * (uint64_t)n_expert;
    if (L->mc && L->mc->experts && !L->dry) {
        /* streamed: registered after mapping; its bytes are never touched here */
        if (t->nbytes < bytes) {
            L->host->set_error("%s: tensor '%s' holds %" PRIu64 " bytes, its shape needs %" PRIu64,
                               L->family, t->name, t->nbytes, bytes);
            return VT_ERR_FORMAT;
        }
        return VT_OK;
    }
    const void *p;
    st = vt_mc_place(L, t, bytes, &p);
    s->data = p;
    return st;
}

/* ---------------------------------------------------------------- routed experts */

vt_status vt_mc_expert_weight(const vt_mc_model *m, const vt_mc_experts *x, int which, uint32_t e,
                              const void *const *slots, vt_weight *out)
{
    const vt_mc_stack *s;
    int64_t rows, row0 = 0;
    uint32_t slot_idx;
    if (which == VT_MC_EXP_DOWN) {
        s = &x->down_exps;
        rows = s->n_out;
        slot_idx = x->fused_gate_up ? 1 : 2;
    } else if (x->fused_gate_up) {
        s = &x->gate_up_exps;
        rows = s->n_out / 2;
        row0 = which == VT_MC_EXP_UP ? rows : 0;
        slot_idx = 0;
    } else {
        s = which == VT_MC_EXP_GATE ? &x->gate_exps : &x->up_exps;
        rows = s->n_out;
        slot_idx = which == VT_MC_EXP_GATE ? 0 : 1;
    }
    if ((int64_t)e >= s->n_expert) {
        m->host->set_error("%s: expert %u of '%s' is out of range (%" PRId64 " experts)", m->family,
                           e, s->name, s->n_expert);
        return VT_ERR_INTERNAL;
    }
    out->type = s->type;
    out->n_in = s->n_in;
    out->n_out = rows;
    out->row_bytes = s->row_bytes;
    if (slots)
        out->data = (const uint8_t *)slots[slot_idx] + (uint64_t)row0 * s->row_bytes;
    else
        out->data = s->data + ((uint64_t)e * (uint64_t)s->n_out + (uint64_t)row0) * s->row_bytes;
    out->name = s->name;
    return VT_OK;
}

vt_status vt_mc_write_expert_table(vt_mc_model *m, uint32_t il, const vt_mc_experts *x,
                                   int64_t n_expert, const int32_t *ids, uint32_t n,
                                   const void *const *slots)
{
    const int64_t nx = n_expert;
    const uint32_t M = x->fused_gate_up ? 2 : 3;
    /* host-addressable device memory is written in place; else through the host image */
    const void **tab = m->zero_copy ? (const void **)m->exp_tab[il] : m->exp_tab_host;
    uint32_t count = slots ? n : (uint32_t)nx;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t e = slots ? (uint32_t)ids[i] : i;
        const void *const *sl = slots ? slots + (size_t)i * M : NULL;
        for (int w = 0; w < 3; w++) {
            vt_weight v;
            vt_status st = vt_mc_expert_weight(m, x, w, e, sl, &v);
            if (st != VT_OK) return st;
            tab[(size_t)w * nx + e] = v.data;
        }
    }
    if (m->zero_copy) return VT_OK;
    return vt_util_exp_tab_upload(m->api, m->ctx, m->exp_tab[il], tab,
                                  3 * (size_t)nx * sizeof(void *), m->exp_tab_pinned,
                                  m->exp_tab_queued);
}

vt_status vt_mc_register_experts(vt_mc_model *m, uint32_t n_layer, uint32_t n_expert_used,
                                 const vt_mc_experts *(*layer_experts)(const vt_model *fm, uint32_t il),
                                 const vt_model *fm)
{
    const vt_host_api *h = m->host;
    if (h->struct_size < offsetof(vt_host_api, experts_stats) + sizeof h->experts_stats ||
        !h->experts_register || !h->experts_acquire) {
        h->set_error("%s: the core streams experts but its host table has no expert streamer",
                     m->family);
        return VT_ERR_ABI;
    }
    const uint32_t k = n_expert_used;
    m->exp_slots = vt_util_calloc_named(h, m->family, (size_t)k * 3, sizeof *m->exp_slots,
                                        "expert slot pointers");
    m->exp_ids = vt_util_calloc_named(h, m->family, k, sizeof *m->exp_ids,
                                      "expert ids of one acquire");
    if (!m->exp_slots || !m->exp_ids) return VT_ERR_OUT_OF_MEMORY;
    for (uint32_t il = 0; il < n_layer; il++) {
        const vt_mc_experts *x = layer_experts(fm, il);
        if (!x) continue;
        const vt_mc_stack *st[3];
        uint32_t n = 0;
        if (x->fused_gate_up) {
            st[n++] = &x->gate_up_exps;
        } else {
            st[n++] = &x->gate_exps;
            st[n++] = &x->up_exps;
        }
        st[n++] = &x->down_exps;
        for (uint32_t j = 0; j < n; j++) {
            vt_status s = h->experts_register(m->experts, il, j, st[j]->tensor);
            if (s != VT_OK) return s;
        }
    }
    return VT_OK;
}

void vt_mc_setup_graph(vt_mc_model *m, int has_moe)
{
    m->use_graph = !vt_util_env_off(m->host, "VT_GRAPH") && !m->experts &&
                   (m->fused_moe || !has_moe) && vt_util_graph_available(m->api);
    m->use_seg_graph = !vt_util_env_off(m->host, "VT_GRAPH") &&
                       !vt_util_env_off(m->host, "VT_GRAPH_STREAMED") && m->experts &&
                       m->fused_moe && vt_util_graph_available(m->api);
}

/* ---------------------------------------------------------------- capabilities */

int vt_mc_op_present(const vt_backend_api *a, uint32_t id, const char **name)
{
    switch (id) {
    case VT_CAP_OP_RMS_NORM: *name = "rms_norm"; return a->rms_norm != NULL;
    case VT_CAP_OP_L2_NORM: *name = "l2_norm"; return a->l2_norm != NULL;
    case VT_CAP_OP_ROPE_NEOX: *name = "rope_neox"; return a->rope_neox != NULL;
    case VT_CAP_OP_ATTENTION: *name = "attention"; return a->attention != NULL;
    case VT_CAP_OP_SSM_CONV: *name = "ssm_conv"; return a->ssm_conv != NULL;
    case VT_CAP_OP_GATED_DELTA_NET: *name = "gated_delta_net"; return a->gated_delta_net != NULL;
    case VT_CAP_OP_UNARY: *name = "unary"; return a->unary != NULL;
    case VT_CAP_OP_BINARY: *name = "binary"; return a->binary != NULL;
    case VT_CAP_OP_SCALE: *name = "scale"; return a->scale != NULL;
    case VT_CAP_OP_MUL_ROWS: *name = "mul_rows"; return a->mul_rows != NULL;
    case VT_CAP_OP_COPY_2D: *name = "copy_2d"; return a->copy_2d != NULL;
    case VT_CAP_OP_GATHER_ROWS: *name = "gather_rows"; return a->gather_rows != NULL;
    case VT_CAP_OP_SCATTER_ADD: *name = "scatter_add"; return a->scatter_add != NULL;
    case VT_CAP_OP_SOFTMAX_TOPK: *name = "softmax_topk"; return a->softmax_topk != NULL;
    default: *name = "?"; return 0;
    }
}

int vt_mc_host_addressable(const vt_backend_api *a)
{
    for (uint32_t i = 0; i < a->n_caps; i++)
        if (a->caps[i].id == VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY)
            return a->caps[i].state == VT_CAP_PRESENT;
    return 0;
}

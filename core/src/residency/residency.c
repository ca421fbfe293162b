/*
 * residency.c - resolves platform -> backend, architecture -> model plugin,
 * expert store, checks every declared requirement before any weight is read,
 * and runs the fit check against the device total probed once (residency.h).
 */
#include "residency.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/sysinfo.h>

#include "capabilities.h"
#include "error.h"
#include "expert_streamer.h"
#include "gguf_info.h"
#include "vt/store.h"

#define MAX_REQUIRED 512

static const char *fmt_bytes(uint64_t b, char *buf, size_t cap)
{
    return vt_format_bytes(b, 1, buf, cap);
}

/* Refuse by name when `who` needs capability id of the backend and it is ABSENT. */
static vt_status need_cap(const vt_plugin_entry *backend, const char *who_kind, const char *who,
                          uint32_t id, const char *why_needed)
{
    const char *reason;
    if (vt_caps_state(backend->desc, id, &reason) == VT_CAP_PRESENT) return VT_OK;
    char name[64];
    vt_set_error("%s '%s' needs capability '%s'%s, which backend '%s' declares ABSENT "
                 "(reason: %s)", who_kind, who, vt_cap_name(id, name, sizeof name),
                 why_needed ? why_needed : "", backend->desc->name, reason);
    return VT_ERR_CAPABILITY;
}

/* The platform's devices against the n_dev the backend reports (step 2). */
static vt_status select_devices(vt_residency *r, const char *pname, int n_dev)
{
    const vt_config_platform *pl = r->plat;
    const uint32_t n = pl->devices_all ? (uint32_t)n_dev : pl->n_devices;
    char list[128] = "all";
    if (!pl->devices_all) {
        size_t o = 0;
        for (uint32_t i = 0; i < n && o < sizeof list; i++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%d", i ? ", " : n > 1 ? "[" : "",
                                  pl->devices[i]);
        if (n > 1 && o < sizeof list) snprintf(list + o, sizeof list - o, "]");
    }
    /* the device a refusal suggests: the first listed that exists */
    int32_t hint = 0;
    for (uint32_t i = 0; !pl->devices_all && i < n; i++)
        if (pl->devices[i] < n_dev) {
            hint = pl->devices[i];
            break;
        }
    if (n > 1) {
        /* experts spread over several devices: hidden states go between them */
        const char *reason;
        if (vt_caps_state(r->backend->desc, VT_CAP_PEER_COPY, &reason) != VT_CAP_PRESENT) {
            vt_set_error("platform '%s' (devices: %s) needs capability 'peer_copy' (the routed "
                         "experts are split over the devices by expert id and each token's hidden "
                         "state is sent to the devices of its experts), which backend '%s' "
                         "declares ABSENT (reason: %s); name one device, such as devices: %d",
                         pname, list, r->backend->desc->name, reason, hint);
            return VT_ERR_CAPABILITY;
        }
        vt_set_error("platform '%s' (devices: %s): model plugin '%s' cannot split routed experts "
                     "over several devices (no model plugin of this vt can yet); name one "
                     "device, such as devices: %d", pname, list, r->model->desc->name, hint);
        return VT_ERR_CAPABILITY;
    }
    for (uint32_t i = 0; !pl->devices_all && i < n; i++)
        if (pl->devices[i] >= n_dev) {
            vt_set_error("platform '%s' (devices: %s): backend '%s' reports %d device%s (indices "
                         "0..%d)", pname, list, r->backend->desc->name, n_dev, n_dev == 1 ? "" : "s",
                         n_dev - 1);
            return VT_ERR_NOT_FOUND;
        }
    r->device = pl->devices_all ? 0 : pl->devices[0];
    return VT_OK;
}

vt_status vt_residency_select(const vt_config *cfg, const vt_registry *reg, const vt_gguf *g,
                              const char *device, vt_residency *r)
{
    memset(r, 0, sizeof *r);
    const char *pname = device && *device ? device : cfg->default_platform;
    snprintf(r->platform, sizeof r->platform, "%s", pname);
    r->plat = vt_config_platform_get(cfg, pname);
    if (!r->plat) {
        /* a platform the config does not name: its defaults (backend = its name) */
        vt_config_platform_defaults(&r->plat_storage, pname);
        r->plat = &r->plat_storage;
    }

    /* model plugin for general.architecture */
    vt_gguf_str arch;
    vt_status st = vt_gguf_get_str(g, "general.architecture", &arch);
    if (st != VT_OK) {
        if (st == VT_ERR_NOT_FOUND) {
            vt_set_error("%s: metadata key 'general.architecture' is missing",
                         vt_gguf_shard_path(g, 0));
            st = VT_ERR_FORMAT;
        }
        return st;
    }
    const char *mname = vt_config_model_for_arch(cfg, arch.ptr);
    if (mname) {
        r->model = vt_registry_find(reg, VT_PLUGIN_MODEL, mname);
        if (!r->model) {
            const char *why = vt_registry_refusal(reg, VT_PLUGIN_MODEL, mname);
            if (why)
                vt_set_error("architecture '%s' of %s needs model plugin '%s': %s", arch.ptr,
                             vt_gguf_shard_path(g, 0), mname, why);
            else
                vt_set_error("config %s maps architecture '%s' to model plugin '%s', which was not "
                             "found (plugin directories: %s; %zu plugin file(s) refused, see 'vt plugins')",
                             cfg->path[0] ? cfg->path : "(built-in)", arch.ptr, mname,
                             vt_registry_dirs(reg), vt_registry_n_refused(reg));
            return why ? VT_ERR_ABI : VT_ERR_NOT_FOUND;
        }
    } else {
        r->model = vt_registry_find_model(reg, arch.ptr);
        if (!r->model) {
            vt_set_error("no model plugin serves architecture '%s' of %s (plugin directories: %s; "
                         "%zu plugin file(s) refused, see 'vt plugins')", arch.ptr,
                         vt_gguf_shard_path(g, 0), vt_registry_dirs(reg),
                         vt_registry_n_refused(reg));
            return VT_ERR_NOT_FOUND;
        }
    }

    /* backend */
    r->backend = vt_registry_find(reg, VT_PLUGIN_BACKEND, r->plat->backend);
    if (!r->backend) {
        const char *why = vt_registry_refusal(reg, VT_PLUGIN_BACKEND, r->plat->backend);
        if (why)
            vt_set_error("--device %s needs backend plugin '%s': %s", pname, r->plat->backend, why);
        else
            vt_set_error("--device %s: no backend plugin '%s' (plugin directories: %s; %zu plugin "
                         "file(s) refused, see 'vt plugins')", pname, r->plat->backend,
                         vt_registry_dirs(reg), vt_registry_n_refused(reg));
        return why ? VT_ERR_ABI : VT_ERR_NOT_FOUND;
    }
    const vt_backend_api *bapi = r->backend->desc->table;
    int n_dev = bapi->device_count();
    if (n_dev <= 0) {
        vt_set_error("--device %s: backend '%s' (%s) reports zero devices", pname,
                     r->backend->desc->name, r->backend->path);
        return VT_ERR_UNSUPPORTED;
    }
    if ((st = select_devices(r, pname, n_dev)) != VT_OK) return st;
    const char *reason;
    if (vt_caps_state(r->backend->desc, VT_CAP_DEVICE_NAME, &reason) == VT_CAP_PRESENT &&
        bapi->device_name(r->device, r->device_name, sizeof r->device_name) != VT_OK)
        r->device_name[0] = 0;

    /* a model plugin built before ABI 1.9 knows no type id past VT_TYPE_SLOTS:
     * its capability ids for them read as others' (64 + t) and it may index
     * the backend's per-type tables with them, so such a file is refused here */
    if (r->model->desc->abi_minor < 9) {
        for (int64_t k = 0; k < vt_gguf_n_tensors(g); k++) {
            const vt_gguf_tensor *t = vt_gguf_tensor_at(g, k);
            if (t && t->type >= VT_TYPE_SLOTS) {
                vt_set_error("model plugin '%s' (%s) is built for ABI %u.%u, which has no weight "
                             "type id past %d: tensor '%s' is %s (id %u, ABI 1.9); rebuild the "
                             "plugin against this vt's SDK", r->model->desc->name, r->model->path,
                             r->model->desc->abi_major, r->model->desc->abi_minor,
                             VT_TYPE_SLOTS - 1, t->name, vt_type_name(t->type), t->type);
                return VT_ERR_CAPABILITY;
            }
        }
    }

    /* what the model needs of the backend, for this file's weight types */
    const vt_model_api *mapi = r->model->desc->table;
    uint32_t ids[MAX_REQUIRED], n = 0;
    if ((st = mapi->required_caps(vt_host_table(), g, ids, MAX_REQUIRED, &n)) != VT_OK) {
        vt_error_prefix("model plugin '%s'", r->model->desc->name);
        return st;
    }
    for (uint32_t i = 0; i < n && i < MAX_REQUIRED; i++) {
        /* a weight-type capability: name the first tensor of that type */
        char why[320] = "";
        uint32_t type;
        int gr;
        if (vt_cap_weight_type(ids[i], &type, &gr)) {
            for (int64_t k = 0; k < vt_gguf_n_tensors(g); k++) {
                const vt_gguf_tensor *t = vt_gguf_tensor_at(g, k);
                if (t && t->type == type) {
                    snprintf(why, sizeof why, " for tensor '%s' of type %s", t->name,
                             vt_type_name(type));
                    break;
                }
            }
        }
        if ((st = need_cap(r->backend, "model", r->model->desc->name, ids[i], why)) != VT_OK)
            return st;
    }

    /* the expert store, when experts may be streamed */
    snprintf(r->store_name, sizeof r->store_name, "%s", r->plat->expert_store);
    if (r->plat->experts != VT_EXPERTS_RESIDENT) {
        if (!strcmp(r->store_name, "host")) {
            /* a platform marked unified_memory says its device reads host memory
             * (GB10-like): that satisfies the host store, whatever the backend
             * plugin declares for discrete devices */
            if (!r->plat->unified_memory &&
                (st = need_cap(r->backend, "store", "host", VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY,
                               " (its slots are host memory the backend's ops must read; set "
                               "unified_memory: true for a device that reads host memory)")) != VT_OK) {
                vt_error_prefix("platform '%s' (experts: %s)", pname,
                                vt_experts_mode_name(r->plat->experts));
                return st;
            }
        } else {
            r->store = vt_registry_find(reg, VT_PLUGIN_STORE, r->store_name);
            if (!r->store) {
                vt_set_error("platform '%s': expert_cache.store '%s' is not a store plugin found "
                             "(plugin directories: %s; %zu plugin file(s) refused, see 'vt plugins')",
                             pname, r->store_name, vt_registry_dirs(reg), vt_registry_n_refused(reg));
                return VT_ERR_NOT_FOUND;
            }
            const vt_store_api *sapi = r->store->desc->table;
            for (uint32_t i = 0; i < sapi->n_required_caps; i++)
                if ((st = need_cap(r->backend, "store", r->store->desc->name,
                                   sapi->required_caps[i], NULL)) != VT_OK) {
                    vt_error_prefix("platform '%s' (experts: %s)", pname,
                                    vt_experts_mode_name(r->plat->experts));
                    return st;
                }
        }
    }
    return VT_OK;
}

/* ---------------------------------------------------------------- fit check */

static uint64_t host_mem_total(void)
{
    struct sysinfo si;
    if (sysinfo(&si) != 0) return 0;
    return (uint64_t)si.totalram * si.mem_unit;
}

static uint64_t add_sat(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

vt_store_params vt_residency_store_params(const vt_residency *r, uint64_t slot_bytes, uint64_t n,
                                         const vt_fit *classes, const vt_backend *backend)
{
    vt_store_params sp = {.struct_size = sizeof sp, .host = vt_host_table(), .backend = backend,
                          .slot_bytes = slot_bytes, .n_slots = n,
                          .pinned_budget_bytes = r->plat->pinned_budget_bytes};
    if (classes && classes->n_classes) {
        sp.n_classes = classes->n_classes;
        sp.class_slots = classes->class_slots;
        sp.class_bytes = classes->class_bytes;
    }
    return sp;
}

const vt_store_api *vt_residency_store_api(const vt_residency *r)
{
    return r->store ? r->store->desc->table : vt_host_store_api();
}

/* Store footprint for n slots (of the fit's slot classes when classes is set):
 * the host store keeps n slots in host memory. */
static vt_status store_footprint_of(const vt_residency *r, uint64_t slot_bytes, uint64_t n,
                                    const vt_fit *classes, vt_store_footprint *fp)
{
    memset(fp, 0, sizeof *fp);
    fp->struct_size = sizeof *fp;
    vt_store_params sp = vt_residency_store_params(r, slot_bytes, n, classes, NULL);
    vt_status st = vt_residency_store_api(r)->footprint(&sp, fp);
    if (st != VT_OK) vt_error_prefix("store '%s' footprint", r->store_name);
    return st;
}

static vt_status store_footprint(const vt_residency *r, uint64_t slot_bytes, uint64_t n,
                                 vt_store_footprint *fp)
{
    return store_footprint_of(r, slot_bytes, n, NULL, fp);
}

/* A slot of `bytes` in the store: its bytes wherever they live (per_slot),
 * those the device pool holds (per_dev: device memory, plus the host part
 * when the pools are one) and the store's fixed part (fp0), from the
 * footprints of one and two slots (a store may take nothing at 0). */
static vt_status slot_cost(const vt_residency *r, uint64_t bytes, int unified, uint64_t *per_slot,
                           uint64_t *per_dev, vt_store_footprint *fp0)
{
    vt_store_footprint fp1, fp2;
    vt_status st;
    if ((st = store_footprint(r, bytes, 1, &fp1)) != VT_OK ||
        (st = store_footprint(r, bytes, 2, &fp2)) != VT_OK)
        return st;
    uint64_t d = fp2.device_bytes - fp1.device_bytes, h = fp2.host_bytes - fp1.host_bytes;
    *per_slot = d + h;
    *per_dev = unified ? d + h : d;
    if (fp0)
        *fp0 = (vt_store_footprint){.struct_size = sizeof *fp0, .device_bytes = fp1.device_bytes - d,
                                    .host_bytes = fp1.host_bytes - h};
    return VT_OK;
}

/* a routed-expert stack of a block that runs */
static int is_run_expert(const vt_gguf_tensor *t, long run_end)
{
    return vt_gguf_is_routed_expert(t) && vt_gguf_block_of(t->name) < run_end;
}

/*
 * The arena's slot classes (expert_cache.slot_classes: auto): the distinct
 * expert slice sizes of g, merged down to VT_STORE_MAX_CLASSES by merging,
 * again and again, the adjacent pair whose merge wastes the fewest bytes
 * (the smaller size's slices then take slots of the larger), each with the
 * slices that take it and its minimum: top-k x the most matrices of one
 * layer that take it (one acquire holds a layer's top-k at once). Sets
 * f->n_classes (0 when every slice has one size) and the class_* arrays;
 * f->n_expert_used must be set.
 */
#define MAX_SLICE_SIZES 64
#define UNIT_ALIGN(n) (((n) + VT_STREAMER_UNIT_ALIGN - 1) / VT_STREAMER_UNIT_ALIGN * VT_STREAMER_UNIT_ALIGN)

/* Whole-expert slots (f->slot_unit_expert): per layer l (by tensor name) the
 * bytes of one expert's unit (each of its stacks' slices rounded up to
 * VT_STREAMER_UNIT_ALIGN, as the streamer lays them out) into unit[l] and
 * its experts (the first stack's count) into n_exp[l]; arrays of 65536,
 * zeroed by the caller. Returns 1 when some layer's stacks differ in expert
 * count (no unit holds "an expert" of them: the streamer refuses them). */
static int layer_units(const vt_gguf *g, uint64_t *unit, uint64_t *n_exp)
{
    int mixed = 0;
    const long run_end = vt_gguf_first_unrun_block(g);
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!is_run_expert(t, run_end)) continue;
        long l = vt_gguf_block_of(t->name);
        if (l < 0 || l >= 65536) l = 65535;
        uint64_t ne = t->n_dims >= 3 && t->ne[2] > 0 ? (uint64_t)t->ne[2] : 1;
        unit[l] = add_sat(unit[l], UNIT_ALIGN(t->nbytes / ne));
        if (!n_exp[l]) n_exp[l] = ne;
        else if (n_exp[l] != ne) mixed = 1;
    }
    return mixed;
}

int vt_residency_slot_unit_expert(const vt_config_platform *plat)
{
    return plat && plat->slot_unit != VT_SLOT_UNIT_MATRIX;
}

void vt_residency_slot_classes(vt_fit *f, const vt_gguf *g)
{
    const long run_end = vt_gguf_first_unrun_block(g);
    uint64_t size[MAX_SLICE_SIZES], count[MAX_SLICE_SIZES];
    uint32_t n = 0;
    f->n_classes = 0;
    uint64_t *unit = NULL, *unit_exp = NULL;
    if (f->slot_unit_expert) {
        unit = calloc(65536, sizeof *unit);
        unit_exp = calloc(65536, sizeof *unit_exp);
        if (!unit || !unit_exp) {
            free(unit);
            free(unit_exp);
            snprintf(f->classes_note, sizeof f->classes_note, "none (out of memory)");
            return;
        }
        layer_units(g, unit, unit_exp);
    }
    const int64_t n_items = f->slot_unit_expert ? 65536 : vt_gguf_n_tensors(g);
    for (int64_t i = 0; i < n_items; i++) {
        uint64_t n_exp, slice;
        if (f->slot_unit_expert) {
            if (!unit[i]) continue;
            n_exp = unit_exp[i];
            slice = unit[i];
        } else {
            const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
            if (!is_run_expert(t, run_end)) continue;
            n_exp = t->n_dims >= 3 && t->ne[2] > 0 ? (uint64_t)t->ne[2] : 1;
            slice = t->nbytes / n_exp;
        }
        uint32_t j = 0;
        while (j < n && size[j] < slice) j++;
        if (j == n || size[j] != slice) {
            if (n == MAX_SLICE_SIZES) {
                snprintf(f->classes_note, sizeof f->classes_note,
                         "none (more than %d expert slice sizes)", MAX_SLICE_SIZES);
                free(unit);
                free(unit_exp);
                return;
            }
            memmove(size + j + 1, size + j, (n - j) * sizeof *size);
            memmove(count + j + 1, count + j, (n - j) * sizeof *count);
            size[j] = slice;
            count[j] = 0;
            n++;
        }
        count[j] = add_sat(count[j], n_exp);
    }
    if (n < 2) {
        snprintf(f->classes_note, sizeof f->classes_note, "none (every expert %s is %s)",
                 f->slot_unit_expert ? "unit" : "slice", n ? "one size" : "absent");
        free(unit);
        free(unit_exp);
        return;
    }
    while (n > VT_STORE_MAX_CLASSES) {
        uint32_t best = 0;
        uint64_t best_waste = UINT64_MAX;
        for (uint32_t j = 0; j + 1 < n; j++) {
            uint64_t w = mul_sat(count[j], size[j + 1] - size[j]);
            if (w < best_waste) {
                best_waste = w;
                best = j;
            }
        }
        count[best + 1] = add_sat(count[best + 1], count[best]);
        memmove(size + best, size + best + 1, (n - best - 1) * sizeof *size);
        memmove(count + best, count + best + 1, (n - best - 1) * sizeof *count);
        n--;
    }
    for (uint32_t c = 0; c < n; c++) {
        f->class_bytes[c] = size[c];
        f->class_slices[c] = count[c];
        f->class_min[c] = 0;
        f->class_slots[c] = 0;
    }
    if (f->slot_unit_expert) { /* a layer's top-k units at once */
        for (uint32_t c = 0; c < n; c++) {
            uint64_t m = f->n_expert_used ? f->n_expert_used : 1;
            f->class_min[c] = m > f->class_slices[c] ? f->class_slices[c] : m;
        }
        f->n_classes = n;
        free(unit);
        free(unit_exp);
        return;
    }
    /* per layer: how many of its stacks take each class */
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!is_run_expert(t, run_end)) continue;
        long l = vt_gguf_block_of(t->name);
        int first = 1;
        for (int64_t k = 0; k < i && first; k++) {
            const vt_gguf_tensor *u = vt_gguf_tensor_at(g, k);
            first = !(is_run_expert(u, run_end) && vt_gguf_block_of(u->name) == l);
        }
        if (!first) continue; /* the layer was counted at its first stack */
        uint64_t per[VT_STORE_MAX_CLASSES] = {0};
        for (int64_t k = i; k < vt_gguf_n_tensors(g); k++) {
            const vt_gguf_tensor *u = vt_gguf_tensor_at(g, k);
            if (!is_run_expert(u, run_end) || vt_gguf_block_of(u->name) != l) continue;
            uint64_t n_exp = u->n_dims >= 3 && u->ne[2] > 0 ? (uint64_t)u->ne[2] : 1;
            uint32_t c = 0;
            while (c + 1 < n && f->class_bytes[c] < u->nbytes / n_exp) c++;
            per[c]++;
        }
        for (uint32_t c = 0; c < n; c++) {
            uint64_t m = mul_sat(per[c], f->n_expert_used ? f->n_expert_used : 1);
            if (m > f->class_slices[c]) m = f->class_slices[c];
            if (m > f->class_min[c]) f->class_min[c] = m;
        }
    }
    f->n_classes = n;
}

vt_status vt_residency_fit(vt_residency *r, const vt_gguf *g, int probe_ok, uint64_t free_bytes,
                           uint64_t total_bytes, uint32_t n_ctx, uint32_t n_batch)
{
    vt_fit *f = &r->fit;
    memset(f, 0, sizeof *f);
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
    const char *p = r->platform;

    /* tensor table */
    long max_layer = -1;
    unsigned char *seen = calloc(1, 65536);
    uint64_t n_layers_exp = 0;
    if (!seen) {
        vt_set_error("out of memory: fit check layer table (65536 bytes)");
        return VT_ERR_OUT_OF_MEMORY;
    }
    const long run_end = vt_gguf_first_unrun_block(g);
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (vt_gguf_block_of(t->name) >= run_end) { /* an MTP block: never loaded */
            f->unrun_bytes = add_sat(f->unrun_bytes, t->nbytes);
            continue;
        }
        if (!vt_gguf_is_routed_expert(t)) {
            f->dense_bytes = add_sat(f->dense_bytes, t->nbytes);
            continue;
        }
        f->expert_bytes = add_sat(f->expert_bytes, t->nbytes);
        f->n_expert_tensors++;
        uint64_t n_exp = t->n_dims >= 3 && t->ne[2] > 0 ? (uint64_t)t->ne[2] : 1;
        f->n_expert_slices = add_sat(f->n_expert_slices, n_exp);
        if (t->nbytes / n_exp > f->slot_bytes) f->slot_bytes = t->nbytes / n_exp;
        long l = vt_gguf_block_of(t->name);
        if (l >= 0 && l < 65536 && !seen[l]) {
            seen[l] = 1;
            n_layers_exp++;
            if (l > max_layer) max_layer = l;
        }
    }
    free(seen);
    if (n_layers_exp)
        f->expert_matrices = (uint32_t)((f->n_expert_tensors + n_layers_exp - 1) / n_layers_exp);
    else if (f->n_expert_tensors)
        f->expert_matrices = (uint32_t)f->n_expert_tensors;
    vt_gguf_str arch;
    if (vt_gguf_get_str(g, "general.architecture", &arch) == VT_OK) {
        char key[128];
        snprintf(key, sizeof key, "%s.expert_used_count", arch.ptr);
        if (vt_gguf_get_u32(g, key, &f->n_expert_used) != VT_OK) f->n_expert_used = 0;
    }
    if (f->n_expert_tensors && !f->n_expert_used) f->n_expert_used = 1;
    f->min_slots = (uint64_t)f->n_expert_used * f->expert_matrices;
    f->slot_unit_expert = vt_residency_slot_unit_expert(r->plat);
    if (f->slot_unit_expert && f->n_expert_tensors) {
        /* whole-expert slots: the "slices" are the layers' units */
        uint64_t *unit = calloc(65536, sizeof *unit), *unit_exp = calloc(65536, sizeof *unit_exp);
        if (!unit || !unit_exp) {
            free(unit);
            free(unit_exp);
            vt_set_error("out of memory: fit check unit table");
            return VT_ERR_OUT_OF_MEMORY;
        }
        if (layer_units(g, unit, unit_exp) && r->plat->slot_unit == VT_SLOT_UNIT_AUTO) {
            /* auto: slots of one matrix where a layer's stacks differ in expert count */
            f->slot_unit_expert = 0;
        } else {
            f->slot_bytes = 0;
            f->n_expert_slices = 0;
            for (uint32_t l = 0; l < 65536; l++) {
                if (unit[l] > f->slot_bytes) f->slot_bytes = unit[l];
                f->n_expert_slices = add_sat(f->n_expert_slices, unit_exp[l]);
            }
            f->min_slots = f->n_expert_used;
        }
        free(unit);
        free(unit_exp);
    }

    /* model-reported caches */
    const vt_model_api *mapi = r->model->desc->table;
    if (r->model->desc->abi_minor >= 1 && mapi->struct_size >= VT_MODEL_API_SIZE_1_1 &&
        mapi->memory_needs) {
        vt_model_params mp = {.struct_size = sizeof mp, .n_ctx = n_ctx, .n_batch = n_batch};
        vt_model_memory mm = {.struct_size = sizeof mm};
        vt_status st = mapi->memory_needs(vt_host_table(), g, &mp, &mm);
        if (st != VT_OK) {
            vt_error_prefix("model '%s' memory_needs", r->model->desc->name);
            return st;
        }
        f->have_model_memory = 1;
        uint64_t n_seq = r->n_seq ? r->n_seq : 1;
        f->kv_bytes = mul_sat(mul_sat(mm.kv_bytes_per_token, n_ctx), n_seq);
        f->state_bytes = mul_sat(mm.state_bytes, n_seq);
        f->scratch_bytes = mm.scratch_bytes;
    }

    /* pools */
    const char *reason = "";
    f->unified = r->plat->unified_memory ||
                 vt_caps_state(r->backend->desc, VT_CAP_HOST_ADDRESSABLE_DEVICE_MEMORY, &reason) ==
                     VT_CAP_PRESENT;
    f->device_total_known = probe_ok;
    f->device_total = probe_ok ? total_bytes : 0;
    f->device_free = probe_ok ? free_bytes : 0;
    f->host_total = host_mem_total();
    f->headroom_bytes = r->plat->headroom_bytes;
    const char *probe_reason = "";
    if (!probe_ok) vt_caps_state(r->backend->desc, VT_CAP_MEMORY_PROBE, &probe_reason);

    uint64_t base = add_sat(add_sat(f->dense_bytes, f->kv_bytes),
                            add_sat(add_sat(f->state_bytes, f->scratch_bytes), f->headroom_bytes));
    uint64_t resident_need = add_sat(base, f->expert_bytes);
    vt_experts_mode mode = f->n_expert_tensors ? r->plat->experts : VT_EXPERTS_RESIDENT;

    if (mode == VT_EXPERTS_AUTO) {
        if (!probe_ok) {
            snprintf(f->verdict, sizeof f->verdict,
                     "platform '%s' has experts: auto, which needs the device memory total, but "
                     "backend '%s' declares memory_probe ABSENT (reason: %s): the budget is unknown; "
                     "set %s.experts to resident, or to streamed with an explicit "
                     "expert_cache.arena or slots", p, r->backend->desc->name, probe_reason, p);
            f->experts = VT_EXPERTS_AUTO;
            goto refuse;
        }
        mode = resident_need <= f->device_total ? VT_EXPERTS_RESIDENT : VT_EXPERTS_STREAMED;
    }
    f->experts = mode;

    if (mode == VT_EXPERTS_RESIDENT) {
        f->device_need = resident_need;
        if (!probe_ok) {
            f->fits = 1;
            snprintf(f->verdict, sizeof f->verdict,
                     "not checked: backend '%s' declares memory_probe ABSENT (reason: %s), so the "
                     "device total is unknown; resident placement does not depend on it",
                     r->backend->desc->name, probe_reason);
            return VT_OK;
        }
        if (resident_need <= f->device_total) goto fits;
        if (f->n_expert_tensors)
            snprintf(f->verdict, sizeof f->verdict,
                     "needs %s of routed experts resident (plus %s dense, %s KV cache/state/scratch, "
                     "%s headroom: %s in all), device total is %s (backend '%s', probed at "
                     "registration); set expert_cache to stream them (--set %s.experts=streamed)",
                     fmt_bytes(f->expert_bytes, b1, sizeof b1), fmt_bytes(f->dense_bytes, b2, sizeof b2),
                     fmt_bytes(add_sat(f->kv_bytes, add_sat(f->state_bytes, f->scratch_bytes)), b3, sizeof b3),
                     fmt_bytes(f->headroom_bytes, b4, sizeof b4), fmt_bytes(resident_need, b5, sizeof b5),
                     fmt_bytes(f->device_total, b6, sizeof b6), r->backend->desc->name, p);
        else
            snprintf(f->verdict, sizeof f->verdict,
                     "needs %s (%s dense weights, %s KV cache/state/scratch, %s headroom), device "
                     "total is %s (backend '%s', probed at registration); lower --ctx or use a "
                     "smaller quantization",
                     fmt_bytes(resident_need, b5, sizeof b5), fmt_bytes(f->dense_bytes, b2, sizeof b2),
                     fmt_bytes(add_sat(f->kv_bytes, add_sat(f->state_bytes, f->scratch_bytes)), b3, sizeof b3),
                     fmt_bytes(f->headroom_bytes, b4, sizeof b4),
                     fmt_bytes(f->device_total, b6, sizeof b6), r->backend->desc->name);
        goto refuse;
    }

    /* streamed: the readers (threads that read a batch's misses at once) and,
     * under io: direct, one O_DIRECT bounce buffer of a slot rounded up to
     * 4 KiB plus a block (an upper bound: the streamer sizes them by the
     * largest matrix slice) per reader that can run */
    f->readers = r->plat->readers;
    if (!f->readers) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        f->readers = ncpu < 1 ? 1 : ncpu > 8 ? 8 : (uint32_t)ncpu;
    }
    const uint64_t bounce_one =
        r->plat->io_direct ? add_sat(f->slot_bytes, 2 * 4096 - 1) / 4096 * 4096 : 0;

    /* the arena */
    /* the store's footprint is fixed + n x per-slot (staging is fixed, the
     * arena per slot): from n = 1 and n = 2, since a store may take nothing at 0 */
    vt_store_footprint fp0, fp;
    uint64_t per_slot, per_dev; /* the arena's bytes per slot wherever it lives, in the device pool */
    vt_status st = slot_cost(r, f->slot_bytes, f->unified, &per_slot, &per_dev, &fp0);
    if (st != VT_OK) return st;
    uint64_t budget = 0; /* the arena's bytes (arena, or what auto leaves) */
    int budget_dev = 0;  /* 1: budget counts the device pool's bytes (auto) */
    if (r->plat->arena_slots) {
        f->arena_slots = r->plat->arena_slots;
    } else if (r->plat->arena_bytes) {
        budget = r->plat->arena_bytes;
        f->arena_slots = per_slot ? r->plat->arena_bytes / per_slot : 0;
    } else {
        if (!probe_ok) {
            snprintf(f->verdict, sizeof f->verdict,
                     "platform '%s' sizes the expert arena automatically, which needs the device "
                     "memory total, but backend '%s' declares memory_probe ABSENT (reason: %s): the "
                     "budget is unknown; set %s.expert_cache.arena or slots",
                     p, r->backend->desc->name, probe_reason, p);
            goto refuse;
        }
        /* one pool: the bounce buffers of every reader come out of it first
         * (whether a pool of readers runs is known only after the host tier) */
        uint64_t fixed = add_sat(base, f->unified ? add_sat(add_sat(fp0.device_bytes, fp0.host_bytes),
                                                            mul_sat(f->readers, bounce_one))
                                                  : fp0.device_bytes);
        uint64_t avail = f->device_total > fixed ? f->device_total - fixed : 0;
        budget = avail;
        budget_dev = 1;
        f->arena_slots = per_dev ? avail / per_dev : f->n_expert_slices;
    }
    if (f->arena_slots > f->n_expert_slices) f->arena_slots = f->n_expert_slices;
    f->arena_bytes = mul_sat(f->arena_slots, per_slot); /* what the store allocates for them */
    /* slot classes: the same budget in slots of each class's size, each class
     * its minimum first, then the rest in proportion to its slices beyond it */
    f->classes_note[0] = 0;
    if (r->plat->slot_classes == VT_SLOT_CLASSES_AUTO) {
        if (r->plat->arena_slots) {
            snprintf(f->classes_note, sizeof f->classes_note,
                     "none (expert_cache.slots counts slots of the largest slice)");
        } else if (r->store && r->store->desc->abi_minor < 7) {
            snprintf(f->classes_note, sizeof f->classes_note,
                     "none (store '%s' is built for ABI %u.%u; slot classes are 1.7)",
                     r->store_name, r->store->desc->abi_major, r->store->desc->abi_minor);
        } else {
            vt_residency_slot_classes(f, g);
        }
    }
    if (f->n_classes) {
        /* per_c: a slot's bytes in the store; cost: what the budget counts of them */
        uint64_t per_c[VT_STORE_MAX_CLASSES], cost[VT_STORE_MAX_CLASSES], dev_c, reserved = 0,
                                                                             rest = 0;
        for (uint32_t c = 0; c < f->n_classes; c++) {
            if ((st = slot_cost(r, f->class_bytes[c], f->unified, &per_c[c], &dev_c, NULL)) !=
                VT_OK)
                return st;
            cost[c] = budget_dev ? dev_c : per_c[c];
            reserved = add_sat(reserved, mul_sat(f->class_min[c], cost[c]));
            rest = add_sat(rest, mul_sat(f->class_slices[c] - f->class_min[c], cost[c]));
        }
        if (budget < reserved) {
            snprintf(f->verdict, sizeof f->verdict,
                     "the expert arena has %s for slots of %u sizes, but one layer's top-%u "
                     "experts need at least %s of them at once; the minimum arena is %s "
                     "(--set %s.expert_cache.arena=%" PRIu64 ")",
                     fmt_bytes(budget, b1, sizeof b1), f->n_classes, f->n_expert_used,
                     fmt_bytes(reserved, b2, sizeof b2), fmt_bytes(reserved, b3, sizeof b3), p,
                     reserved);
            f->arena_slots = 0;
            f->arena_bytes = 0;
            goto refuse;
        }
        const double frac = rest ? (double)(budget - reserved) / (double)rest : 1.0;
        f->arena_slots = 0;
        f->arena_bytes = 0;
        for (uint32_t c = 0; c < f->n_classes; c++) {
            uint64_t extra = f->class_slices[c] - f->class_min[c];
            uint64_t k = frac >= 1.0 ? extra : (uint64_t)(frac * (double)extra);
            f->class_slots[c] = f->class_min[c] + (k < extra ? k : extra);
            f->arena_slots += f->class_slots[c];
            f->arena_bytes = add_sat(f->arena_bytes, mul_sat(f->class_slots[c], per_c[c]));
        }
    }
    if ((st = store_footprint_of(r, f->slot_bytes, f->arena_slots, f, &fp)) != VT_OK) return st;
    f->staging_bytes = r->store ? fp.host_bytes : 0; /* the host store fills in place */
    if (f->unified) {
        f->device_need = add_sat(base, add_sat(fp.device_bytes, fp.host_bytes));
        f->host_need = 0;
    } else {
        f->device_need = add_sat(base, fp.device_bytes);
        f->host_need = fp.host_bytes;
    }
    /* the host tier: slots of the largest slice rounded up to 64 bytes (with
     * io: direct, to 4 KiB and one block more: every slot then starts on a
     * block in its page-aligned chunk and an O_DIRECT read of whole aligned
     * blocks lands in the slot itself, with no bounce copy). auto:
     * none under the host store (its arena is host memory already); else as
     * many slices as MemTotal leaves after the host need so far, the dense
     * weights (their mapped pages, until they are on the device) and 4 GiB,
     * at most every slice of the file */
    f->host_slot_bytes = r->plat->io_direct ? (f->slot_bytes + 4095) / 4096 * 4096 + 4096
                                            : (f->slot_bytes + 63) / 64 * 64;
    uint64_t want = r->plat->host_arena_bytes;
    if (want == VT_HOST_ARENA_AUTO) {
        want = 0;
        if (r->store && !f->unified && f->host_total) {
            uint64_t keep = add_sat(add_sat(f->host_need, f->dense_bytes), 4ull << 30);
            want = f->host_total > keep ? f->host_total - keep : 0;
        }
    }
    f->host_slots = f->host_slot_bytes ? want / f->host_slot_bytes : 0;
    if (f->host_slots > f->n_expert_slices) f->host_slots = f->n_expert_slices;
    f->host_arena_bytes = mul_sat(f->host_slots, f->host_slot_bytes);
    if (f->unified) f->device_need = add_sat(f->device_need, f->host_arena_bytes);
    else f->host_need = add_sat(f->host_need, f->host_arena_bytes);
    /* the readers, and the staging ring: without a host tier, a store plugin's
     * misses are read (by the readers at once) into ring slots sized as host
     * slots and published from there; auto: two slots per reader, so one half
     * is read while the other is copied; an explicit size takes at least 2 */
    f->ring_slots = 0;
    if (r->store && !f->host_slots && r->plat->staging_bytes) {
        uint64_t want_ring = r->plat->staging_bytes;
        f->ring_slots = want_ring == VT_STAGING_AUTO ? 2ull * f->readers
                                                     : want_ring / f->host_slot_bytes;
        if (f->ring_slots < 2) f->ring_slots = 2;
        if (f->ring_slots > f->n_expert_slices) f->ring_slots = f->n_expert_slices;
    }
    f->ring_bytes = mul_sat(f->ring_slots, f->host_slot_bytes);
    if (f->unified) f->device_need = add_sat(f->device_need, f->ring_bytes);
    else f->host_need = add_sat(f->host_need, f->ring_bytes);
    /* the streamer's rule: a pool of `readers` with a host tier and more than
     * one reader, or with the staging ring; else the acquiring thread alone */
    f->bounce_bytes = mul_sat((f->readers > 1 && f->host_slots) || f->ring_slots ? f->readers : 1,
                              bounce_one);
    if (f->unified) f->device_need = add_sat(f->device_need, f->bounce_bytes);
    else f->host_need = add_sat(f->host_need, f->bounce_bytes);
    if (f->arena_slots < f->min_slots && f->slot_unit_expert) {
        snprintf(f->verdict, sizeof f->verdict,
                 "the expert arena holds %" PRIu64 " slots of %s, but one layer's top-%u experts "
                 "need %" PRIu64 " slots (one whole expert each, %s) at once; the minimum arena "
                 "is %s (--set %s.expert_cache.slots=%" PRIu64 ")",
                 f->arena_slots, fmt_bytes(f->slot_bytes, b1, sizeof b1), f->n_expert_used,
                 f->min_slots, fmt_bytes(mul_sat(f->min_slots, f->slot_bytes), b2, sizeof b2),
                 fmt_bytes(mul_sat(f->min_slots, f->slot_bytes), b3, sizeof b3), p, f->min_slots);
        goto refuse;
    }
    if (f->arena_slots < f->min_slots) {
        snprintf(f->verdict, sizeof f->verdict,
                 "the expert arena holds %" PRIu64 " slots of %s, but one layer's top-%u experts "
                 "need %" PRIu64 " slots (%u experts × %u matrices = %s) at once; the minimum arena "
                 "is %s (--set %s.expert_cache.slots=%" PRIu64 ")",
                 f->arena_slots, fmt_bytes(f->slot_bytes, b1, sizeof b1), f->n_expert_used,
                 f->min_slots, f->n_expert_used, f->expert_matrices,
                 fmt_bytes(mul_sat(f->min_slots, f->slot_bytes), b2, sizeof b2),
                 fmt_bytes(mul_sat(f->min_slots, f->slot_bytes), b3, sizeof b3), p, f->min_slots);
        goto refuse;
    }
    if (probe_ok && f->device_need > f->device_total) {
        snprintf(f->verdict, sizeof f->verdict,
                 "needs %s with streamed experts (%s dense, %s expert arena, %s KV cache/state/"
                 "scratch, %s headroom), device total is %s (backend '%s', probed at registration); "
                 "lower the arena, --ctx or the headroom",
                 fmt_bytes(f->device_need, b1, sizeof b1), fmt_bytes(f->dense_bytes, b2, sizeof b2),
                 fmt_bytes(f->arena_bytes, b3, sizeof b3),
                 fmt_bytes(add_sat(f->kv_bytes, add_sat(f->state_bytes, f->scratch_bytes)), b4, sizeof b4),
                 fmt_bytes(f->headroom_bytes, b5, sizeof b5),
                 fmt_bytes(f->device_total, b6, sizeof b6), r->backend->desc->name);
        goto refuse;
    }
    if (f->host_need && f->host_total && f->host_need > f->host_total) {
        snprintf(f->verdict, sizeof f->verdict,
                 "needs %s of host memory for the expert store '%s' (staging/arena) and the host "
                 "tier (%s), host total is %s; lower %s.expert_cache.host_arena",
                 fmt_bytes(f->host_need, b1, sizeof b1), r->store_name,
                 fmt_bytes(f->host_arena_bytes, b3, sizeof b3),
                 fmt_bytes(f->host_total, b2, sizeof b2), p);
        goto refuse;
    }
    if (!probe_ok) {
        f->fits = 1;
        snprintf(f->verdict, sizeof f->verdict,
                 "not checked against the device: backend '%s' declares memory_probe ABSENT "
                 "(reason: %s); the explicit arena of %s does not depend on it",
                 r->backend->desc->name, probe_reason, fmt_bytes(f->arena_bytes, b1, sizeof b1));
        return VT_OK;
    }
fits:
    f->fits = 1;
    snprintf(f->verdict, sizeof f->verdict, "fits: needs %s of the device total %s (%.1f%%)%s%s",
             fmt_bytes(f->device_need, b1, sizeof b1), fmt_bytes(f->device_total, b2, sizeof b2),
             f->device_total ? 100.0 * (double)f->device_need / (double)f->device_total : 0.0,
             f->experts == VT_EXPERTS_STREAMED ? ", experts streamed through " : "",
             f->experts == VT_EXPERTS_STREAMED ? fmt_bytes(f->arena_bytes, b3, sizeof b3) : "");
    return VT_OK;
refuse:
    f->fits = 0;
    vt_set_error("%s", f->verdict);
    return VT_ERR_DOES_NOT_FIT;
}

vt_status vt_residency_probe(const vt_residency *r, int *probe_ok, uint64_t *free_bytes,
                             uint64_t *total_bytes)
{
    *probe_ok = 0;
    *free_bytes = *total_bytes = 0;
    const char *reason;
    if (vt_caps_state(r->backend->desc, VT_CAP_MEMORY_PROBE, &reason) != VT_CAP_PRESENT)
        return VT_OK;
    const vt_backend_api *api = r->backend->desc->table;
    vt_backend_params bp = {.struct_size = sizeof bp, .device = r->device, .n_threads = 1,
                            .kernels = NULL, .host = vt_host_table()};
    vt_backend_ctx *ctx = NULL;
    vt_status st = api->init(&bp, &ctx);
    if (st != VT_OK) {
        vt_error_prefix("backend '%s' init", r->backend->desc->name);
        return st;
    }
    st = api->memory_probe(ctx, free_bytes, total_bytes);
    api->shutdown(ctx);
    if (st != VT_OK) {
        vt_error_prefix("backend '%s' memory_probe", r->backend->desc->name);
        return st;
    }
    *probe_ok = 1;
    return VT_OK;
}

void vt_residency_print(const vt_residency *r, const char *model_path, uint32_t n_ctx, FILE *out)
{
    const vt_fit *f = &r->fit;
    char b[32], c[32];
    fprintf(out, "model      %s\n", model_path);
    fprintf(out, "platform   %s: backend '%s' device %d%s%s%s, model plugin '%s', experts %s",
            r->platform, r->backend->desc->name, r->device, r->device_name[0] ? " (" : "", r->device_name,
            r->device_name[0] ? ")" : "", r->model->desc->name, vt_experts_mode_name(f->experts));
    if (f->experts == VT_EXPERTS_STREAMED) fprintf(out, " (store '%s')", r->store_name);
    fprintf(out, "\n");
    fprintf(out, "memory     %s\n", f->unified ? "one pool (device memory is host memory)"
                                               : "device pool + host pool");
    fprintf(out, "%-34s %14s %22s\n", "", "bytes", "");
#define ROW(label, v) fprintf(out, "  %-32s %14s %22" PRIu64 "\n", label, fmt_bytes(v, b, sizeof b), (uint64_t)(v))
    ROW("dense weights (resident)", f->dense_bytes);
    if (f->unrun_bytes) ROW("MTP blocks (nextn, not loaded)", f->unrun_bytes);
    if (f->n_expert_tensors) {
        ROW(f->experts == VT_EXPERTS_STREAMED ? "routed experts (in the file)" : "routed experts (resident)",
            f->expert_bytes);
        fprintf(out, "  %-32s %14s %22s\n", f->slot_unit_expert ? "  one slot (largest expert)"
                                                               : "  one slot (largest slice)",
                fmt_bytes(f->slot_bytes, b, sizeof b), "");
        fprintf(out, "  %-32s %14" PRIu64 " %22s\n", f->slot_unit_expert ? "  minimum slots (top-k)"
                                                                         : "  minimum slots (top-k x matrices)",
                f->min_slots, "");
    }
    if (f->experts == VT_EXPERTS_STREAMED) {
        char label[64];
        snprintf(label, sizeof label, "expert arena (%" PRIu64 " slots)", f->arena_slots);
        ROW(label, f->arena_bytes);
        for (uint32_t c = 0; c < f->n_classes; c++) {
            char sz[32];
            snprintf(label, sizeof label, "  slots of %s", fmt_bytes(f->class_bytes[c], sz, sizeof sz));
            fprintf(out, "  %-32s %14" PRIu64 "   %.1f%% of %" PRIu64 " slices, at least %" PRIu64 "\n",
                    label, f->class_slots[c],
                    f->class_slices[c] ? 100.0 * (double)f->class_slots[c] / (double)f->class_slices[c]
                                       : 0.0,
                    f->class_slices[c], f->class_min[c]);
        }
        if (!f->n_classes && f->classes_note[0])
            fprintf(out, "  %-32s %s\n", "  slot classes", f->classes_note);
        ROW("staging", f->staging_bytes);
        snprintf(label, sizeof label, "host tier (%" PRIu64 " slots, %.1f%%)", f->host_slots,
                 f->n_expert_slices ? 100.0 * (double)f->host_slots / (double)f->n_expert_slices
                                    : 0.0);
        ROW(label, f->host_arena_bytes);
        if (f->ring_slots) {
            snprintf(label, sizeof label, "staging ring (%" PRIu64 " slots)", f->ring_slots);
            ROW(label, f->ring_bytes);
        }
        fprintf(out, "  %-32s %14u %22s\n", "file readers (threads)", f->readers, "");
        if (f->bounce_bytes) ROW("O_DIRECT bounce buffers", f->bounce_bytes);
    }
    if (f->have_model_memory) {
        char label[64];
        if (r->n_seq > 1)
            snprintf(label, sizeof label, "KV cache (%u x %u tokens)", r->n_seq, n_ctx);
        else
            snprintf(label, sizeof label, "KV cache (%u tokens)", n_ctx);
        ROW(label, f->kv_bytes);
        ROW("recurrent state", f->state_bytes);
        ROW("scratch", f->scratch_bytes);
    } else {
        fprintf(out, "  %-32s %14s\n", "KV cache/state/scratch", "(not reported by the model plugin)");
    }
    ROW("headroom", f->headroom_bytes);
    ROW("device need", f->device_need);
    if (!f->unified && f->host_need) ROW("host need", f->host_need);
    if (f->device_total_known) {
        fprintf(out, "  %-32s %14s %22" PRIu64 "   (free now: %s)\n", "device total (probed)",
                fmt_bytes(f->device_total, b, sizeof b), f->device_total,
                fmt_bytes(f->device_free, c, sizeof c));
    } else {
        fprintf(out, "  %-32s %14s\n", "device total", "unknown (memory_probe ABSENT)");
    }
    if (!f->unified) ROW("host total", f->host_total);
#undef ROW
    fprintf(out, "verdict    %s%s\n", f->fits ? "" : "DOES NOT FIT: ", f->verdict);
}

/*
 * gguf_info.c - the `vt info` report of a GGUF model (see gguf_info.h).
 *
 * One function writes the files, metadata, tensor table and totals; the CLI
 * (core/cli) only opens the model and calls it. Byte totals split dense
 * weights from routed-expert stacks (`*_exps*`, gguf.md §8.3) because that is
 * the split the expert streamer and the fit check care about. Every totals
 * line (dense, routed, all, and one per tensor type: the file's type mix)
 * ends with the effective bits per weight, 8 · bytes / elements.
 */
#include "gguf_info.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "vt/types.h"

int vt_gguf_is_routed_expert(const vt_gguf_tensor *t)
{
    return t && t->name && strstr(t->name, "_exps") != NULL && t->n_dims >= 3;
}

long vt_gguf_block_of(const char *name)
{
    if (!name || strncmp(name, "blk.", 4)) return -1;
    char *end;
    long l = strtol(name + 4, &end, 10);
    return (end != name + 4 && *end == '.' && l >= 0) ? l : -1;
}

long vt_gguf_first_unrun_block(const vt_gguf *g)
{
    vt_gguf_str arch;
    uint32_t n_block = 0, n_nextn = 0;
    char key[160];
    if (vt_gguf_get_str(g, "general.architecture", &arch) != VT_OK) return LONG_MAX;
    snprintf(key, sizeof key, "%s.nextn_predict_layers", arch.ptr);
    if (vt_gguf_get_u32(g, key, &n_nextn) != VT_OK || n_nextn == 0) return LONG_MAX;
    snprintf(key, sizeof key, "%s.block_count", arch.ptr);
    if (vt_gguf_get_u32(g, key, &n_block) != VT_OK || n_nextn >= n_block) return LONG_MAX;
    return (long)(n_block - n_nextn);
}

static uint64_t n_elements(const vt_gguf_tensor *t)
{
    return (uint64_t)t->ne[0] * (uint64_t)t->ne[1] * (uint64_t)t->ne[2] * (uint64_t)t->ne[3];
}

static void print_bytes(FILE *f, uint64_t b)
{
    fprintf(f, "%" PRIu64 " bytes", b);
    if (b >= (1u << 30)) fprintf(f, " (%.2f GiB)", (double)b / (1u << 30));
    else if (b >= (1u << 20)) fprintf(f, " (%.2f MiB)", (double)b / (1u << 20));
    else if (b >= 1024) fprintf(f, " (%.2f KiB)", (double)b / 1024);
}

static void print_ne(FILE *f, const vt_gguf_tensor *t)
{
    fputs("ne=[", f);
    uint32_t n = t->n_dims ? t->n_dims : 1;
    for (uint32_t d = 0; d < n && d < 4; d++) fprintf(f, "%s%" PRId64, d ? ", " : "", t->ne[d]);
    fputc(']', f);
}

typedef struct total {
    uint64_t tensors, elements, bytes;
} total;

static void add_total(total *a, const vt_gguf_tensor *t)
{
    a->tensors++;
    a->elements += n_elements(t);
    a->bytes += t->nbytes;
}

static void print_total(FILE *f, const char *label, const total *a, uint64_t all_bytes)
{
    fprintf(f, "%-24s %6" PRIu64 " tensors  %12" PRIu64 " elements  ", label, a->tensors,
            a->elements);
    print_bytes(f, a->bytes);
    if (all_bytes) fprintf(f, "  %.1f%%", 100.0 * (double)a->bytes / (double)all_bytes);
    /* effective bits per weight: 8 · bytes / elements (gguf.md §4: a block of
     * block_size elements takes type_size bytes, e.g. Q4_K 144·8/256 = 4.5) */
    if (a->elements) fprintf(f, "  %.4f bits/weight", 8.0 * (double)a->bytes / (double)a->elements);
    fputc('\n', f);
}

vt_status vt_gguf_print_info(const vt_gguf *g, FILE *f)
{
    if (!g || !f) {
        vt_set_error("vt_gguf_print_info: model and stream are required");
        return VT_ERR_INVALID_ARG;
    }
    uint32_t ns = vt_gguf_n_shards(g);
    int64_t nt = vt_gguf_n_tensors(g);
    fprintf(f, "GGUF v%" PRIu32 "   alignment: %" PRIu32 "   shards: %" PRIu32
               "   tensors: %" PRId64 "   metadata keys: %" PRId64 "\n",
            vt_gguf_version(g), vt_gguf_alignment(g), ns, nt, vt_gguf_n_kv(g));

    fputs("-- files --\n", f);
    for (uint32_t s = 0; s < ns; s++) {
        int64_t cnt = 0;
        for (int64_t i = 0; i < nt; i++) cnt += vt_gguf_tensor_at(g, i)->shard == s;
        fprintf(f, "shard %" PRIu32 " : %s : %" PRIu64 " bytes : data at %" PRIu64
                   " : %" PRId64 " tensors\n",
                s, vt_gguf_shard_path(g, s), vt_gguf_shard_size(g, s),
                vt_gguf_shard_data_start(g, s), cnt);
    }

    /* keys and names come from the file: control characters escaped */
    char text[1024];
    fputs("-- metadata (key : type : value) --\n", f);
    for (int64_t i = 0; i < vt_gguf_n_kv(g); i++) {
        vt_gguf_type t = vt_gguf_kv_type(g, i);
        const char *key = vt_gguf_kv_key(g, i);
        vt_text_escape(text, sizeof text, key, strlen(key));
        fprintf(f, "%s : ", text);
        if (t != VT_GGUF_ARRAY) fprintf(f, "%s : ", vt_gguf_type_name(t));
        vt_gguf_kv_print(g, i, f); /* arrays print "ARRAY[T] len=N : [...]" themselves */
        fputc('\n', f);
    }

    fputs("-- tensors: name | type | ne | n_elements | n_bytes | shard | offset --\n", f);
    total dense = {0}, routed = {0}, all = {0};
    total by_type[VT_TYPE_COUNT] = {{0}};
    for (int64_t i = 0; i < nt; i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        vt_text_escape(text, sizeof text, t->name, strlen(t->name));
        fprintf(f, "%-40s | %-5s | ", text, vt_type_name(t->type));
        print_ne(f, t);
        fprintf(f, " | %" PRIu64 " | %" PRIu64 " | %" PRIu32 " | %" PRIu64 "\n", n_elements(t),
                t->nbytes, t->shard, t->offset);
        add_total(vt_gguf_is_routed_expert(t) ? &routed : &dense, t);
        add_total(&all, t);
        if (t->type < VT_TYPE_COUNT) add_total(&by_type[t->type], t);
    }

    fputs("-- totals --\n", f);
    print_total(f, "dense", &dense, all.bytes);
    print_total(f, "routed experts (_exps)", &routed, all.bytes);
    print_total(f, "all", &all, all.bytes);
    /* one expert's share of the routed bytes: the unit the expert streamer moves */
    vt_gguf_str arch;
    uint32_t n_expert = 0;
    if (routed.tensors && vt_gguf_get_str(g, "general.architecture", &arch) == VT_OK) {
        char key[160];
        snprintf(key, sizeof key, "%s.expert_count", arch.ptr);
        if (vt_gguf_get_u32(g, key, &n_expert) == VT_OK && n_expert > 0) {
            fprintf(f, "%-24s %6" PRIu32 " experts  one expert, all layers: ", "routed experts",
                    n_expert);
            print_bytes(f, routed.bytes / n_expert);
            fputc('\n', f);
        }
    }
    vt_clear_error();
    for (uint32_t ty = 0; ty < VT_TYPE_COUNT; ty++) {
        if (!by_type[ty].tensors) continue;
        char label[40];
        snprintf(label, sizeof label, "type %s", vt_type_name(ty));
        print_total(f, label, &by_type[ty], all.bytes);
    }
    if (fflush(f) != 0 || ferror(f)) {
        vt_set_error("vt info: writing the report failed: %s", strerror(errno));
        return VT_ERR_IO;
    }
    return VT_OK;
}

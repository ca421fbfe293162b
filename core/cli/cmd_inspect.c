/*
 * cmd_inspect.c - the vt subcommands that read or write files without
 * generating text: logits (a prompt's logits to a file), tokenize, info,
 * plugins, config, fit and mkmodel. Options and shared helpers: cli.h.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "capabilities.h"
#include "cli.h"
#include "engine.h"
#include "error.h"
#include "gguf_info.h"
#include "mkmodel.h"
#include "registry.h"
#include "residency.h"
#include "tokenizer.h"

static int parse_token_list(const char *s, int32_t **out, int64_t *n)
{
    int64_t cap = 16, k = 0;
    int32_t *v = malloc((size_t)cap * sizeof *v);
    if (!v) return -1;
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "vt logits: bad token id near '%.20s'\n", p);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (size_t)(cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
    }
    *out = v;
    *n = k;
    return 0;
}

int cli_cmd_logits(const opts *o)
{
    if (!o->model || !o->tokens || !o->output) {
        fprintf(stderr, "vt logits: -m MODEL, --tokens LIST and -o FILE are required\n");
        return 2;
    }
    int32_t *toks;
    int64_t n;
    if (parse_token_list(o->tokens, &toks, &n)) return 2;
    if (n == 0) {
        fprintf(stderr, "vt logits: --tokens is empty\n");
        free(toks);
        return 2;
    }
    vt_engine *e;
    if (cli_open_engine(o, &e) != VT_OK) {
        free(toks);
        return cli_fail("logits");
    }
    vt_model_info info;
    vt_engine_model_info(e, &info);
    int rc = 1;
    float *logits = malloc((size_t)n * (size_t)info.n_vocab * sizeof *logits);
    if (!logits) {
        vt_set_error("out of memory for %lld x %lld logits", (long long)n, (long long)info.n_vocab);
    } else if (vt_engine_eval(e, toks, n, logits, 1) == VT_OK) {
        FILE *f = fopen(o->output, "wb");
        if (!f) {
            vt_set_error("cannot create %s: %s", o->output, strerror(errno));
        } else {
            size_t cnt = (size_t)n * (size_t)info.n_vocab;
            if (fwrite(logits, sizeof *logits, cnt, f) != cnt || fclose(f) != 0)
                vt_set_error("write %s failed: %s", o->output, strerror(errno));
            else
                rc = 0;
        }
    }
    if (rc) cli_fail("logits");
    free(logits);
    free(toks);
    vt_engine_close(e);
    return rc;
}

/* ------------------------------------------------------------------ tokenize */

int cli_cmd_tokenize(const opts *o)
{
    if (!o->model || !o->prompt) {
        fprintf(stderr, "vt tokenize: -m MODEL and -p TEXT are required\n");
        return 2;
    }
    vt_gguf *g;
    if (vt_gguf_open(o->model, VT_GGUF_NO_MMAP, &g) != VT_OK) return cli_fail("tokenize");
    vt_tokenizer *t;
    if (vt_tokenizer_load(g, &t) != VT_OK) {
        vt_error_prefix("%s", o->model);
        vt_gguf_close(g);
        return cli_fail("tokenize");
    }
    int32_t *ids;
    int64_t n;
    int rc = 0;
    if (vt_tokenize(t, o->prompt, strlen(o->prompt), 1, !o->no_special, &ids, &n) != VT_OK) {
        rc = cli_fail("tokenize");
    } else {
        for (int64_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        printf("\n");
        free(ids);
    }
    vt_tokenizer_free(t);
    vt_gguf_close(g);
    return rc;
}

/* ------------------------------------------------------------------ info */

int cli_cmd_info(const opts *o)
{
    if (!o->model) {
        fprintf(stderr, "vt info: -m MODEL is required\n");
        return 2;
    }
    vt_gguf *g;
    if (vt_gguf_open(o->model, VT_GGUF_NO_MMAP, &g) != VT_OK) return cli_fail("info");
    vt_status st = vt_gguf_print_info(g, stdout);
    vt_gguf_close(g);
    return st == VT_OK ? 0 : cli_fail("info");
}

/* ------------------------------------------------------------------ plugins */

static const char *kind_str(uint32_t k)
{
    return k == VT_PLUGIN_BACKEND ? "backend" : k == VT_PLUGIN_MODEL ? "model" : k == VT_PLUGIN_STORE ? "store" : "?";
}

/* One line of `vt plugins`: a backend capability and its state (arg: the descriptor). */
static void print_cap(uint32_t id, void *arg)
{
    const vt_plugin_desc *d = arg;
    const char *reason;
    char name[64];
    vt_cap_state s = vt_caps_state(d, id, &reason);
    printf("    %-34s %s%s%s\n", vt_cap_name(id, name, sizeof name),
           s == VT_CAP_PRESENT ? "PRESENT" : "ABSENT", reason && *reason ? "  " : "",
           reason ? reason : "");
}

int cli_cmd_plugins(const opts *o)
{
    const char *dirs[2] = {o->plugin_dir, NULL};
    vt_registry *r;
    if (vt_registry_open(o->plugin_dir ? dirs : NULL, &r) != VT_OK) return cli_fail("plugins");
    printf("plugin directories: %s\n", vt_registry_dirs(r));
    int any_error = 0;
    for (size_t i = 0; i < vt_registry_count(r); i++) {
        const vt_plugin_entry *e = vt_registry_at(r, i);
        if (!e->desc) {
            printf("\nREFUSED %s\n  %s\n", e->path, e->error ? e->error : "");
            any_error = 1;
            continue;
        }
        const vt_plugin_desc *d = e->desc;
        printf("\n%s '%s' %s  ABI %u.%u  priority %d%s\n  file: %s\n", kind_str(d->kind), d->name,
               d->version ? d->version : "", d->abi_major, d->abi_minor, e->priority,
               e->shadowed ? "  (shadowed)" : "", e->path);
        if (d->description) printf("  %s\n", d->description);
        if (e->manifest) printf("  manifest: %s%s%s\n", e->manifest, e->description ? "  " : "",
                                e->description ? e->description : "");
        if (d->kind == VT_PLUGIN_MODEL) {
            const vt_model_api *m = d->table;
            printf("  architectures:");
            for (size_t j = 0; m->architectures[j]; j++) printf(" %s", m->architectures[j]);
            printf("\n");
            printf("  reports cache sizes to the fit check: %s\n",
                   d->abi_minor >= 1 && m->struct_size >= VT_MODEL_API_SIZE_1_1 && m->memory_needs
                       ? "yes" : "no (weights only)");
        } else if (d->kind == VT_PLUGIN_STORE) {
            const vt_store_api *st = d->table;
            printf("  requires of its backend:");
            char name[64];
            for (uint32_t j = 0; j < st->n_required_caps; j++)
                printf(" %s", vt_cap_name(st->required_caps[j], name, sizeof name));
            printf("%s\n", st->n_required_caps ? "" : " nothing");
        } else if (d->kind == VT_PLUGIN_BACKEND) {
            const vt_backend_api *b = d->table;
            int n_dev = b->device_count();
            printf("  devices: %d\n", n_dev);
            const char *why;
            for (int j = 0; j < n_dev && j < 16; j++) {
                char dn[128] = "";
                if (vt_caps_state(d, VT_CAP_DEVICE_NAME, &why) == VT_CAP_PRESENT &&
                    b->device_name(j, dn, sizeof dn) == VT_OK)
                    printf("    %d: %s\n", j, dn);
            }
            printf("  capabilities:\n");
            vt_cap_for_each(print_cap, (void *)d);
        }
    }
    vt_registry_close(r);
    return any_error ? 1 : 0;
}

/* ------------------------------------------------------------------ config */

int cli_cmd_config(const opts *o)
{
    static vt_config cfg;
    if (cli_load_config(o, &cfg, 0) != VT_OK) return cli_fail("config");
    printf("# residency config: %s%s\n", cfg.path[0] ? cfg.path : "(built-in defaults)",
           o->n_sets ? ", with --set overrides" : "");
    vt_config_print(&cfg, stdout);
    return 0;
}

/* ------------------------------------------------------------------ fit */

int cli_cmd_fit(const opts *o)
{
    if (!o->model) {
        fprintf(stderr, "vt fit: -m MODEL is required\n");
        return 2;
    }
    static vt_config cfg;
    vt_gguf *g = NULL;
    vt_registry *reg = NULL;
    vt_residency *r = calloc(1, sizeof *r);
    int rc = 1;
    if (!r) {
        fprintf(stderr, "vt fit: out of memory (%zu bytes)\n", sizeof *r);
        return 1;
    }
    const char *dirs[2] = {o->plugin_dir, NULL};
    int probe_ok;
    uint64_t mem_free, mem_total;
    if (cli_load_config(o, &cfg, 1) != VT_OK || vt_gguf_open(o->model, VT_GGUF_NO_MMAP, &g) != VT_OK ||
        vt_registry_open(o->plugin_dir ? dirs : NULL, &reg) != VT_OK ||
        vt_residency_select(&cfg, reg, g, o->device, r) != VT_OK ||
        vt_residency_probe(r, &probe_ok, &mem_free, &mem_total) != VT_OK) {
        rc = cli_fail("fit");
        goto out;
    }
    uint32_t n_ctx = o->ctx ? o->ctx : vt_engine_default_ctx(&cfg, r->plat, g);
    r->n_seq = (uint32_t)o->parallel;
    vt_status st = vt_residency_fit(r, g, probe_ok, mem_free, mem_total, n_ctx,
                                    o->batch ? o->batch : 512);
    if (st != VT_OK && st != VT_ERR_DOES_NOT_FIT) {
        rc = cli_fail("fit");
        goto out;
    }
    vt_residency_print(r, o->model, n_ctx, stdout);
    rc = r->fit.fits ? 0 : 1;
out:
    vt_registry_close(reg);
    vt_gguf_close(g);
    free(r);
    return rc;
}

/* ------------------------------------------------------------------ mkmodel */

int cli_cmd_mkmodel(const opts *o)
{
    if (!o->output) {
        fprintf(stderr, "vt mkmodel: -o FILE is required\n");
        return 2;
    }
    const int gemma = o->mk_arch && !strcmp(o->mk_arch, "gemma4");
    if (o->mk_arch && !gemma && strcmp(o->mk_arch, "qwen35moe")) {
        fprintf(stderr, "vt mkmodel: --arch must be qwen35moe or gemma4, got '%s'\n", o->mk_arch);
        return 2;
    }
    vt_mkmodel_params p;
    (gemma ? vt_mkmodel_defaults_gemma4 : vt_mkmodel_defaults)(&p);
    /* mkmodel's messages already start with "mkmodel: " */
    if (o->have_seed) p.seed = o->sp.seed;
    cli_mk_apply_shape(o, &p);
    p.sparse = o->mk_sparse;
    if ((o->type && vt_mkmodel_set_type(&p, o->type) != VT_OK) ||
        (gemma ? vt_mkmodel_gemma4 : vt_mkmodel_qwen35moe)(o->output, &p) != VT_OK) {
        fprintf(stderr, "vt %s\n", vt_last_error());
        return 1;
    }
    fprintf(stderr, "wrote %s\n", o->output);
    return 0;
}


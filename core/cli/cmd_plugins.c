/*
 * cmd_plugins.c - vt plugins: every plugin found, its ABI, capabilities and devices.
 */
#include <stdio.h>

#include "capabilities.h"
#include "cli.h"
#include "registry.h"
#include "vt/backend.h"
#include "vt/model.h"
#include "vt/store.h"

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

static int plugins_main(const opts *o)
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

static const cli_opt_use plugins_options[] = {
    {O_PLUGIN_DIR, NULL, NULL}, {0, NULL, NULL}};

const cli_command cli_cmd_plugins = {
    "plugins", plugins_main, "[--plugin-dir DIR]",
    "list plugins and their capabilities",
    "Lists every plugin found: file, kind, name, version, ABI, manifest, shadowed or refused (with\nthe reason); for a backend its devices and every capability PRESENT/ABSENT with the reason.\n",
    plugins_options};

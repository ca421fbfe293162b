/*
 * registry.h - plugin discovery and loading (DESIGN.md "The plugin ABI").
 *
 * Search order: explicit directories (--plugin-dir), VT_PLUGIN_PATH
 * (colon-separated), <dir of the vt executable>/../lib/vt/plugins, and the
 * build tree's plugin folder. Each NAME.so is dlopen-ed and its descriptor
 * validated; a NAME.ini manifest beside it (inih) may set priority and
 * description. Refusals (wrong ABI major, too-small table, missing required
 * function, undeclared capability) are recorded with the file's path and the
 * reason and shown by `vt plugins`; they never stop other plugins loading.
 */
#ifndef VT_REGISTRY_H
#define VT_REGISTRY_H

#include <stddef.h>

#include "vt/backend.h"
#include "vt/model.h"
#include "vt/plugin.h"
#include "vt/status.h"

typedef struct vt_plugin_entry {
    char *path;          /* the .so file */
    char *manifest;      /* the .ini beside it, or NULL */
    int priority;        /* from the manifest, default 0 */
    void *handle;        /* dlopen handle; NULL when refused */
    const vt_plugin_desc *desc; /* NULL when refused */
    char *error;         /* why it was refused, or NULL */
    int shadowed;        /* another plugin of the same kind+name won */
    int conflict;        /* refused: same kind+name+priority as another file */
    uint32_t kind;       /* from the descriptor once read (0 before) */
    char name[72];       /* from the descriptor once read ("" before) */
    char *description;   /* the manifest's description, or NULL */
} vt_plugin_entry;

typedef struct vt_registry vt_registry;

/* Scan the directories (dirs: NULL-terminated, may be NULL). */
vt_status vt_registry_open(const char *const *dirs, vt_registry **out);
void vt_registry_close(vt_registry *r);

/* Load one plugin file (also used by tests). On refusal returns the status and
 * sets vt_last_error() with a message naming the file; the entry is still recorded. */
vt_status vt_registry_load_file(vt_registry *r, const char *path);

size_t vt_registry_count(const vt_registry *r);
const vt_plugin_entry *vt_registry_at(const vt_registry *r, size_t i);
/* Directories searched, for messages. */
const char *vt_registry_dirs(const vt_registry *r);

/* How many plugin files were refused (their reasons: entries' error). */
size_t vt_registry_n_refused(const vt_registry *r);

/* Why no plugin of kind and name is usable although a file provides one:
 * the refusal of such an entry (a conflict of equal priorities, a failed
 * check after its descriptor was read), or NULL. For messages. */
const char *vt_registry_refusal(const vt_registry *r, vt_plugin_kind kind, const char *name);

/* The loaded, non-shadowed plugin of kind and name, or NULL. */
const vt_plugin_entry *vt_registry_find(const vt_registry *r, vt_plugin_kind kind, const char *name);
/* The model plugin serving a `general.architecture`, or NULL. */
const vt_plugin_entry *vt_registry_find_model(const vt_registry *r, const char *arch);

/* The host table handed to plugins. */
const vt_host_api *vt_host_table(void);

/* The pinned-memory budget behind host->pinned_reserve (bytes; 0: none may be
 * pinned), what is reserved now, and how many fallbacks were noted. */
void vt_host_set_pinned_budget(uint64_t bytes);
uint64_t vt_host_pinned_used(void);
uint64_t vt_host_n_fallbacks(void);

#endif

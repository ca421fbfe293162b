/*
 * registry.c - finds, dlopen-s and validates plugins; the host table.
 *
 * What it checks before a plugin may be used (DESIGN.md "The plugin ABI"):
 *  - the entry symbol exists and returns a descriptor;
 *  - the descriptor's struct_size covers the fields of ABI 1.0, its abi_major
 *    equals the core's, its kind is known, its name is [a-z0-9_-]+;
 *  - the kind's table is at least as large as the plugin's declared ABI minor
 *    requires, and every required function is set;
 *  - a backend declares every capability its ABI minor knows, each exactly
 *    once, PRESENT with its function set or ABSENT with the function NULL and
 *    a reason. Capabilities newer than the plugin's minor read as ABSENT with
 *    the reason "plugin built for ABI x.y".
 * A refused plugin stays in the list with the reason (shown by `vt plugins`)
 * and its handle closed.
 *
 * Before any of that, before dlopen runs a line of the plugin's code (its ELF
 * constructors run inside dlopen), the place is judged (trust_file): the
 * file, found through its real path (symlinks resolved), must be a regular
 * file (checked with fstat on a descriptor opened O_NONBLOCK, so a FIFO is
 * refused by its type, never waited on), owned by root or the running user
 * and not writable by group or others; so must its manifest NAME.ini, the
 * listed directory, and every directory from / down to the file. A directory
 * writable by others with the sticky bit set (/tmp) is accepted as an
 * ancestor: its entries below are checked for their own owner, as OpenSSH's
 * path checks treat it.
 */
#include "registry.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capabilities.h"
#include "expert_streamer.h"
#include "error.h"
#include "vt/gguf.h"

struct vt_registry {
    vt_plugin_entry *items;
    size_t n, cap;
    char dirs[4096]; /* ':'-joined list of searched directories, for messages */
};

/* ---------------------------------------------------------------- host table */

static void host_log(vt_log_level level, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    vt_log(level, "%s", buf);
}

static void host_set_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vt_set_error_v(fmt, ap);
    va_end(ap);
}

/* The pinned-memory budget and the fallback counter: process-wide, like the
 * host table itself (set by the engine from the residency config). */
static _Atomic uint64_t pinned_budget, pinned_used, n_fallbacks;

void vt_host_set_pinned_budget(uint64_t bytes) { atomic_store(&pinned_budget, bytes); }
uint64_t vt_host_pinned_used(void) { return atomic_load(&pinned_used); }
uint64_t vt_host_n_fallbacks(void) { return atomic_load(&n_fallbacks); }

static int host_pinned_reserve(uint64_t bytes)
{
    uint64_t cur = atomic_load(&pinned_used);
    for (;;) {
        uint64_t budget = atomic_load(&pinned_budget);
        if (bytes > budget || cur > budget - bytes) return 0;
        if (atomic_compare_exchange_weak(&pinned_used, &cur, cur + bytes)) return 1;
    }
}

static void host_pinned_release(uint64_t bytes)
{
    uint64_t cur = atomic_load(&pinned_used);
    while (!atomic_compare_exchange_weak(&pinned_used, &cur, cur >= bytes ? cur - bytes : 0)) {
    }
}

static void host_note_fallback(const char *what)
{
    atomic_fetch_add(&n_fallbacks, 1);
    vt_log(VT_LOG_WARN, "fallback: %s", what ? what : "(unnamed)");
}

static const vt_host_api host_table = {
    .struct_size = sizeof(vt_host_api),
    .abi_major = VT_ABI_MAJOR,
    .abi_minor = VT_ABI_MINOR,
    .log = host_log,
    .set_error = host_set_error,
    .last_error = vt_last_error,
    .gguf_get_u32 = vt_gguf_get_u32,
    .gguf_get_f32 = vt_gguf_get_f32,
    .gguf_get_bool = vt_gguf_get_bool,
    .gguf_get_str = vt_gguf_get_str,
    .gguf_get_arr = vt_gguf_get_arr,
    .gguf_get_arr_i64 = vt_gguf_get_arr_i64,
    .gguf_find_tensor = vt_gguf_find_tensor,
    .gguf_n_tensors = vt_gguf_n_tensors,
    .gguf_tensor_at = vt_gguf_tensor_at,
    .experts_register = vt_streamer_register,
    .experts_acquire = vt_streamer_acquire,
    .experts_stats = vt_streamer_stats,
    .pinned_reserve = host_pinned_reserve,
    .pinned_release = host_pinned_release,
    .note_fallback = host_note_fallback,
    .experts_prefetch_on = vt_streamer_prefetch_on,
    .experts_prefetch = vt_streamer_prefetch,
    .gguf_release_pages = vt_gguf_release_pages,
};

const vt_host_api *vt_host_table(void) { return &host_table; }

/* ------------------------------------------------------------- validation */

static int valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 64) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

#define REQUIRE_FN(tab, fn)                                                                  \
    do {                                                                                     \
        if (!(tab)->fn) {                                                                    \
            snprintf(why, why_cap, "required function '" #fn "' is NULL");                  \
            return VT_ERR_ABI;                                                               \
        }                                                                                    \
    } while (0)

static vt_status check_backend(const vt_plugin_desc *d, char *why, size_t why_cap)
{
    const vt_backend_api *t = d->table;
    size_t need = vt_abi_table_size(d->kind, d->abi_minor);
    if (t->struct_size < need) {
        snprintf(why, why_cap,
                 "backend table is %u bytes, ABI %u.%u requires at least %zu",
                 t->struct_size, d->abi_major, d->abi_minor, need);
        return VT_ERR_ABI;
    }
    REQUIRE_FN(t, device_count);
    REQUIRE_FN(t, init);
    REQUIRE_FN(t, shutdown);
    REQUIRE_FN(t, alloc);
    REQUIRE_FN(t, free);
    REQUIRE_FN(t, copy_h2d);
    REQUIRE_FN(t, copy_d2h);
    REQUIRE_FN(t, copy_d2d);
    REQUIRE_FN(t, memset_zero);
    REQUIRE_FN(t, synchronize);
    return vt_caps_validate(d, why, why_cap);
}

static vt_status check_model(const vt_plugin_desc *d, char *why, size_t why_cap)
{
    const vt_model_api *t = d->table;
    size_t need = vt_abi_table_size(d->kind, d->abi_minor);
    if (t->struct_size < need) {
        snprintf(why, why_cap, "model table is %u bytes, ABI %u.%u requires at least %zu",
                 t->struct_size, d->abi_major, d->abi_minor, need);
        return VT_ERR_ABI;
    }
    REQUIRE_FN(t, architectures);
    REQUIRE_FN(t, required_caps);
    REQUIRE_FN(t, load);
    REQUIRE_FN(t, free);
    REQUIRE_FN(t, info);
    REQUIRE_FN(t, seq_new);
    REQUIRE_FN(t, seq_free);
    REQUIRE_FN(t, seq_reset);
    REQUIRE_FN(t, seq_pos);
    REQUIRE_FN(t, forward);
    for (size_t i = 0; t->architectures[i]; i++)
        if (i > 64 || !valid_name(t->architectures[i])) {
            snprintf(why, why_cap, "architecture list entry %zu is not a valid name", i);
            return VT_ERR_ABI;
        }
    return VT_OK;
}

static vt_status check_store(const vt_plugin_desc *d, char *why, size_t why_cap)
{
    const vt_store_api *t = d->table;
    size_t need = vt_abi_table_size(d->kind, d->abi_minor);
    if (!need) {
        snprintf(why, why_cap, "store plugins need ABI 1.1 or later; plugin built for ABI %u.%u",
                 d->abi_major, d->abi_minor);
        return VT_ERR_ABI;
    }
    if (t->struct_size < need) {
        snprintf(why, why_cap, "store table is %u bytes, ABI %u.%u requires at least %zu",
                 t->struct_size, d->abi_major, d->abi_minor, need);
        return VT_ERR_ABI;
    }
    REQUIRE_FN(t, footprint);
    REQUIRE_FN(t, create);
    REQUIRE_FN(t, destroy);
    REQUIRE_FN(t, slot_for_write);
    REQUIRE_FN(t, commit_slot);
    REQUIRE_FN(t, slot_for_read);
    if (d->abi_minor >= 4 && !t->publish != !t->quiesce) {
        snprintf(why, why_cap, "publish and quiesce (ABI 1.4) must be given together or not at "
                 "all (%s is NULL)", t->publish ? "quiesce" : "publish");
        return VT_ERR_ABI;
    }
    if (d->abi_minor >= 5 && !(!t->begin_ahead == !t->publish_ahead && !t->publish_ahead == !t->join_ahead &&
                               (!t->publish_ahead || t->publish))) {
        snprintf(why, why_cap, "begin_ahead, publish_ahead and join_ahead (ABI 1.5) must be given "
                 "together, and with publish, or not at all");
        return VT_ERR_ABI;
    }
    if (t->n_required_caps && !t->required_caps) {
        snprintf(why, why_cap, "required_caps is NULL but n_required_caps = %u", t->n_required_caps);
        return VT_ERR_ABI;
    }
    if (t->n_required_caps > VT_CAP_ID_LIMIT) {
        snprintf(why, why_cap, "required_caps lists %u capabilities, more than the ABI knows",
                 t->n_required_caps);
        return VT_ERR_ABI;
    }
    for (uint32_t i = 0; i < t->n_required_caps; i++)
        if (!vt_cap_known(t->required_caps[i], NULL)) {
            snprintf(why, why_cap, "required capability #%u (id %u) is unknown to this vt",
                     i, t->required_caps[i]);
            return VT_ERR_ABI;
        }
    return VT_OK;
}

static vt_status check_desc(const vt_plugin_desc *d, char *why, size_t why_cap)
{
    if (!d) {
        snprintf(why, why_cap, "%s() returned NULL", VT_PLUGIN_ENTRY_SYMBOL);
        return VT_ERR_ABI;
    }
    /* struct_size, abi_major and abi_minor are the fixed prefix of every major */
    if (d->abi_major != VT_ABI_MAJOR) {
        snprintf(why, why_cap, "plugin built for ABI %u.%u, this vt has ABI %d.%d (major differs)",
                 d->abi_major, d->abi_minor, VT_ABI_MAJOR, VT_ABI_MINOR);
        return VT_ERR_ABI;
    }
    if (d->struct_size < VT_PLUGIN_DESC_SIZE_1_0) {
        snprintf(why, why_cap, "descriptor is %u bytes, ABI 1.0 requires %zu", d->struct_size,
                 (size_t)VT_PLUGIN_DESC_SIZE_1_0);
        return VT_ERR_ABI;
    }
    if (!valid_name(d->name)) {
        snprintf(why, why_cap, "plugin name is missing or not [a-z0-9_-]+");
        return VT_ERR_ABI;
    }
    if (!d->table || *(const uint32_t *)d->table < sizeof(uint32_t)) {
        snprintf(why, why_cap, "plugin '%s' has no function table", d->name);
        return VT_ERR_ABI;
    }
    switch (d->kind) {
    case VT_PLUGIN_BACKEND: return check_backend(d, why, why_cap);
    case VT_PLUGIN_MODEL: return check_model(d, why, why_cap);
    case VT_PLUGIN_STORE: return check_store(d, why, why_cap);
    default:
        snprintf(why, why_cap, "unknown plugin kind %u", d->kind);
        return VT_ERR_ABI;
    }
}

/* ------------------------------------------------------------- manifests */

typedef struct manifest {
    int priority;
    int has_plugin_section;
    char kind[32], name[72], file[256], description[256];
    char bad[160]; /* the first invalid entry, for the message */
} manifest;

static int manifest_handler(void *user, const char *section, const char *key, const char *value)
{
    manifest *m = user;
    if (strcmp(section, "plugin")) return 1; /* other sections are for other tools */
    m->has_plugin_section = 1;
    if (!strcmp(key, "priority")) {
        char *end;
        errno = 0;
        long v = strtol(value, &end, 10);
        if (errno || end == value || *end || v < -1000000 || v > 1000000) {
            snprintf(m->bad, sizeof m->bad, "priority must be an integer in [-1000000, 1000000], got '%s'", value);
            return 0;
        }
        m->priority = (int)v;
    } else if (!strcmp(key, "kind")) {
        snprintf(m->kind, sizeof m->kind, "%s", value);
    } else if (!strcmp(key, "name")) {
        snprintf(m->name, sizeof m->name, "%s", value);
    } else if (!strcmp(key, "file")) {
        snprintf(m->file, sizeof m->file, "%s", value);
    } else if (!strcmp(key, "description")) {
        snprintf(m->description, sizeof m->description, "%s", value);
    } else {
        snprintf(m->bad, sizeof m->bad, "unknown key '%s' in [plugin]", key);
        return 0;
    }
    return 1;
}

static const char *kind_name(uint32_t k)
{
    switch (k) {
    case VT_PLUGIN_BACKEND: return "backend";
    case VT_PLUGIN_MODEL: return "model";
    case VT_PLUGIN_STORE: return "store";
    }
    return "?";
}

/* ------------------------------------------------------------- loading */

static vt_plugin_entry *push_entry(vt_registry *r, const char *path)
{
    if (r->n == r->cap) {
        size_t nc = r->cap ? r->cap * 2 : 16;
        vt_plugin_entry *ni = vt_reallocarray_named(r->items, nc, sizeof *ni, "plugin table");
        if (!ni) return NULL;
        r->items = ni;
        r->cap = nc;
    }
    vt_plugin_entry *e = &r->items[r->n];
    memset(e, 0, sizeof *e);
    if (!(e->path = vt_strdup_named(path, "plugin path"))) return NULL;
    r->n++;
    return e;
}

static void refuse(vt_plugin_entry *e, const char *why)
{
    size_t n = strlen(e->path) + strlen(why) + 32;
    free(e->error);
    e->error = vt_malloc_named(n, "plugin refusal message");
    if (e->error) snprintf(e->error, n, "plugin %s refused: %s", e->path, why);
    else vt_log(VT_LOG_WARN, "plugin %s: %s", e->path, vt_last_error());
    vt_set_error("plugin %s refused: %s", e->path, why);
    vt_log(VT_LOG_WARN, "plugin %s refused: %s", e->path, why);
    if (e->handle) dlclose(e->handle);
    e->handle = NULL;
    e->desc = NULL;
}

/*
 * Resolve plugins of equal kind+name (DESIGN.md): the higher priority wins and
 * the others are shadowed; equal priorities at the top are an error naming
 * the files, and stay an error when yet another copy with that priority
 * appears (entries refused for a conflict keep their kind, name, priority).
 */
static void resolve_shadowing(vt_registry *r, vt_plugin_entry *e)
{
    for (size_t i = 0; i < r->n; i++) {
        vt_plugin_entry *o = &r->items[i];
        if (o == e || !o->name[0] || o->kind != e->kind || strcmp(o->name, e->name)) continue;
        if (!o->desc && !o->conflict) continue; /* refused for another reason */
        if (e->priority < o->priority) {
            e->shadowed = 1;
        } else if (e->priority > o->priority) {
            o->shadowed = 1;
        } else if (!o->shadowed || o->conflict) {
            char why[1024];
            snprintf(why, sizeof why, "%s plugin '%s' also provided by %s with the same priority %d "
                     "(set a different priority in a manifest)", kind_name(e->kind), e->name,
                     o->path, e->priority);
            refuse(e, why);
            e->conflict = 1;
            if (o->desc) {
                snprintf(why, sizeof why, "%s plugin '%s' also provided by %s with the same priority %d "
                         "(set a different priority in a manifest)", kind_name(o->kind), o->name,
                         e->path, o->priority);
                refuse(o, why);
                o->conflict = 1;
            }
            return;
        }
    }
}

/* ------------------------------------------------------------- trust */

/* 0 when the entry at path (st) may hold plugin code or a manifest: owned by
 * root or the running user and not writable by group or others, except an
 * ancestor directory with the sticky bit; else 1 with why. */
static int untrusted(const char *path, const struct stat *st, int ancestor, char *why, size_t cap)
{
    const uid_t me = geteuid();
    if (st->st_uid != 0 && st->st_uid != me) {
        snprintf(why, cap, "%s is owned by uid %u, neither root nor the running user (uid %u)",
                 path, (unsigned)st->st_uid, (unsigned)me);
        return 1;
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) &&
        !(ancestor && S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX))) {
        snprintf(why, cap, "%s is writable by group or others (mode %04o)", path,
                 (unsigned)(st->st_mode & 07777));
        return 1;
    }
    return 0;
}

/* Every directory from / down to the one holding real (an absolute path,
 * symlinks resolved). */
static int untrusted_ancestors(const char *real, char *why, size_t cap)
{
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", real);
    for (;;) {
        char *slash = strrchr(p, '/');
        if (!slash) return 0;
        if (slash == p) p[1] = '\0';
        else *slash = '\0';
        struct stat st;
        if (stat(p, &st) != 0) {
            snprintf(why, cap, "cannot check directory %s: %s", p, strerror(errno));
            return 1;
        }
        if (untrusted(p, &st, 1, why, cap)) return 1;
        if (slash == p) return 0;
    }
}

/* Open path for reading without waiting (O_NONBLOCK: a FIFO would block),
 * refuse what is not a regular file by its type, or is untrusted; returns
 * the descriptor (>= 0), or -1 with why; -2 when path does not exist and
 * missing_ok. */
static int open_trusted(const char *path, int missing_ok, char *why, size_t cap)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (missing_ok && errno == ENOENT) return -2;
        snprintf(why, cap, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, cap, "cannot check %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, cap, "%s is %s, not a regular file", path, vt_file_type_name(st.st_mode));
        close(fd);
        return -1;
    }
    if (untrusted(path, &st, 0, why, cap)) {
        close(fd);
        return -1;
    }
    return fd;
}

vt_status vt_registry_load_file(vt_registry *r, const char *path)
{
    char real[PATH_MAX];
    if (!realpath(path, real)) snprintf(real, sizeof real, "%s", path);
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->items[i].path, real)) return r->items[i].error ? VT_ERR_ABI : VT_OK;

    vt_plugin_entry *e = push_entry(r, real);
    if (!e) {
        vt_error_prefix("recording plugin %s", path);
        return VT_ERR_OUT_OF_MEMORY;
    }
    char why[1024];
    manifest man = {0};

    /* the place first: nothing of the plugin runs before it is trusted */
    int so_fd = open_trusted(real, 0, why, sizeof why);
    if (so_fd < 0 || untrusted_ancestors(real, why, sizeof why)) {
        if (so_fd >= 0) close(so_fd);
        refuse(e, why);
        return VT_ERR_IO;
    }
    close(so_fd);

    /* manifest NAME.ini beside NAME.so */
    size_t len = strlen(real);
    if (len > 3 && !strcmp(real + len - 3, ".so")) {
        char ini[PATH_MAX];
        snprintf(ini, sizeof ini, "%.*s.ini", (int)(len - 3), real);
        int ini_fd = open_trusted(ini, 1, why, sizeof why);
        if (ini_fd == -1) {
            refuse(e, why);
            return VT_ERR_IO;
        }
        FILE *inf = ini_fd >= 0 ? fdopen(ini_fd, "r") : NULL;
        if (ini_fd >= 0 && !inf) {
            snprintf(why, sizeof why, "cannot read manifest %s: %s", ini, strerror(errno));
            close(ini_fd);
            refuse(e, why);
            return VT_ERR_IO;
        }
        if (inf) {
            int rc = ini_parse_file(inf, manifest_handler, &man);
            fclose(inf);
            if (rc != 0) {
                snprintf(why, sizeof why, "manifest %s: line %d: %s", ini, rc,
                         man.bad[0] ? man.bad : "not valid INI");
                refuse(e, why);
                return VT_ERR_FORMAT;
            }
            if (!man.has_plugin_section) {
                snprintf(why, sizeof why, "manifest %s has no [plugin] section", ini);
                refuse(e, why);
                return VT_ERR_FORMAT;
            }
            const char *base = strrchr(real, '/') ? strrchr(real, '/') + 1 : real;
            if (man.file[0] && strcmp(man.file, base)) {
                snprintf(why, sizeof why, "manifest %s names file '%s', not '%s'", ini, man.file, base);
                refuse(e, why);
                return VT_ERR_FORMAT;
            }
            if (!(e->manifest = vt_strdup_named(ini, "plugin manifest path")))
                vt_log(VT_LOG_WARN, "plugin %s: %s", real, vt_last_error());
            e->priority = man.priority;
            if (man.description[0] &&
                !(e->description = vt_strdup_named(man.description, "plugin description")))
                vt_log(VT_LOG_WARN, "plugin %s: %s", real, vt_last_error());
        }
    }
    e->handle = dlopen(real, RTLD_NOW | RTLD_LOCAL);
    if (!e->handle) {
        snprintf(why, sizeof why, "dlopen failed: %s", dlerror());
        refuse(e, why);
        return VT_ERR_IO;
    }
    vt_plugin_entry_fn entry;
    *(void **)&entry = dlsym(e->handle, VT_PLUGIN_ENTRY_SYMBOL);
    if (!entry) {
        snprintf(why, sizeof why, "no '%s' symbol (not a vt plugin)", VT_PLUGIN_ENTRY_SYMBOL);
        refuse(e, why);
        return VT_ERR_ABI;
    }
    const vt_plugin_desc *d = entry();
    vt_status st = check_desc(d, why, sizeof why);
    if (st != VT_OK) {
        refuse(e, why);
        return st;
    }
    if ((man.kind[0] && strcmp(man.kind, kind_name(d->kind))) || (man.name[0] && strcmp(man.name, d->name))) {
        snprintf(why, sizeof why, "manifest %s says %s '%s' but the plugin is %s '%s'", e->manifest,
                 man.kind[0] ? man.kind : kind_name(d->kind), man.name[0] ? man.name : d->name,
                 kind_name(d->kind), d->name);
        refuse(e, why);
        return VT_ERR_ABI;
    }
    e->desc = d;
    e->kind = d->kind;
    snprintf(e->name, sizeof e->name, "%s", d->name);
    resolve_shadowing(r, e);
    if (!e->desc) return VT_ERR_ABI;
    vt_log(VT_LOG_DEBUG, "loaded %s plugin '%s' %s from %s", kind_name(d->kind), d->name,
           d->version ? d->version : "", real);
    return VT_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void append_dir_note(vt_registry *r, const char *dir)
{
    size_t used = strlen(r->dirs);
    snprintf(r->dirs + used, sizeof r->dirs - used, "%s%s", used ? ":" : "", dir);
}

static void scan_dir(vt_registry *r, const char *dir, char seen[][PATH_MAX], size_t *n_seen,
                     int explicit)
{
    char real[PATH_MAX];
    if (!realpath(dir, real)) { /* a missing default directory is normal; a named one is not */
        if (explicit) vt_log(VT_LOG_WARN, "plugin directory %s: %s", dir, strerror(errno));
        return;
    }
    for (size_t i = 0; i < *n_seen; i++)
        if (!strcmp(seen[i], real)) return;
    if (*n_seen < 16) snprintf(seen[(*n_seen)++], PATH_MAX, "%s", real);
    append_dir_note(r, real);

    struct stat st;
    if (stat(real, &st) != 0 || !S_ISDIR(st.st_mode)) return;
    char why[1024];
    if (untrusted(real, &st, 0, why, sizeof why) || untrusted_ancestors(real, why, sizeof why)) {
        vt_plugin_entry *e = push_entry(r, real);
        char msg[1100];
        snprintf(msg, sizeof msg, "plugin directory not trusted: %s; refusing to load from it", why);
        if (e) refuse(e, msg);
        return;
    }
    DIR *dh = opendir(real);
    if (!dh) return;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(dh))) {
        size_t l = strlen(de->d_name);
        if (l < 4 || strcmp(de->d_name + l - 3, ".so")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = vt_reallocarray_named(names, cap, sizeof *nn, "plugin directory listing");
            if (!nn) {
                vt_log(VT_LOG_WARN, "plugin directory %s: %s", real, vt_last_error());
                break;
            }
            names = nn;
        }
        if (!(names[n] = vt_strdup_named(de->d_name, "plugin file name"))) {
            vt_log(VT_LOG_WARN, "plugin directory %s: %s", real, vt_last_error());
            break;
        }
        n++;
    }
    closedir(dh);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", real, names[i]);
        (void)vt_registry_load_file(r, p);
        free(names[i]);
    }
    free(names);
}

vt_status vt_registry_open(const char *const *dirs, vt_registry **out)
{
    vt_registry *r = vt_calloc_named(1, sizeof *r, "plugin registry");
    if (!r) return VT_ERR_OUT_OF_MEMORY;
    /* directories already scanned */
    char (*seen)[PATH_MAX] = vt_calloc_named(16, PATH_MAX, "plugin registry: scanned directories");
    size_t n_seen = 0;
    if (!seen) {
        free(r);
        return VT_ERR_OUT_OF_MEMORY;
    }
    for (size_t i = 0; dirs && dirs[i]; i++) scan_dir(r, dirs[i], seen, &n_seen, 1);

    const char *env = getenv("VT_PLUGIN_PATH");
    if (env && *env) {
        char *copy = vt_strdup_named(env, "VT_PLUGIN_PATH copy"), *save = NULL;
        if (!copy) vt_log(VT_LOG_WARN, "VT_PLUGIN_PATH is ignored: %s", vt_last_error());
        for (char *tok = copy ? strtok_r(copy, ":", &save) : NULL; tok; tok = strtok_r(NULL, ":", &save))
            scan_dir(r, tok, seen, &n_seen, 1);
        free(copy);
    }
    /* relative to the executable: <bindir>/VT_PLUGIN_REL_DIR, where the install
     * puts them (../lib/vt/plugins, or ../lib/<multiarch>/vt/plugins for a
     * GNUInstallDirs libdir such as Debian's), then <bindir>/../lib/vt/plugins
     * (the build tree's layout) */
    char exe[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            char p[PATH_MAX + 64];
#ifdef VT_PLUGIN_REL_DIR
            snprintf(p, sizeof p, "%s/%s", exe, VT_PLUGIN_REL_DIR);
            scan_dir(r, p, seen, &n_seen, 0);
#endif
            snprintf(p, sizeof p, "%s/../lib/vt/plugins", exe);
            scan_dir(r, p, seen, &n_seen, 0);
        }
    }
#ifdef VT_BUILD_PLUGIN_DIR
    /* when vt runs from its build tree (the test binaries live beside it) */
    if (l > 0 && !strncmp(exe, VT_BUILD_PLUGIN_DIR, strlen(VT_BUILD_PLUGIN_DIR) - strlen("/lib/vt/plugins")))
        scan_dir(r, VT_BUILD_PLUGIN_DIR, seen, &n_seen, 0);
#endif
    free(seen);
    *out = r;
    return VT_OK;
}

void vt_registry_close(vt_registry *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        vt_plugin_entry *e = &r->items[i];
        if (e->handle) dlclose(e->handle);
        free(e->path);
        free(e->manifest);
        free(e->error);
        free(e->description);
    }
    free(r->items);
    free(r);
}

size_t vt_registry_count(const vt_registry *r) { return r->n; }
const vt_plugin_entry *vt_registry_at(const vt_registry *r, size_t i) { return i < r->n ? &r->items[i] : NULL; }
const char *vt_registry_dirs(const vt_registry *r) { return r->dirs[0] ? r->dirs : "(none)"; }

size_t vt_registry_n_refused(const vt_registry *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++) n += r->items[i].error != NULL;
    return n;
}

const char *vt_registry_refusal(const vt_registry *r, vt_plugin_kind kind, const char *name)
{
    for (size_t i = 0; i < r->n; i++) {
        const vt_plugin_entry *e = &r->items[i];
        if (e->error && e->kind == (uint32_t)kind && !strcmp(e->name, name)) return e->error;
    }
    return NULL;
}

const vt_plugin_entry *vt_registry_find(const vt_registry *r, vt_plugin_kind kind, const char *name)
{
    for (size_t i = 0; i < r->n; i++) {
        const vt_plugin_entry *e = &r->items[i];
        if (e->desc && !e->shadowed && e->desc->kind == (uint32_t)kind && !strcmp(e->desc->name, name))
            return e;
    }
    return NULL;
}

const vt_plugin_entry *vt_registry_find_model(const vt_registry *r, const char *arch)
{
    for (size_t i = 0; i < r->n; i++) {
        const vt_plugin_entry *e = &r->items[i];
        if (!e->desc || e->shadowed || e->desc->kind != VT_PLUGIN_MODEL) continue;
        const vt_model_api *m = e->desc->table;
        for (size_t j = 0; m->architectures[j]; j++)
            if (!strcmp(m->architectures[j], arch)) return e;
    }
    return NULL;
}

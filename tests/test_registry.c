/*
 * test_registry.c - what the plugin registry accepts and refuses: a wrong ABI
 * major, a too-small table, undeclared/inconsistent capabilities (each refused
 * with the plugin's file named), group-writable directories, duplicate names
 * (priority wins; equal priority is an error naming both files), and
 * capability lookups of a good plugin.
 */
#include "test_util.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "capabilities.h"
#include "error.h"
#include "registry.h"

static char *fake_path(const char *variant)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s/backend-fake.so", VT_FAKE_PLUGIN_ROOT, variant);
    return buf;
}

static vt_registry *empty_registry(void)
{
    const char *dirs[] = {"/nonexistent-vt-dir", NULL};
    vt_registry *r;
    unsetenv("VT_PLUGIN_PATH");
    assert_int_equal(vt_registry_open(dirs, &r), VT_OK);
    /* the exe-relative scan may find the real build plugins; that is fine */
    return r;
}

static void expect_refused(const char *variant, const char *needle)
{
    vt_registry *r = empty_registry();
    const char *path = fake_path(variant);
    vt_status st = vt_registry_load_file(r, path);
    assert_int_not_equal(st, VT_OK);
    const char *msg = vt_last_error();
    if (!strstr(msg, "backend-fake.so") || !strstr(msg, variant))
        fail_msg("refusal does not name the file: %s", msg);
    if (!strstr(msg, needle)) fail_msg("refusal of %s lacks '%s': %s", variant, needle, msg);
    assert_null(vt_registry_find(r, VT_PLUGIN_BACKEND, "fake"));
    vt_registry_close(r);
}

static void test_wrong_abi_major(void **s)
{
    (void)s;
    expect_refused("abi2", "ABI 2.");
}

static void test_small_table(void **s)
{
    (void)s;
    expect_refused("small", "table is 64 bytes");
}

static void test_undeclared_capability(void **s)
{
    (void)s;
    expect_refused("undeclared", "'memory_probe' is not declared");
}

static void test_present_with_null(void **s)
{
    (void)s;
    expect_refused("present_null", "'memory_probe' declared PRESENT but its function is NULL");
}

static void test_absent_with_function(void **s)
{
    (void)s;
    expect_refused("absent_set", "'op.rms_norm' declared ABSENT but its function is set");
}

/* ABI 1.9's weight types past the per-type tables: PRESENT needs mat_mul_ext. */
static void test_ext_type_present_with_null(void **s)
{
    (void)s;
    expect_refused("ext_null", "'mat_mul.IQ1_XS' declared PRESENT but its function is NULL");
}

/* The same types on a plugin that declares them PRESENT with the function:
 * found through vt_backend_mat_mul_fn, named by their capability ids. */
static void test_ext_type_lookup(void **s)
{
    (void)s;
    vt_registry *r = empty_registry();
    if (vt_registry_load_file(r, fake_path("allops")) != VT_OK)
        fail_msg("allops plugin refused: %s", vt_last_error());
    const vt_plugin_entry *e = vt_registry_find(r, VT_PLUGIN_BACKEND, "fake");
    assert_non_null(e);
    const vt_backend_api *api = e->desc->table;
    const char *reason;
    for (uint32_t t = VT_TYPE_IQ1_XS; t <= VT_TYPE_IQ1_XXXS; t++) {
        assert_true(VT_CAP_MAT_MUL(t) >= VT_CAP_TYPE_EXT_BASE);
        assert_int_equal(VT_CAP_GET_ROWS(t), VT_CAP_MAT_MUL(t) + 1);
        assert_int_equal(vt_caps_state(e->desc, VT_CAP_MAT_MUL(t), &reason), VT_CAP_PRESENT);
        assert_ptr_equal(vt_backend_mat_mul_fn(api, t), api->mat_mul_ext);
        assert_ptr_equal(vt_backend_get_rows_fn(api, t), api->get_rows_ext);
    }
    assert_null(vt_backend_mat_mul_fn(api, VT_TYPE_COUNT)); /* an id no one declares */
    char name[64];
    assert_string_equal(vt_cap_name(VT_CAP_GET_ROWS(VT_TYPE_IQ1_XXXS), name, sizeof name),
                        "get_rows.IQ1_XXXS");
    assert_false(vt_cap_known(VT_CAP_MAT_MUL(VT_TYPE_COUNT), NULL));
    vt_registry_close(r);
}

/* A plugin built for ABI 1.0 loads on this 1.1 core; the capability 1.1 added
 * (device_name) reads ABSENT with the reason the design fixes, and the 1.0
 * ones read as declared. */
static void test_older_minor_loads(void **s)
{
    (void)s;
    vt_registry *r = empty_registry();
    if (vt_registry_load_file(r, fake_path("minor0")) != VT_OK)
        fail_msg("ABI 1.0 plugin refused: %s", vt_last_error());
    const vt_plugin_entry *e = vt_registry_find(r, VT_PLUGIN_BACKEND, "fake");
    assert_non_null(e);
    assert_int_equal(e->desc->abi_minor, 0);
    const char *reason;
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_DEVICE_NAME, &reason), VT_CAP_ABSENT);
    assert_string_equal(reason, "plugin built for ABI 1.0");
    /* and so do the fused MoE ops of 1.2 */
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_OP_MOE_ROUTE, &reason), VT_CAP_ABSENT);
    assert_string_equal(reason, "plugin built for ABI 1.0");
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_OP_MOE_FFN, &reason), VT_CAP_ABSENT);
    assert_string_equal(reason, "plugin built for ABI 1.0");
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_GRAPH, &reason), VT_CAP_ABSENT);
    assert_string_equal(reason, "plugin built for ABI 1.0");
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_MEMORY_PROBE, &reason), VT_CAP_PRESENT);
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_OP_RMS_NORM, &reason), VT_CAP_ABSENT);
    assert_string_equal(reason, "fake backend computes nothing");
    /* the 1.9 weight types read ABSENT, and the model-side lookup finds none */
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_MAT_MUL(VT_TYPE_IQ1_XXXS), &reason),
                     VT_CAP_ABSENT);
    assert_string_equal(reason, "plugin built for ABI 1.0");
    assert_null(vt_backend_mat_mul_fn(e->desc->table, VT_TYPE_IQ1_XXXS));
    vt_registry_close(r);
    /* the same table claiming minor 1 is too small for it */
    assert_true(vt_abi_table_size(VT_PLUGIN_BACKEND, 1) > vt_abi_table_size(VT_PLUGIN_BACKEND, 0));
    assert_true(vt_abi_table_size(VT_PLUGIN_BACKEND, 2) > vt_abi_table_size(VT_PLUGIN_BACKEND, 1));
}

/* Store plugins: a complete one loads and lists its requirement; one without
 * commit_slot (required of every store) is refused naming file and function. */
static void test_store_plugins(void **s)
{
    (void)s;
    vt_registry *r = empty_registry();
    char path[4096];
    snprintf(path, sizeof path, "%s/store/store-devfake.so", VT_FAKE_PLUGIN_ROOT);
    if (vt_registry_load_file(r, path) != VT_OK) fail_msg("store refused: %s", vt_last_error());
    const vt_plugin_entry *e = vt_registry_find(r, VT_PLUGIN_STORE, "devfake");
    assert_non_null(e);
    const vt_store_api *t = e->desc->table;
    assert_int_equal(t->n_required_caps, 1);
    assert_int_equal(t->required_caps[0], VT_CAP_MEMORY_PROBE);
    vt_registry_close(r);

    r = empty_registry();
    snprintf(path, sizeof path, "%s/store_nocommit/store-devfake.so", VT_FAKE_PLUGIN_ROOT);
    assert_int_not_equal(vt_registry_load_file(r, path), VT_OK);
    const char *msg = vt_last_error();
    if (!strstr(msg, "store_nocommit/store-devfake.so") ||
        !strstr(msg, "required function 'commit_slot' is NULL"))
        fail_msg("refusal does not name file and function: %s", msg);
    assert_null(vt_registry_find(r, VT_PLUGIN_STORE, "devfake"));
    vt_registry_close(r);
}

static void test_good_plugin_and_caps(void **s)
{
    (void)s;
    vt_registry *r = empty_registry();
    assert_int_equal(vt_registry_load_file(r, fake_path("good")), VT_OK);
    const vt_plugin_entry *e = vt_registry_find(r, VT_PLUGIN_BACKEND, "fake");
    assert_non_null(e);
    const char *reason;
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_MEMORY_PROBE, &reason), VT_CAP_PRESENT);
    assert_int_equal(vt_caps_state(e->desc, VT_CAP_MAT_MUL(VT_TYPE_Q8_0), &reason), VT_CAP_ABSENT);
    assert_string_equal(reason, "fake backend computes nothing");
    char name[64];
    assert_string_equal(vt_cap_name(VT_CAP_MAT_MUL(VT_TYPE_Q8_0), name, sizeof name), "mat_mul.Q8_0");
    vt_registry_close(r);
}

/* Copy a plugin file into dir (with an optional manifest). */
static void install_copy(const char *src, const char *dir, const char *name, int priority)
{
    char dst[4096], cmd[9000];
    snprintf(dst, sizeof dst, "%s/%s.so", dir, name);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", src, dst);
    assert_int_equal(system(cmd), 0);
    if (priority != INT32_MIN) {
        snprintf(dst, sizeof dst, "%s/%s.ini", dir, name);
        FILE *f = fopen(dst, "w");
        assert_non_null(f);
        fprintf(f, "[plugin]\nkind = backend\nname = fake\nfile = %s.so\npriority = %d\n", name, priority);
        fclose(f);
    }
}

static void test_priority_and_duplicates(void **s)
{
    (void)s;
    char d1[] = "/tmp/vt-reg-XXXXXX", d2[] = "/tmp/vt-reg-XXXXXX";
    assert_non_null(mkdtemp(d1));
    assert_non_null(mkdtemp(d2));
    install_copy(fake_path("good"), d1, "backend-fake", 5);
    install_copy(fake_path("good"), d2, "backend-fake", 1);
    const char *dirs[] = {d1, d2, NULL};
    vt_registry *r;
    assert_int_equal(vt_registry_open(dirs, &r), VT_OK);
    const vt_plugin_entry *e = vt_registry_find(r, VT_PLUGIN_BACKEND, "fake");
    assert_non_null(e);
    assert_non_null(strstr(e->path, d1));
    int shadowed = 0;
    for (size_t i = 0; i < vt_registry_count(r); i++)
        if (vt_registry_at(r, i)->shadowed) shadowed++;
    assert_int_equal(shadowed, 1);
    vt_registry_close(r);

    /* equal priority: both refused, each naming the other file */
    install_copy(fake_path("good"), d2, "backend-fake", 5);
    assert_int_equal(vt_registry_open(dirs, &r), VT_OK);
    assert_null(vt_registry_find(r, VT_PLUGIN_BACKEND, "fake"));
    int refused = 0;
    for (size_t i = 0; i < vt_registry_count(r); i++) {
        const vt_plugin_entry *x = vt_registry_at(r, i);
        if (x->error && strstr(x->error, "same priority")) {
            refused++;
            assert_non_null(strstr(x->error, d1));
            assert_non_null(strstr(x->error, d2));
        }
    }
    assert_int_equal(refused, 2);
    vt_registry_close(r);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", d1, d2);
    assert_int_equal(system(cmd), 0);
}

static void test_three_equal_priorities(void **s)
{
    (void)s;
    char d[3][32];
    const char *dirs[4];
    for (int i = 0; i < 3; i++) {
        snprintf(d[i], sizeof d[i], "/tmp/vt-reg-XXXXXX");
        assert_non_null(mkdtemp(d[i]));
        install_copy(fake_path("good"), d[i], "backend-fake", INT32_MIN); /* no manifest: priority 0 */
        dirs[i] = d[i];
    }
    dirs[3] = NULL;
    vt_registry *r;
    assert_int_equal(vt_registry_open(dirs, &r), VT_OK);
    /* none of the three may win silently */
    assert_null(vt_registry_find(r, VT_PLUGIN_BACKEND, "fake"));
    int refused = 0;
    for (size_t i = 0; i < vt_registry_count(r); i++) {
        const vt_plugin_entry *x = vt_registry_at(r, i);
        if (x->error && strstr(x->error, "same priority")) refused++;
    }
    assert_int_equal(refused, 3);
    vt_registry_close(r);
    for (int i = 0; i < 3; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", d[i]);
        assert_int_equal(system(cmd), 0);
    }
}

static void write_manifest(const char *dir, const char *body)
{
    char p[256];
    snprintf(p, sizeof p, "%s/backend-fake.ini", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(body, f);
    fclose(f);
}

static void test_manifest_checks(void **s)
{
    (void)s;
    char d[] = "/tmp/vt-reg-XXXXXX";
    assert_non_null(mkdtemp(d));
    install_copy(fake_path("good"), d, "backend-fake", INT32_MIN);
    char so[256];
    snprintf(so, sizeof so, "%s/backend-fake.so", d);
    static const struct {
        const char *ini, *needle;
    } cases[] = {
        {"[plugin]\nkind = model\nname = fake\n", "says model 'fake' but the plugin is backend 'fake'"},
        {"[plugin]\nkind = backend\nname = gpu\n", "says backend 'gpu' but the plugin is backend 'fake'"},
        {"[plugin]\nfile = other.so\n", "names file 'other.so', not 'backend-fake.so'"},
        {"[plugin]\npriority = abc\n", "line 2: priority must be an integer"},
        {"[plugin]\nprioritty = 3\n", "unknown key 'prioritty'"},
        {"[other]\npriority = 3\n", "has no [plugin] section"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_manifest(d, cases[i].ini);
        vt_registry *r = empty_registry();
        assert_int_not_equal(vt_registry_load_file(r, so), VT_OK);
        if (!strstr(vt_last_error(), cases[i].needle) || !strstr(vt_last_error(), d))
            fail_msg("manifest case %zu: expected '%s' in: %s", i, cases[i].needle, vt_last_error());
        vt_registry_close(r);
    }
    /* a good manifest with a description */
    write_manifest(d, "[plugin]\nkind = backend\nname = fake\nfile = backend-fake.so\npriority = 3\n"
                      "description = test backend\n");
    vt_registry *r = empty_registry();
    assert_int_equal(vt_registry_load_file(r, so), VT_OK);
    const vt_plugin_entry *e = vt_registry_find(r, VT_PLUGIN_BACKEND, "fake");
    assert_non_null(e);
    assert_int_equal(e->priority, 3);
    assert_string_equal(e->description, "test backend");
    vt_registry_close(r);
    /* a plugin file others can write is refused even in a safe directory */
    assert_int_equal(chmod(so, 0666), 0);
    r = empty_registry();
    assert_int_not_equal(vt_registry_load_file(r, so), VT_OK);
    assert_non_null(strstr(vt_last_error(), "backend-fake.so is writable by group or others"));
    vt_registry_close(r);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
}

static void test_group_writable_dir_refused(void **s)
{
    (void)s;
    char d[] = "/tmp/vt-reg-XXXXXX";
    assert_non_null(mkdtemp(d));
    install_copy(fake_path("good"), d, "backend-fake", INT32_MIN);
    assert_int_equal(chmod(d, 0775), 0);
    const char *dirs[] = {d, NULL};
    vt_registry *r;
    assert_int_equal(vt_registry_open(dirs, &r), VT_OK);
    assert_null(vt_registry_find(r, VT_PLUGIN_BACKEND, "fake"));
    int named = 0;
    for (size_t i = 0; i < vt_registry_count(r); i++) {
        const vt_plugin_entry *x = vt_registry_at(r, i);
        if (x->error && strstr(x->error, d) && strstr(x->error, "writable")) named = 1;
    }
    assert_true(named);
    vt_registry_close(r);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
}

static void test_not_a_plugin(void **s)
{
    (void)s;
    char d[] = "/tmp/vt-reg-XXXXXX";
    assert_non_null(mkdtemp(d));
    char p[256];
    snprintf(p, sizeof p, "%s/backend-junk.so", d);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("not an ELF file", f);
    fclose(f);
    vt_registry *r = empty_registry();
    assert_int_not_equal(vt_registry_load_file(r, p), VT_OK);
    assert_non_null(strstr(vt_last_error(), "backend-junk.so"));
    vt_registry_close(r);
    unlink(p);
    rmdir(d);
}


/* ------------------------------------------------- plugin trust (issue 17) */

static void rm_rf(const char *d)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", d, d);
    assert_int_equal(system(cmd), 0);
}

/* load path in a fresh registry: refused, the message holding every needle */
static void expect_load_refused(const char *path, const char *n1, const char *n2)
{
    vt_registry *r = empty_registry();
    vt_clear_error();
    assert_int_not_equal(vt_registry_load_file(r, path), VT_OK);
    const char *m = vt_last_error();
    if (!strstr(m, n1) || (n2 && !strstr(m, n2)))
        fail_msg("refusal of %s lacks '%s'%s%s: %s", path, n1, n2 ? " / " : "", n2 ? n2 : "", m);
    assert_null(vt_registry_find(r, VT_PLUGIN_BACKEND, "fake"));
    vt_registry_close(r);
}

/* The trust decision comes before dlopen: a plugin in a directory others can
 * write (here 0777) is refused without its constructor running; a symlink
 * in a safe directory to such a file is judged by the file's real place; a
 * safe directory inside a parent others can write is refused; a sticky
 * parent (as /tmp, where all of these live) is fine. */
static void test_trust_real_path_and_ancestors(void **s)
{
    (void)s;
    char base[] = "/tmp/vt-trust-XXXXXX";
    assert_non_null(mkdtemp(base));
    char open_dir[300], safe[300], inner[300], mark[300], so[400], link[400];
    snprintf(open_dir, sizeof open_dir, "%s/open", base);
    snprintf(safe, sizeof safe, "%s/safe", base);
    snprintf(mark, sizeof mark, "%s/ctor-ran", base);
    assert_int_equal(mkdir(open_dir, 0755), 0);
    assert_int_equal(mkdir(safe, 0755), 0);
    install_copy(fake_path("ctor7"), open_dir, "backend-fake", INT32_MIN);
    assert_int_equal(chmod(open_dir, 0777), 0);
    setenv("VT_FAKE_CTOR_MARK", mark, 1);
    snprintf(so, sizeof so, "%s/backend-fake.so", open_dir);
    expect_load_refused(so, open_dir, "writable by group or others");
    if (access(mark, F_OK) == 0) fail_msg("the constructor of %s ran before it was refused", so);
    /* through a symlink in a 0755 directory */
    snprintf(link, sizeof link, "%s/backend-fake.so", safe);
    assert_int_equal(symlink(so, link), 0);
    expect_load_refused(link, open_dir, "writable by group or others");
    if (access(mark, F_OK) == 0) fail_msg("the constructor of %s ran through %s", so, link);
    /* a 0755 plugin directory inside the 0777 one */
    snprintf(inner, sizeof inner, "%s/inner", open_dir);
    assert_int_equal(mkdir(inner, 0755), 0);
    install_copy(fake_path("good"), inner, "backend-fake", INT32_MIN);
    snprintf(so, sizeof so, "%s/backend-fake.so", inner);
    expect_load_refused(so, open_dir, "writable by group or others");
    /* the same plugin in a 0755 directory under sticky /tmp: loads; the
     * ABI-7 one in a trusted place is refused for its ABI (its constructor
     * runs: dlopen cannot load without it, which is why the place is checked) */
    char ok_so[400];
    install_copy(fake_path("good"), safe, "backend-good", INT32_MIN);
    snprintf(ok_so, sizeof ok_so, "%s/backend-good.so", safe);
    vt_registry *r = empty_registry();
    if (vt_registry_load_file(r, ok_so) != VT_OK) fail_msg("a plugin in %s was refused: %s", safe, vt_last_error());
    vt_registry_close(r);
    unsetenv("VT_FAKE_CTOR_MARK");
    rm_rf(base);
}

/* A manifest others can write is refused (its priority would shadow the
 * installed plugin); so is a file or directory owned by another user (root
 * only: chown needs it). */
static void test_trust_manifest_and_owner(void **s)
{
    (void)s;
    char d[] = "/tmp/vt-trust-XXXXXX";
    assert_non_null(mkdtemp(d));
    install_copy(fake_path("good"), d, "backend-fake", 9);
    char so[300], ini[300];
    snprintf(so, sizeof so, "%s/backend-fake.so", d);
    snprintf(ini, sizeof ini, "%s/backend-fake.ini", d);
    assert_int_equal(chmod(ini, 0666), 0);
    expect_load_refused(so, ini, "writable by group or others");
    assert_int_equal(chmod(ini, 0644), 0);
    vt_registry *r = empty_registry();
    assert_int_equal(vt_registry_load_file(r, so), VT_OK);
    vt_registry_close(r);
    if (geteuid() == 0) {
        assert_int_equal(chown(so, 65534, 65534), 0);
        expect_load_refused(so, so, "owned by uid 65534");
        assert_int_equal(chown(so, 0, 0), 0);
        assert_int_equal(chown(ini, 65534, 65534), 0);
        expect_load_refused(so, ini, "owned by uid 65534");
        assert_int_equal(chown(ini, 0, 0), 0);
        assert_int_equal(chown(d, 65534, 65534), 0);
        expect_load_refused(so, d, "owned by uid 65534");
        const char *dirs[] = {d, NULL};
        assert_int_equal(vt_registry_open(dirs, &r), VT_OK);
        assert_null(vt_registry_find(r, VT_PLUGIN_BACKEND, "fake"));
        vt_registry_close(r);
        assert_int_equal(chown(d, 0, 0), 0);
    } else {
        fprintf(stderr, "  (not root: the other-owner cases need chown and are skipped)\n");
    }
    rm_rf(d);
}

/* A FIFO named like a plugin, or as a manifest, is refused by its type and
 * never waited on (opening a FIFO for reading blocks until a writer comes). */
static void test_fifo_plugin_refused(void **s)
{
    (void)s;
    char d[] = "/tmp/vt-trust-XXXXXX";
    assert_non_null(mkdtemp(d));
    char f[300];
    snprintf(f, sizeof f, "%s/backend-fifo.so", d);
    assert_int_equal(mkfifo(f, 0644), 0);
    vt_test_no_wait_begin("test_registry: a FIFO plugin or manifest");
    vt_registry *r = empty_registry();
    vt_clear_error();
    assert_int_not_equal(vt_registry_load_file(r, f), VT_OK);
    if (!strstr(vt_last_error(), f) || !strstr(vt_last_error(), "not a regular file"))
        fail_msg("FIFO plugin: %s", vt_last_error());
    vt_registry_close(r);
    /* a FIFO manifest beside a real plugin */
    install_copy(fake_path("good"), d, "backend-fake", INT32_MIN);
    char ini[300], so[300];
    snprintf(ini, sizeof ini, "%s/backend-fake.ini", d);
    snprintf(so, sizeof so, "%s/backend-fake.so", d);
    assert_int_equal(mkfifo(ini, 0644), 0);
    expect_load_refused(so, ini, "not a regular file");
    /* and the directory scan meets both */
    const char *dirs[] = {d, NULL};
    assert_int_equal(vt_registry_open(dirs, &r), VT_OK);
    assert_null(vt_registry_find(r, VT_PLUGIN_BACKEND, "fake"));
    vt_registry_close(r);
    vt_test_no_wait_end();
    rm_rf(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrong_abi_major),
        cmocka_unit_test(test_small_table),
        cmocka_unit_test(test_undeclared_capability),
        cmocka_unit_test(test_present_with_null),
        cmocka_unit_test(test_absent_with_function),
        cmocka_unit_test(test_ext_type_present_with_null),
        cmocka_unit_test(test_ext_type_lookup),
        cmocka_unit_test(test_good_plugin_and_caps),
        cmocka_unit_test(test_older_minor_loads),
        cmocka_unit_test(test_store_plugins),
        cmocka_unit_test(test_priority_and_duplicates),
        cmocka_unit_test(test_three_equal_priorities),
        cmocka_unit_test(test_manifest_checks),
        cmocka_unit_test(test_group_writable_dir_refused),
        cmocka_unit_test(test_not_a_plugin),
        cmocka_unit_test(test_trust_real_path_and_ancestors),
        cmocka_unit_test(test_trust_manifest_and_owner),
        cmocka_unit_test(test_fifo_plugin_refused),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}

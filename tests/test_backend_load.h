/*
 * test_backend_load.h - a backend plugin of the build's plugin folder opened
 * with dlopen by name ("cpu", "cuda"), its descriptor checked (a backend, of
 * that name), for the suites that drive a backend's table directly
 * (test_cuda_ops, test_moe_ops). Include after test_util.h.
 */
#ifndef VT_TEST_BACKEND_LOAD_H
#define VT_TEST_BACKEND_LOAD_H

#include <dlfcn.h>
#include <stdio.h>

#include "vt/backend.h"
#include "vt/plugin.h"

static inline const vt_plugin_desc *vt_test_load_backend(const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/backend-%s.so", vt_test_plugin_dir(), name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) fail_msg("dlopen %s: %s", path, dlerror());
    vt_plugin_entry_fn entry = (vt_plugin_entry_fn)dlsym(h, VT_PLUGIN_ENTRY_SYMBOL);
    assert_non_null(entry);
    const vt_plugin_desc *d = entry();
    assert_non_null(d);
    assert_int_equal(d->kind, VT_PLUGIN_BACKEND);
    assert_string_equal(d->name, name);
    return d;
}

#endif

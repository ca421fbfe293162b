/*
 * serve_json.c - counting allocation hooks for cJSON (serve_json.h).
 */
#include "serve_json.h"

#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static _Thread_local unsigned long tl_failures;
static atomic_long g_fail_after = -1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void *json_alloc(size_t n)
{
    long k = atomic_load(&g_fail_after);
    while (k >= 0) { /* an armed test fault: count down, fail at 0 */
        if (atomic_compare_exchange_weak(&g_fail_after, &k, k - 1)) {
            if (k == 0) {
                tl_failures++;
                return NULL;
            }
            break;
        }
    }
    void *p = malloc(n);
    if (!p) tl_failures++;
    return p;
}

static void json_free(void *p) { free(p); }

static void install(void)
{
    cJSON_Hooks h = {.malloc_fn = json_alloc, .free_fn = json_free};
    cJSON_InitHooks(&h);
}

void vt_serve_json_init(void) { pthread_once(&g_once, install); }

unsigned long vt_serve_json_failures(void) { return tl_failures; }

long vt_serve_json_fail_after(long n) { return atomic_exchange(&g_fail_after, n < 0 ? -1 : n); }

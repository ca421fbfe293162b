/*
 * gguf_guard.c - the SIGBUS report over the mappings of vt_gguf_open
 * (declared in gguf_guard.h): a table of the mapped shards, kept by
 * gguf_reader.c through vt_gguf_guard_add / vt_gguf_guard_remove, and the
 * handler that names the file, the byte offset and the tensor of a fault.
 */
#include "gguf_guard.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define GUARD_SLOTS 256
typedef struct guard_slot {
    const uint8_t *volatile base; /* NULL: free */
    uint64_t size;
    const vt_gguf *g;
    uint32_t shard;
    char path[480];
} guard_slot;
static guard_slot guard_slots[GUARD_SLOTS];
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;

void vt_gguf_guard_add(const void *base, uint64_t size, const vt_gguf *g, uint32_t shard,
                       const char *path)
{
    pthread_mutex_lock(&guard_mu);
    for (int i = 0; i < GUARD_SLOTS; i++) {
        guard_slot *k = &guard_slots[i];
        if (k->base) continue;
        k->size = size;
        k->g = g;
        k->shard = shard;
        snprintf(k->path, sizeof k->path, "%s", path);
        __atomic_store_n(&k->base, (const uint8_t *)base, __ATOMIC_RELEASE);
        break; /* a full table only loses the report's details */
    }
    pthread_mutex_unlock(&guard_mu);
}

void vt_gguf_guard_remove(const void *base)
{
    pthread_mutex_lock(&guard_mu);
    for (int i = 0; i < GUARD_SLOTS; i++)
        if (guard_slots[i].base == base) __atomic_store_n(&guard_slots[i].base, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&guard_mu);
}

static void guard_put(const char *s)
{
    size_t n = 0;
    while (s[n]) n++;
    if (write(2, s, n) < 0) _exit(1);
}

static void guard_put_u64(uint64_t v)
{
    char b[24];
    int i = 23;
    b[i] = 0;
    do {
        b[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i > 0);
    guard_put(b + i);
}

static void guard_handler(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    const uint8_t *a = (const uint8_t *)si->si_addr;
    for (int i = 0; i < GUARD_SLOTS; i++) {
        const guard_slot *k = &guard_slots[i];
        const uint8_t *base = __atomic_load_n(&k->base, __ATOMIC_ACQUIRE);
        if (!base || a < base || a >= base + k->size) continue;
        uint64_t off = (uint64_t)(a - base);
        guard_put("vt: ");
        guard_put(k->path);
        guard_put(": the model file changed while it was in use (truncated or overwritten in "
                  "place): reading byte ");
        guard_put_u64(off);
        const vt_gguf_tensor *hit = NULL;
        for (int64_t t = 0; k->g && t < vt_gguf_n_tensors(k->g); t++) {
            const vt_gguf_tensor *x = vt_gguf_tensor_at(k->g, t);
            if (x && x->shard == k->shard && off >= x->file_offset && off < x->file_offset + x->nbytes) {
                hit = x;
                break;
            }
        }
        if (hit && hit->name) {
            guard_put(" (tensor '");
            guard_put(hit->name);
            guard_put("')");
        }
        guard_put(" faulted (SIGBUS); stopping\n");
        _exit(1);
    }
    /* not a model mapping: the default action */
    signal(sig, SIG_DFL);
    raise(sig);
}

void vt_gguf_sigbus_report_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = guard_handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGBUS, &sa, NULL);
}

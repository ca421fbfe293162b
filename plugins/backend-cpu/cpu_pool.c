/*
 * cpu_pool.c - the thread pool that runs one op's slices on every core.
 *
 * One job at a time, submitted by the context's thread (the "caller", thread
 * index 0), which works on the job too and returns when every task is done.
 * Workers claim tasks one by one from a single 64-bit word that packs the
 * job's generation, the next task index and the task count:
 *
 *   claim = gen << 42 | n_tasks << 21 | next
 *
 * A worker claims task `next` with a compare-and-swap that also checks the
 * generation, so a worker that wakes late and still holds an older job's
 * function pointer can never run it against the new job: its CAS fails. The
 * job's function and argument are written before the claim word is published
 * (release) and are rewritten only after every task of the job has finished,
 * which needs every claimed task to complete, so a successful CAS proves the
 * function and argument read before it belong to that generation.
 *
 * Waiting: workers spin (pause) for up to VT_CPU_POOL_SPIN_NS after their
 * last job, then sleep on a condition variable. The caller wakes sleepers only
 * when some are asleep (a seq_cst store of the claim word and a seq_cst load
 * of the sleeper count, paired with the workers' increment-then-recheck under
 * the mutex, so no wake-up is lost). Per-op overhead while workers spin is a
 * few hundred nanoseconds; the caller never waits for a worker that has no
 * task.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define VT_CPU_POOL_SPIN_NS 2000000 /* 2 ms of spinning before a worker sleeps */

#define IDX_BITS 21
#define IDX_MASK ((UINT64_C(1) << IDX_BITS) - 1)
#define GEN_SHIFT (2 * IDX_BITS)

static inline uint64_t claim_pack(uint64_t gen, uint64_t n, uint64_t next)
{
    return gen << GEN_SHIFT | n << IDX_BITS | next;
}
static inline uint64_t claim_gen(uint64_t c) { return c >> GEN_SHIFT; }
static inline uint64_t claim_n(uint64_t c) { return (c >> IDX_BITS) & IDX_MASK; }
static inline uint64_t claim_next(uint64_t c) { return c & IDX_MASK; }

struct vt_cpu_pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    struct worker_arg *args;
    _Atomic uint64_t claim;
    _Atomic(vt_cpu_task_fn) fn;
    _Atomic(void *) arg;
    _Atomic int64_t n_done;
    _Atomic int n_sleeping;
    _Atomic int stop;
    uint64_t gen; /* caller only */
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

struct worker_arg {
    vt_cpu_pool *pool;
    int index;
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Claim and run tasks of generation gen until none is left; returns tasks run. */
static int64_t run_tasks(vt_cpu_pool *p, uint64_t gen, int thread)
{
    vt_cpu_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
    int64_t ran = 0;
    uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
    for (;;) {
        if (claim_gen(c) != gen || claim_next(c) >= claim_n(c)) break;
        if (atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            fn(arg, (int64_t)claim_next(c), thread);
            ran++;
            c = atomic_load_explicit(&p->claim, memory_order_acquire);
        }
    }
    return ran;
}

static void *worker_main(void *varg)
{
    struct worker_arg *wa = varg;
    vt_cpu_pool *p = wa->pool;
    uint64_t seen = claim_gen(atomic_load(&p->claim));
    for (;;) {
        uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
        if (claim_gen(c) == seen && !atomic_load_explicit(&p->stop, memory_order_relaxed)) {
            uint64_t t0 = now_ns();
            for (unsigned spins = 1;; spins++) {
                cpu_relax();
                c = atomic_load_explicit(&p->claim, memory_order_acquire);
                if (claim_gen(c) != seen || atomic_load_explicit(&p->stop, memory_order_relaxed))
                    break;
                if ((spins & 255u) == 0 && now_ns() - t0 > VT_CPU_POOL_SPIN_NS) {
                    pthread_mutex_lock(&p->mu);
                    atomic_fetch_add(&p->n_sleeping, 1);
                    while (claim_gen(c = atomic_load(&p->claim)) == seen && !atomic_load(&p->stop))
                        pthread_cond_wait(&p->cv, &p->mu);
                    atomic_fetch_sub(&p->n_sleeping, 1);
                    pthread_mutex_unlock(&p->mu);
                    break;
                }
            }
        }
        if (atomic_load(&p->stop)) break;
        seen = claim_gen(c);
        int64_t ran = run_tasks(p, seen, wa->index);
        if (ran) atomic_fetch_add_explicit(&p->n_done, ran, memory_order_release);
    }
    return NULL;
}

int vt_cpu_online_cores(void)
{
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

vt_status vt_cpu_pool_create(int n_threads, vt_cpu_pool **out)
{
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    vt_cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return VT_ERR_OUT_OF_MEMORY;
    p->n_threads = n_threads;
    atomic_init(&p->claim, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads, sizeof *p->threads);
        p->args = calloc((size_t)n_threads, sizeof *p->args);
        if (!p->threads || !p->args) {
            vt_cpu_pool_destroy(p);
            return VT_ERR_OUT_OF_MEMORY;
        }
        for (int i = 1; i < n_threads; i++) {
            p->args[i].pool = p;
            p->args[i].index = i;
            if (pthread_create(&p->threads[i], NULL, worker_main, &p->args[i]) != 0) {
                p->n_threads = i; /* join the ones that started */
                vt_cpu_pool_destroy(p);
                return VT_ERR_INTERNAL;
            }
        }
    }
    *out = p;
    return VT_OK;
}

void vt_cpu_pool_destroy(vt_cpu_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads && p->threads; i++) pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->args);
    free(p);
}

int vt_cpu_pool_threads(const vt_cpu_pool *p) { return p ? p->n_threads : 1; }

void vt_cpu_pool_run(vt_cpu_pool *p, vt_cpu_task_fn fn, void *arg, int64_t n_tasks)
{
    if (n_tasks <= 0) return;
    if (!p || p->n_threads == 1 || n_tasks == 1 || n_tasks > VT_CPU_POOL_MAX_TASKS) {
        for (int64_t i = 0; i < n_tasks; i++) fn(arg, i, 0);
        return;
    }
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->n_done, 0, memory_order_relaxed);
    p->gen = (p->gen + 1) & ((UINT64_C(1) << (64 - GEN_SHIFT)) - 1);
    atomic_store(&p->claim, claim_pack(p->gen, (uint64_t)n_tasks, 0)); /* seq_cst publish */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    int64_t mine = run_tasks(p, p->gen, 0);
    unsigned spins = 0;
    while (mine + atomic_load_explicit(&p->n_done, memory_order_acquire) < n_tasks) {
        cpu_relax();
        if ((++spins & 4095u) == 0) sched_yield(); /* a worker holding a task was descheduled */
    }
}

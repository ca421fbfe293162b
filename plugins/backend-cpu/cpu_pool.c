/*
 * cpu_pool.c - the thread pool that runs one op's slices on every core.
 *
 * One job at a time, submitted by the context's thread (the "caller", thread
 * index 0), which works on the job too and returns when every task is done.
 *
 * Claiming: the job's tasks are cut into one contiguous range per thread
 * (task i in range i·n_threads/n_tasks), so an op of the same shape gives the
 * same rows to the same thread call after call and its weights stay in that
 * core's cache. A thread runs the tasks of its own range first, then steals
 * from the others' ranges, so a slow or descheduled thread delays nobody.
 * Each range is one 64-bit word on its own cache line:
 *
 *   range = gen << 42 | end << 21 | next
 *
 * A task is claimed with a compare-and-swap that also checks the generation:
 * a worker that wakes late still holding an older job's function pointer
 * fails its CAS and never runs it against the new job. The job's function
 * and argument are written before the range words and the generation are
 * published (release) and are rewritten only after every task of the job has
 * finished, so a successful CAS proves that the function and argument read
 * before it belong to that generation.
 *
 * Waiting: workers spin (pause) for up to VT_CPU_POOL_SPIN_NS after their
 * last job, then sleep on a condition variable. The caller wakes sleepers only
 * when some are asleep (a seq_cst store of the generation and a seq_cst load
 * of the sleeper count, paired with the workers' increment-then-recheck under
 * the mutex, so no wake-up is lost). While workers spin, one pool round trip
 * costs well under a microsecond; the caller never waits for a worker that
 * holds no task.
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

static inline uint64_t range_pack(uint64_t gen, uint64_t end, uint64_t next)
{
    return gen << GEN_SHIFT | end << IDX_BITS | next;
}
static inline uint64_t range_gen(uint64_t c) { return c >> GEN_SHIFT; }
static inline uint64_t range_end(uint64_t c) { return (c >> IDX_BITS) & IDX_MASK; }
static inline uint64_t range_next(uint64_t c) { return c & IDX_MASK; }
#define GEN_MASK ((UINT64_C(1) << (64 - GEN_SHIFT)) - 1)

struct range {
    _Atomic uint64_t w;
    char pad[64 - sizeof(uint64_t)];
};

struct vt_cpu_pool {
    int n_threads; /* including the caller */
    pthread_t *threads;
    struct worker_arg *args;
    struct range *ranges; /* n_threads, cache-line aligned */
    _Atomic uint64_t gen; /* published generation */
    _Atomic(vt_cpu_task_fn) fn;
    _Atomic(void *) arg;
    _Atomic int64_t n_done;
    _Atomic int n_sleeping;
    _Atomic int stop;
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

/* Claim and run tasks of generation gen, own range first, then the others';
 * returns the number of tasks run. */
static int64_t run_tasks(vt_cpu_pool *p, uint64_t gen, int thread)
{
    vt_cpu_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
    void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
    int64_t ran = 0;
    for (int k = 0; k < p->n_threads; k++) {
        int r = thread + k < p->n_threads ? thread + k : thread + k - p->n_threads;
        _Atomic uint64_t *w = &p->ranges[r].w;
        uint64_t c = atomic_load_explicit(w, memory_order_acquire);
        while (range_gen(c) == gen && range_next(c) < range_end(c)) {
            if (atomic_compare_exchange_weak_explicit(w, &c, c + 1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                fn(arg, (int64_t)range_next(c), thread);
                ran++;
                c = atomic_load_explicit(w, memory_order_acquire);
            }
        }
    }
    return ran;
}

static void *worker_main(void *varg)
{
    struct worker_arg *wa = varg;
    vt_cpu_pool *p = wa->pool;
    uint64_t seen = atomic_load(&p->gen), g = seen;
    for (;;) {
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g == seen && !atomic_load_explicit(&p->stop, memory_order_relaxed)) {
            uint64_t t0 = now_ns();
            for (unsigned spins = 1;; spins++) {
                cpu_relax();
                g = atomic_load_explicit(&p->gen, memory_order_acquire);
                if (g != seen || atomic_load_explicit(&p->stop, memory_order_relaxed)) break;
                if ((spins & 255u) == 0 && now_ns() - t0 > VT_CPU_POOL_SPIN_NS) {
                    pthread_mutex_lock(&p->mu);
                    atomic_fetch_add(&p->n_sleeping, 1);
                    while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                        pthread_cond_wait(&p->cv, &p->mu);
                    atomic_fetch_sub(&p->n_sleeping, 1);
                    pthread_mutex_unlock(&p->mu);
                    break;
                }
            }
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
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

vt_status vt_cpu_pool_create(const vt_backend_ctx *ctx, int n_threads, vt_cpu_pool **out)
{
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    vt_cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return vt_cpu_fail_oom(ctx, sizeof *p, "the thread pool");
    p->n_threads = n_threads;
    atomic_init(&p->gen, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    atomic_init(&p->n_done, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->stop, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (posix_memalign((void **)&p->ranges, 64, sizeof(struct range) * (size_t)n_threads) != 0) {
        p->ranges = NULL;
        p->n_threads = 1;
        vt_cpu_pool_destroy(p);
        return vt_cpu_fail_oom(ctx, sizeof(struct range) * (size_t)n_threads,
                               "the work ranges of %d pool threads", n_threads);
    }
    for (int i = 0; i < n_threads; i++) atomic_init(&p->ranges[i].w, 0);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads, sizeof *p->threads);
        p->args = calloc((size_t)n_threads, sizeof *p->args);
        if (!p->threads || !p->args) {
            size_t bytes = (size_t)n_threads * (p->threads ? sizeof *p->args : sizeof *p->threads);
            const char *which = p->threads ? "arguments" : "handles";
            vt_cpu_pool_destroy(p);
            return vt_cpu_fail_oom(ctx, bytes, "the %s of %d pool threads", which, n_threads);
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
    free(p->ranges);
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
    uint64_t gen = (atomic_load_explicit(&p->gen, memory_order_relaxed) + 1) & GEN_MASK;
    const int nt = p->n_threads;
    for (int r = 0; r < nt; r++) {
        uint64_t b = (uint64_t)((int64_t)r * n_tasks / nt), e = (uint64_t)((int64_t)(r + 1) * n_tasks / nt);
        atomic_store_explicit(&p->ranges[r].w, range_pack(gen, e, b), memory_order_release);
    }
    atomic_store(&p->gen, gen); /* seq_cst publish */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    int64_t mine = run_tasks(p, gen, 0);
    unsigned spins = 0;
    while (mine + atomic_load_explicit(&p->n_done, memory_order_acquire) < n_tasks) {
        cpu_relax();
        if ((++spins & 4095u) == 0) sched_yield(); /* a worker holding a task was descheduled */
    }
}

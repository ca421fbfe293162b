/*
 * reader_pool.c - the reader threads (reader_pool.h): one mutex, two
 * condition variables, a shared counter of the next job; the calling thread
 * takes jobs too, so a run of n jobs on r readers keeps r reads in flight.
 */
#include "reader_pool.h"

#include <pthread.h>
#include <stdlib.h>

#include "error.h"

struct vt_reader_pool {
    uint32_t n;                /* readers, the calling thread included */
    pthread_t *threads;        /* [n - 1] */
    uint32_t n_started;
    uint32_t n_named;          /* pool threads that took their worker number */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    uint64_t run_id;           /* bumped by every run: the threads wake on it */
    vt_reader_job_fn fn;
    void *ctx;
    uint64_t n_jobs, next, n_done;
    uint32_t busy;             /* pool threads inside the current run */
    int stop;
};

/* Take and run jobs of the current run until none is left. Called with mu held;
 * returns with it held. */
static void drain(vt_reader_pool *p, uint32_t worker)
{
    while (p->next < p->n_jobs) {
        uint64_t i = p->next++;
        vt_reader_job_fn fn = p->fn;
        void *ctx = p->ctx;
        pthread_mutex_unlock(&p->mu);
        fn(ctx, i, worker);
        pthread_mutex_lock(&p->mu);
        p->n_done++;
    }
}

static void *reader_main(void *arg)
{
    vt_reader_pool *p = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    const uint32_t worker = ++p->n_named; /* 1 .. n - 1; the calling thread is 0 */
    for (;;) {
        while (!p->stop && p->run_id == seen) pthread_cond_wait(&p->work, &p->mu);
        if (p->stop) break;
        seen = p->run_id;
        p->busy++;
        drain(p, worker);
        p->busy--;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

vt_status vt_reader_pool_create(uint32_t n_readers, vt_reader_pool **out)
{
    *out = NULL;
    vt_reader_pool *p = calloc(1, sizeof *p);
    if (!p) {
        vt_set_error("out of memory: reader pool");
        return VT_ERR_OUT_OF_MEMORY;
    }
    p->n = n_readers ? n_readers : 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    if (p->n > 1) {
        p->threads = calloc(p->n - 1, sizeof *p->threads);
        if (!p->threads) {
            vt_reader_pool_destroy(p);
            vt_set_error("out of memory: reader pool of %u threads", n_readers);
            return VT_ERR_OUT_OF_MEMORY;
        }
        for (uint32_t i = 0; i + 1 < p->n; i++) {
            int e = pthread_create(&p->threads[i], NULL, reader_main, p);
            if (e) {
                vt_reader_pool_destroy(p);
                vt_set_error("expert streamer: starting reader thread %u of %u failed (error %d)",
                             i + 1, n_readers - 1, e);
                return VT_ERR_INTERNAL;
            }
            p->n_started++;
        }
    }
    *out = p;
    return VT_OK;
}

void vt_reader_pool_destroy(vt_reader_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 0; i < p->n_started; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

uint32_t vt_reader_pool_size(const vt_reader_pool *p) { return p ? p->n : 0; }

void vt_reader_pool_run(vt_reader_pool *p, vt_reader_job_fn fn, void *ctx, uint64_t n)
{
    if (!n) return;
    if (p->n_started == 0 || n == 1) {
        for (uint64_t i = 0; i < n; i++) fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->n_jobs = n;
    p->next = 0;
    p->n_done = 0;
    p->run_id++;
    pthread_cond_broadcast(&p->work);
    drain(p, 0);
    /* every job taken; wait for the ones still running, and for every thread
     * to leave the run (a late one would otherwise see the next run's jobs
     * under this run's id) */
    while (p->n_done < p->n_jobs || p->busy) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

/*
 * bench_read_bw.c - the read bandwidth a streaming read of a large array
 * reaches on this machine with N threads (the ceiling a memory-bound decode
 * matvec is measured against), and memcpy's for comparison (which also
 * writes, so it shows less). Each thread sums its own contiguous part of a
 * buffer of `mib` MiB (default 1024, far beyond the caches) with 4 vector
 * accumulators; the figure is the median of 7 passes of bytes/second over
 * all threads. Not a test.
 *
 *   usage: bench_read_bw [threads [mib]]     (default 2 1024)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define READ_TARGET __attribute__((target("avx2")))
#else
#define READ_TARGET
#endif

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct part {
    const uint8_t *p;
    size_t n;
    uint8_t *dst; /* memcpy mode */
    pthread_barrier_t *bar;
    double sink;
};

READ_TARGET static double sum_bytes(const uint8_t *p, size_t n)
{
#if defined(__x86_64__)
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    int64_t o[4];
    _mm256_storeu_si256((__m256i *)(void *)o, a0);
    return (double)(o[0] + o[1] + o[2] + o[3]);
#else
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        s += v;
    }
    return (double)s;
#endif
}

static void *worker(void *arg)
{
    struct part *pt = arg;
    pthread_barrier_wait(pt->bar);
    if (pt->dst)
        memcpy(pt->dst, pt->p, pt->n);
    else
        pt->sink += sum_bytes(pt->p, pt->n);
    pthread_barrier_wait(pt->bar);
    return NULL;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double run(int nt, uint8_t *buf, uint8_t *dst, size_t bytes)
{
    double t[7];
    for (int rep = 0; rep < 7; rep++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)nt + 1);
        pthread_t th[256];
        struct part pt[256];
        size_t per = bytes / (size_t)nt / 128 * 128;
        for (int i = 0; i < nt; i++) {
            pt[i] = (struct part){buf + (size_t)i * per, per, dst ? dst + (size_t)i * per : NULL,
                                  &bar, 0};
            pthread_create(&th[i], NULL, worker, &pt[i]);
        }
        pthread_barrier_wait(&bar);
        double t0 = now_s();
        pthread_barrier_wait(&bar);
        t[rep] = now_s() - t0;
        for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        t[rep] = (double)(per * (size_t)nt) / t[rep] / 1e9;
    }
    qsort(t, 7, sizeof t[0], cmp_d);
    return t[3];
}

int main(int argc, char **argv)
{
    int nt = argc > 1 ? atoi(argv[1]) : 2;
    size_t mib = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    if (nt < 1 || nt > 256 || mib < 1) {
        fprintf(stderr, "usage: bench_read_bw [threads 1..256 [mib]]\n");
        return 2;
    }
    size_t bytes = mib << 20;
    uint8_t *buf = aligned_alloc(4096, bytes), *dst = aligned_alloc(4096, bytes);
    if (!buf || !dst) {
        fprintf(stderr, "bench_read_bw: cannot allocate 2 x %zu MiB\n", mib);
        return 1;
    }
    memset(buf, 1, bytes);
    memset(dst, 0, bytes);
    printf("threads %d, buffer %zu MiB\n", nt, mib);
    printf("read   (sum of every 8-byte word)  %.1f GB/s\n", run(nt, buf, NULL, bytes));
    printf("memcpy (read + write)       %.1f GB/s (bytes copied per second)\n",
           run(nt, buf, dst, bytes));
    free(buf);
    free(dst);
    return 0;
}

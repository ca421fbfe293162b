/*
 * bench_sampler.c - what picking one token costs the host per decode step,
 * at a vocabulary of n_vocab tokens (default 248,320, Qwen3.5's), for greedy
 * and the common sampling settings (vt run's default chain, an OpenAI
 * request's default temperature 1 over the whole vocabulary, top-p alone).
 * Two rows of logits: "flat" (Gaussian, std 3: probability spread over many
 * tokens, the sampler's worst case) and "peaked" (the same plus 50 tokens 25
 * higher, as a language model's next-token distribution usually is), and
 * "built": a row made against the selection's sampled pivot
 * (sampler_adversary.h), its worst case.
 *
 *   usage: bench_sampler [n_vocab] [steps]
 * Prints ms per token (mean over steps draws) per setting and row.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "sampler.h"
#include "sampler_adversary.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const int64_t V = argc > 1 ? atoll(argv[1]) : 248320;
    const int steps = argc > 2 ? atoi(argv[2]) : 50;
    if (V < 100 || steps < 1) {
        fprintf(stderr, "usage: bench_sampler [n_vocab >= 100] [steps >= 1]\n");
        return 2;
    }
    float *l = malloc(sizeof(float) * (size_t)V);
    if (!l) return 1;
    static const struct {
        const char *name;
        vt_sampler_params p;
    } set[] = {
        {"greedy", {.temperature = 0, .top_p = 1}},
        {"vt run default (T 0.8, top-k 40, top-p 0.95, min-p 0.05)",
         {.temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f}},
        {"OpenAI default (T 1, whole vocabulary)", {.temperature = 1.0f, .top_p = 1}},
        {"T 0.7, top-p 0.9", {.temperature = 0.7f, .top_p = 0.9f}},
        {"T 0.7, min-p 0.05", {.temperature = 0.7f, .top_p = 1, .min_p = 0.05f}},
    };
    printf("n_vocab %lld, %d draws per row\n%-58s %12s %12s %12s\n", (long long)V, steps,
           "setting", "flat ms", "peaked ms", "built ms");
    for (size_t k = 0; k < sizeof set / sizeof set[0]; k++) {
        double ms[3];
        for (int peaked = 0; peaked < 3; peaked++) {
            uint64_t g = 99;
            for (int64_t i = 0; i < V; i++) {
                g = g * 6364136223846793005ull + 1442695040888963407ull;
                double u = ((double)(g >> 11) + 1.0) / 9007199254740993.0;
                g = g * 6364136223846793005ull + 1442695040888963407ull;
                double v = (double)(g >> 11) / 9007199254740992.0;
                l[i] = (float)(3.0 * sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
                if (peaked == 1 && i % (V / 50) == 0) l[i] += 25.0f;
            }
            if (peaked == 2 && vt_sampler_adversary(l, V) != 0) return 1;
            vt_sampler_params p = set[k].p;
            p.seed = 7;
            vt_sampler *s;
            if (vt_sampler_new(&p, V, NULL, &s) != VT_OK) return 1;
            volatile int64_t sink = 0;
            double t = now_s();
            for (int i = 0; i < steps; i++) sink += vt_sampler_sample(s, l);
            ms[peaked] = (now_s() - t) / steps * 1e3;
            (void)sink;
            vt_sampler_free(s);
        }
        printf("%-58s %12.3f %12.3f %12.3f\n", set[k].name, ms[0], ms[1], ms[2]);
    }
    free(l);
    return 0;
}

/*
 * cache_sim.c - replacement policies compared offline on a routing trace
 * written by `vt bench --trace FILE`.
 *
 *   cache_sim [--matrices N] TRACE [SLOTS ...]
 * For each arena size (default: the trace's own), replays the trace through
 * the real expert streamer (core/src/stream/expert_streamer.c) over a generated
 * file of the trace's shape whose slices are 16 bytes (the policy does not
 * depend on slice size), once per policy, and prints the decode-phase hit
 * rate of each next to LRU replayed by the simulator and Belady's optimum
 * (core/src/stream/cache_sim.c). Prefill and warm-up acquires move the cache but
 * are not counted, as in vt bench.
 * --matrices N replays every acquire with N matrices per layer instead of
 * the trace's own: --matrices 1 measures slots that hold an expert's whole
 * FFN (every matrix of it in one slot) at the arena sizes given in experts.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache_sim.h"
#include "error.h"
#include "expert_streamer.h"
#include "vt/gguf.h"

#define SLICE_F32 4 /* 4 floats per expert slice */

int main(int argc, char **argv)
{
    unsigned force_mat = 0;
    if (argc > 2 && !strcmp(argv[1], "--matrices")) {
        force_mat = (unsigned)strtoul(argv[2], NULL, 10);
        argv += 2;
        argc -= 2;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: cache_sim [--matrices N] TRACE [SLOTS ...]\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    unsigned n_layer = 0, n_mat = 0;
    unsigned long long n_exp = 0, own_slots = 0, own_host = 0;
    char line[1 << 16];
    size_t cap = 1 << 14, n_acq = 0, n_ids = 0, cap_ids = 1 << 16;
    uint32_t *layer = malloc(cap * sizeof *layer);
    uint8_t *phase = malloc(cap);
    size_t *off = malloc((cap + 1) * sizeof *off);
    int32_t *ids = malloc(cap_ids * sizeof *ids);
    off[0] = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') {
            sscanf(line, "# layers %u matrices %u experts %llu slots %llu host_slots %llu", &n_layer,
                   &n_mat, &n_exp, &own_slots, &own_host);
            continue;
        }
        char *p = line, *end;
        strtoull(p, &end, 10); /* step */
        p = end;
        unsigned long ph = strtoul(p, &end, 10);
        p = end;
        unsigned long l = strtoul(p, &end, 10);
        if (end == p) continue;
        p = end;
        if (n_acq + 1 >= cap) {
            cap *= 2;
            layer = realloc(layer, cap * sizeof *layer);
            phase = realloc(phase, cap);
            off = realloc(off, (cap + 1) * sizeof *off);
            if (!layer || !phase || !off) {
                fprintf(stderr, "out of memory reading %s\n", argv[1]);
                return 1;
            }
        }
        layer[n_acq] = (uint32_t)l;
        phase[n_acq] = (uint8_t)ph;
        for (;;) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            p = end;
            if (n_ids == cap_ids && !(ids = realloc(ids, (cap_ids *= 2) * sizeof *ids))) {
                fprintf(stderr, "out of memory reading %s\n", argv[1]);
                return 1;
            }
            ids[n_ids++] = (int32_t)v;
        }
        off[++n_acq] = n_ids;
    }
    fclose(f);
    if (force_mat) n_mat = force_mat;
    if (!n_layer || !n_mat || !n_exp || !n_acq) {
        fprintf(stderr, "%s: not a vt routing trace (no '# layers' header or no acquires)\n", argv[1]);
        return 1;
    }
    /* a file of the trace's shape with 16-byte slices */
    char path[256];
    snprintf(path, sizeof path, "%s/vt-cache-sim-%d.gguf", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    vt_gguf_writer *w = vt_gguf_writer_new(32);
    vt_gguf_writer_set_str(w, "general.architecture", "test");
    float *zero = calloc((size_t)n_exp * SLICE_F32, sizeof *zero);
    for (unsigned l = 0; l < n_layer; l++)
        for (unsigned m = 0; m < n_mat; m++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%u.exps_%u.weight", l, m);
            int64_t ne[3] = {SLICE_F32, 1, (int64_t)n_exp};
            vt_gguf_writer_add_tensor(w, name, VT_TYPE_F32, 3, ne, zero, n_exp * SLICE_F32 * 4);
        }
    if (vt_gguf_writer_write(w, path) != VT_OK) {
        fprintf(stderr, "%s\n", vt_last_error());
        return 1;
    }
    vt_gguf_writer_free(w);
    vt_gguf *g;
    if (vt_gguf_open(path, VT_GGUF_NO_MMAP, &g) != VT_OK) {
        fprintf(stderr, "%s\n", vt_last_error());
        return 1;
    }
    size_t max_acq = 0;
    for (size_t a = 0; a < n_acq; a++)
        if (off[a + 1] - off[a] > max_acq) max_acq = off[a + 1] - off[a];
    const void **out = malloc((max_acq * n_mat + 1) * sizeof *out);
    if (!out) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    int n_sizes = argc > 2 ? argc - 2 : 1;
    printf("trace %s: %zu acquires, %u layers x %u matrices x %llu experts (trace's arena %llu "
           "slots)\n", argv[1], n_acq, n_layer, n_mat, n_exp, own_slots);
    printf("| slots | %% of keys | lru | layer | lfru | LRU replayed | Belady |\n|---|---|---|---|---|---|---|\n");
    for (int si = 0; si < n_sizes; si++) {
        uint64_t slots = argc > 2 ? strtoull(argv[2 + si], NULL, 10) : own_slots;
        double rate[3] = {0, 0, 0};
        vt_cache_sim_result lru = {0}, opt = {0};
        for (int pol = 0; pol < 3; pol++) {
            const vt_store_api *api = vt_host_store_api();
            vt_store_params sp = {.struct_size = sizeof sp, .slot_bytes = SLICE_F32 * 4,
                                  .n_slots = slots};
            vt_store *st;
            vt_expert_streamer *s;
            if (api->create(&sp, &st) != VT_OK) return 1;
            vt_streamer_params p = {.gguf = g, .store_api = api, .store = st, .n_slots = slots,
                                    .slot_bytes = SLICE_F32 * 4, .n_layer = n_layer,
                                    .policy = pol == 2 ? VT_CACHE_POLICY_LFRU
                                              : pol ? VT_CACHE_POLICY_LAYER : VT_CACHE_POLICY_LRU};
            if (vt_streamer_create(&p, &s) != VT_OK) {
                fprintf(stderr, "%s\n", vt_last_error());
                return 1;
            }
            for (unsigned l = 0; l < n_layer; l++)
                for (unsigned m = 0; m < n_mat; m++) {
                    char name[64];
                    snprintf(name, sizeof name, "blk.%u.exps_%u.weight", l, m);
                    vt_streamer_register(s, l, m, vt_gguf_find_tensor(g, name));
                }
            vt_streamer_trace_start(s);
            uint64_t hits = 0, uses = 0;
            for (size_t a = 0; a < n_acq; a++) {
                vt_expert_stats b0, b1;
                vt_streamer_stats(s, -1, &b0);
                vt_streamer_trace_phase(s, phase[a]);
                if (vt_streamer_acquire(s, layer[a], ids + off[a], (uint32_t)(off[a + 1] - off[a]), out) != VT_OK) {
                    fprintf(stderr, "acquire %zu: %s\n", a, vt_last_error());
                    return 1;
                }
                vt_streamer_stats(s, -1, &b1);
                if (phase[a] == 2) {
                    hits += b1.hits - b0.hits;
                    uses += b1.hits - b0.hits + b1.misses - b0.misses;
                }
            }
            rate[pol] = uses ? 100.0 * (double)hits / (double)uses : 0;
            if (pol == 0 && vt_streamer_simulate(s, slots, 2, &lru, &opt) != VT_OK) {
                fprintf(stderr, "%s\n", vt_last_error());
                return 1;
            }
            vt_streamer_destroy(s);
            api->destroy(st);
        }
        printf("| %" PRIu64 " | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% | %.1f%% |\n", slots,
               100.0 * (double)slots / (double)(n_layer * n_mat * n_exp), rate[0], rate[1], rate[2],
               lru.uses ? 100.0 * (double)lru.hits / (double)lru.uses : 0,
               opt.uses ? 100.0 * (double)opt.hits / (double)opt.uses : 0);
    }
    free(out);
    vt_gguf_close(g);
    unlink(path);
    return 0;
}

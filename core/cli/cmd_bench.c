/*
 * cmd_bench.c - vt bench: prefill and decode tokens/s over repetitions (medians),
 * the expert cache's hit rates against Belady's optimum on the same routing,
 * fill and H2D rates, the per-op profile, the routing trace, --json.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench_parallel.h"
#include "bench_profile.h"
#include "cache_sim.h"
#include "capabilities.h"
#include "cli.h"
#include "error.h"
#include "expert_streamer.h"
#include "gguf_info.h"
#include "registry.h"
#include "residency.h"

/* ------------------------------------------------------------------ bench */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * Weight bytes one decode step reads: every tensor once, except the routed
 * expert stacks (expert_used_count of expert_count experts per layer) and the
 * token embedding (one row, unless it doubles as the LM head). Decode of a
 * memory-bound engine is this many bytes per token, so bytes × tokens/s is
 * the bandwidth the decode reached, to compare with what the memory gives.
 * The MTP blocks no model runs (vt_gguf_first_unrun_block) are left out.
 */
static double decode_bytes_per_token(const vt_gguf *g)
{
    vt_gguf_str arch;
    uint32_t used = 0;
    if (vt_gguf_get_str(g, "general.architecture", &arch) == VT_OK) {
        char key[160];
        snprintf(key, sizeof key, "%s.expert_used_count", arch.ptr);
        if (vt_gguf_get_u32(g, key, &used) != VT_OK) used = 0;
    }
    int tied = vt_gguf_find_tensor(g, "output.weight") == NULL;
    const long run_end = vt_gguf_first_unrun_block(g);
    double sum = 0.0;
    for (int64_t i = 0; i < vt_gguf_n_tensors(g); i++) {
        const vt_gguf_tensor *t = vt_gguf_tensor_at(g, i);
        if (!t || vt_gguf_block_of(t->name) >= run_end) continue;
        double b = (double)t->nbytes;
        if (vt_gguf_is_routed_expert(t) && t->ne[2] > 0)
            b = b * (double)used / (double)t->ne[2];
        else if (strstr(t->name, "token_embd.weight") && t->n_dims == 2 && t->ne[1] > 0 &&
                 !(tied && !strcmp(t->name, "token_embd.weight")))
            b /= (double)t->ne[1];
        sum += b;
    }
    return sum;
}

/* Prefill of n_prompt random tokens and decode of n tokens, repeated; medians. */
/* --trace FILE: "# vt routing trace" header, then one line per acquire:
 * step phase layer id id ... (phase 0 warm-up, 1 prefill, 2 decode). */
static vt_status write_trace(const char *path, const vt_expert_streamer *s)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        vt_set_error("--trace %s: cannot create it: %s", path, strerror(errno));
        return VT_ERR_IO;
    }
    const vt_streamer_trace *t = vt_streamer_get_trace(s);
    fprintf(f, "# vt routing trace v1: step phase(0 warm-up, 1 prefill, 2 decode) layer expert-ids...\n");
    uint32_t l0 = 0;
    while (l0 < vt_streamer_n_layers(s) && !vt_streamer_n_matrices(s, l0)) l0++;
    fprintf(f, "# layers %u matrices %u experts %llu slots %llu host_slots %llu\n",
            vt_streamer_n_layers(s), l0 < vt_streamer_n_layers(s) ? vt_streamer_n_matrices(s, l0) : 0,
            (unsigned long long)(l0 < vt_streamer_n_layers(s) ? vt_streamer_n_experts(s, l0) : 0),
            (unsigned long long)vt_streamer_n_slots(s),
            (unsigned long long)vt_streamer_n_host_slots(s));
    for (size_t a = 0; a < t->n_acquires; a++) {
        fprintf(f, "%zu %u %u", a, t->phase[a], t->layer[a]);
        for (uint64_t i = t->off[a]; i < t->off[a + 1]; i++) fprintf(f, " %d", t->ids[i]);
        fputc('\n', f);
    }
    if (fclose(f) != 0 || t->truncated) {
        vt_set_error("--trace %s: %s", path, t->truncated ? "the trace ran out of memory"
                                                          : strerror(errno));
        return VT_ERR_IO;
    }
    return VT_OK;
}

static int bench_main(const opts *o)
{
    if (!o->model) {
        fprintf(stderr, "vt bench: -m MODEL is required\n");
        return 2;
    }
    if (o->n_predict_set && o->n_predict <= 0) {
        fprintf(stderr, "vt bench: -n must be at least 1\n");
        return 2;
    }
    int n_prompt = o->n_prompt ? o->n_prompt : 128, n_gen = o->n_predict_set ? o->n_predict : 64;
    if (o->prompt) { /* vt bench -p N: prompt length in tokens */
        long v;
        if (cli_parse_long(o->prompt, 1, 1L << 20, "vt bench -p", &v)) return 2;
        n_prompt = (int)v;
    }
    int reps = o->reps ? o->reps : 5;
    opts oo = *o;
    oo.prompt = NULL;
    /* --parallel N: N sequences besides the engine's own (bench_parallel.h) */
    const int n_par = o->parallel > 1 ? o->parallel : 0;
    oo.parallel = n_par ? n_par + 1 : 0;
    if (!oo.ctx) oo.ctx = (uint32_t)(n_prompt + n_gen + 8);
    vt_engine *e;
    if (cli_open_engine(&oo, &e) != VT_OK) return cli_fail("bench");
    vt_model_info info;
    vt_engine_model_info(e, &info);
    int32_t *toks = malloc((size_t)(n_prompt + n_gen) * sizeof *toks);
    const float *logits = NULL; /* the engine's (vt_engine_eval_last), as vt run samples from */
    double *pp = calloc((size_t)reps, sizeof *pp), *tg = calloc((size_t)reps, sizeof *tg);
    const vt_expert_streamer *es = vt_engine_streamer(e);
    vt_expert_stats dec = {0}, all0 = {0}, all1 = {0}; /* decode-phase sums; totals of the timed reps */
    vt_streamer_host_stats hdec = {0}, h0 = {0}, h1 = {0}, ha, hb;
    vt_streamer_prefetch_stats pdec = {0}, pa = {0}, pb = {0}; /* decode-phase prefetch sums */
    int rc = 1;
    if (!toks || !pp || !tg) {
        vt_set_error("out of memory: bench buffers");
        goto out;
    }
    uint64_t x = 12345;
    for (int i = 0; i < n_prompt + n_gen; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)(info.n_vocab < 256 ? info.n_vocab : 256));
    }
    /* the routing trace from the first (warm-up) round on, so a replay starts
     * from the same empty cache; phases: 0 warm-up, 1 timed prefill, 2 timed decode */
    vt_expert_streamer *est = (vt_expert_streamer *)es;
    if (est) vt_streamer_trace_start(est);
    for (int r = 0; r < reps + 1; r++) { /* the first round warms up */
        if (vt_engine_reset(e) != VT_OK) goto out;
        if (est) vt_streamer_trace_phase(est, r ? 1 : 0);
        if (r == 1 && es) {
            vt_streamer_stats(es, -1, &all0);
            vt_streamer_host_stats_get(es, -1, &h0);
        }
        double t0 = cli_now_seconds();
        if (vt_engine_eval_last(e, toks, n_prompt, &logits) != VT_OK) goto out;
        double t1 = cli_now_seconds();
        vt_expert_stats a = {0}, b = {0};
        if (es) {
            vt_streamer_stats(es, -1, &a);
            vt_streamer_host_stats_get(es, -1, &ha);
            vt_streamer_prefetch_stats_get(es, &pa);
            vt_streamer_trace_phase(est, r ? 2 : 0);
        }
        for (int i = 0; i < n_gen; i++)
            if (vt_engine_eval_last(e, &toks[n_prompt + i], 1, &logits) != VT_OK) goto out;
        double t2 = cli_now_seconds();
        if (es) {
            vt_streamer_stats(es, -1, &b);
            vt_streamer_host_stats_get(es, -1, &hb);
            vt_streamer_prefetch_stats_get(es, &pb);
        }
        if (r > 0 && es) {
            hdec.hits += hb.hits - ha.hits;
            hdec.misses += hb.misses - ha.misses;
            pdec.issued += pb.issued - pa.issued;
            pdec.used += pb.used - pa.used;
            pdec.bytes_issued += pb.bytes_issued - pa.bytes_issued;
            pdec.bytes_wasted += pb.bytes_wasted - pa.bytes_wasted;
        }
        if (r > 0) {
            pp[r - 1] = n_prompt / (t1 - t0);
            tg[r - 1] = n_gen / (t2 - t1);
            dec.hits += b.hits - a.hits;
            dec.misses += b.misses - a.misses;
            dec.bytes_filled += b.bytes_filled - a.bytes_filled;
            dec.fill_seconds += b.fill_seconds - a.fill_seconds;
            dec.evictions += b.evictions - a.evictions;
        }
    }
    if (es) {
        vt_streamer_stats(es, -1, &all1);
        vt_streamer_host_stats_get(es, -1, &h1);
    }
    uint64_t n_host = es ? vt_streamer_n_host_slots(es) : 0;
    /* LRU replayed (equal to the measured rate when the policy is lru) and
     * Belady's optimum on the same routing, decode phase of the timed rounds */
    vt_cache_sim_result sim_lru = {0}, sim_opt = {0};
    int have_sim = 0;
    if (est) {
        vt_streamer_trace_stop(est);
        const vt_streamer_trace *tr = vt_streamer_get_trace(est);
        if (tr->truncated) {
            vt_log(VT_LOG_WARN, "bench: the routing trace ran out of memory; no Belady figure");
        } else if (vt_streamer_simulate(est, vt_streamer_n_slots(est), 2, &sim_lru, &sim_opt) == VT_OK) {
            have_sim = 1;
        } else {
            vt_log(VT_LOG_WARN, "bench: cache simulation: %s", vt_last_error());
        }
        if (o->trace && write_trace(o->trace, est) != VT_OK) goto out;
    } else if (o->trace) {
        vt_set_error("--trace %s: the experts are resident, there is no routing trace of the "
                     "expert cache (stream them: --set <platform>.experts=streamed)", o->trace);
        goto out;
    }
    double opt_hit = have_sim && sim_opt.uses ? 100.0 * (double)sim_opt.hits / (double)sim_opt.uses : 0;
    double lru_hit = have_sim && sim_lru.uses ? 100.0 * (double)sim_lru.hits / (double)sim_lru.uses : 0;
    uint64_t hdec_used = hdec.hits + hdec.misses;
    double host_hit = hdec_used ? 100.0 * (double)hdec.hits / (double)hdec_used : 100.0;
    double read_bytes = (double)(h1.bytes_read - h0.bytes_read);
    double read_s = h1.read_seconds - h0.read_seconds;
    double read_gbs = read_s > 0 ? read_bytes / read_s / 1e9 : 0.0;
    qsort(pp, (size_t)reps, sizeof *pp, cmp_double);
    qsort(tg, (size_t)reps, sizeof *tg, cmp_double);
    double pp_med = reps % 2 ? pp[reps / 2] : 0.5 * (pp[reps / 2 - 1] + pp[reps / 2]);
    double tg_med = reps % 2 ? tg[reps / 2] : 0.5 * (tg[reps / 2 - 1] + tg[reps / 2]);
    long ncores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *kern = o->kernels ? o->kernels : getenv("VT_KERNELS");
    int threads = o->threads > 0 ? o->threads : (int)ncores;
    uint64_t dec_used = dec.hits + dec.misses;
    double hit = dec_used ? 100.0 * (double)dec.hits / (double)dec_used : 100.0;
    /* prefetch: a prefetched key counts as a hit; without them, the demand hit rate */
    int pf_on = es && vt_streamer_prefetch_on(es);
    double demand_hit = dec_used ? 100.0 * (double)(dec.hits - pdec.used) / (double)dec_used : 100.0;
    double pf_acc = pdec.issued ? 100.0 * (double)pdec.used / (double)pdec.issued : 0.0;
    double n_dec_tok = reps && n_gen ? (double)reps * n_gen : 1.0;
    double fill_bytes = (double)(all1.bytes_filled - all0.bytes_filled);
    double fill_s = all1.fill_seconds - all0.fill_seconds;
    double fill_gbs = fill_s > 0 ? fill_bytes / fill_s / 1e9 : 0.0;
    double commit_s = all1.commit_seconds - all0.commit_seconds;
    double commit_gbs = commit_s > 0 ? fill_bytes / commit_s / 1e9 : 0.0;
    const vt_fit *fit = vt_engine_fit(e);
    vt_model_info minfo;
    vt_engine_model_info(e, &minfo);
    int host_store = es && !strcmp(vt_engine_store_name(e), "host");
    double rss = cli_peak_rss_mib();
    double dec_bytes = decode_bytes_per_token(vt_engine_gguf(e));
    double dec_gbs = dec_bytes * tg_med / 1e9;
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", o->model);
        cJSON_AddNumberToObject(j, "threads", threads);
        cJSON_AddStringToObject(j, "kernels", kern ? kern : "auto");
        cJSON_AddNumberToObject(j, "n_prompt", n_prompt);
        cJSON_AddNumberToObject(j, "n_gen", n_gen);
        cJSON_AddNumberToObject(j, "reps", reps);
        cJSON_AddNumberToObject(j, "prefill_tok_s", pp_med);
        cJSON_AddNumberToObject(j, "decode_tok_s", tg_med);
        cJSON_AddNumberToObject(j, "decode_weight_bytes_per_token", dec_bytes);
        cJSON_AddNumberToObject(j, "decode_weight_gb_s", dec_gbs);
        cJSON_AddStringToObject(j, "experts", es ? "streamed" : "resident");
        if (minfo.moe_path) cJSON_AddStringToObject(j, "moe_path", minfo.moe_path);
        else cJSON_AddNullToObject(j, "moe_path");
        if (minfo.decode_path) cJSON_AddStringToObject(j, "decode_path", minfo.decode_path);
        else cJSON_AddNullToObject(j, "decode_path");
        cJSON_AddNumberToObject(j, "arena_slots", es ? (double)vt_streamer_n_slots(es) : 0);
        if (es) cJSON_AddStringToObject(j, "slot_unit", fit->slot_unit_expert ? "expert" : "matrix");
        else cJSON_AddNullToObject(j, "slot_unit");
        cJSON_AddNumberToObject(j, "arena_bytes", es ? (double)fit->arena_bytes : 0);
        cJSON_AddNumberToObject(j, "expert_bytes", (double)fit->expert_bytes);
        if (es) cJSON_AddNumberToObject(j, "decode_hit_rate", hit / 100.0);
        else cJSON_AddNullToObject(j, "decode_hit_rate"); /* no cache: experts resident */
        cJSON_AddNumberToObject(j, "fill_bytes", fill_bytes);
        cJSON_AddNumberToObject(j, "decode_fill_bytes_per_token",
                                reps && n_gen ? (double)dec.bytes_filled / ((double)reps * n_gen) : 0);
        cJSON_AddNumberToObject(j, "fill_gb_s", fill_gbs);
        if (host_store) cJSON_AddNullToObject(j, "commit_gb_s"); /* the host store's commit copies nothing */
        else cJSON_AddNumberToObject(j, "commit_gb_s", commit_gbs);
        cJSON_AddNumberToObject(j, "evictions", (double)(all1.evictions - all0.evictions));
        if (have_sim) {
            cJSON_AddNumberToObject(j, "decode_hit_rate_belady", opt_hit / 100.0);
            cJSON_AddNumberToObject(j, "decode_hit_rate_lru_replay", lru_hit / 100.0);
        } else {
            cJSON_AddNullToObject(j, "decode_hit_rate_belady");
            cJSON_AddNullToObject(j, "decode_hit_rate_lru_replay");
        }
        cJSON_AddNumberToObject(j, "host_slots", (double)n_host);
        cJSON_AddNumberToObject(j, "host_tier_bytes", (double)fit->host_arena_bytes);
        cJSON_AddNumberToObject(j, "host_pinned_bytes",
                                es ? (double)vt_streamer_host_pinned_bytes(es) : 0);
        if (n_host && hdec_used) cJSON_AddNumberToObject(j, "decode_host_hit_rate", host_hit / 100.0);
        else cJSON_AddNullToObject(j, "decode_host_hit_rate");
        cJSON_AddNumberToObject(j, "file_read_bytes", n_host ? read_bytes : fill_bytes);
        cJSON_AddNumberToObject(j, "file_read_gb_s", n_host ? read_gbs : fill_gbs);
        cJSON_AddStringToObject(j, "prefetch", pf_on ? "next-layer" : "off");
        if (pf_on) {
            cJSON_AddNumberToObject(j, "decode_demand_hit_rate", demand_hit / 100.0);
            cJSON_AddNumberToObject(j, "decode_prefetch_issued", (double)pdec.issued);
            cJSON_AddNumberToObject(j, "decode_prefetch_used", (double)pdec.used);
            cJSON_AddNumberToObject(j, "decode_prefetch_accuracy", pf_acc / 100.0);
            cJSON_AddNumberToObject(j, "decode_prefetch_bytes_per_token",
                                    (double)pdec.bytes_issued / n_dec_tok);
            cJSON_AddNumberToObject(j, "decode_prefetch_wasted_bytes_per_token",
                                    (double)pdec.bytes_wasted / n_dec_tok);
        }
        cJSON_AddNumberToObject(j, "peak_rss_mib", rss);
        cJSON_AddNumberToObject(j, "fallbacks", (double)vt_host_n_fallbacks());
        if (o->profile &&
            vt_bench_profile(e, toks, n_prompt, n_gen, pp_med, tg_med, j)) {
            cJSON_Delete(j);
            goto out;
        }
        if (n_par && vt_bench_parallel(e, n_prompt, n_gen, reps, n_par, info.n_vocab, o->profile, j)) {
            cJSON_Delete(j);
            goto out;
        }
        char *txt = cJSON_Print(j);
        if (txt) printf("%s\n", txt);
        free(txt);
        cJSON_Delete(j);
    } else {
        char b1[32], b2[32];
        printf("model: %s\nthreads: %d  kernels: %s  batch: %u\n", o->model, threads,
               kern ? kern : "auto", o->batch ? o->batch : 512);
        printf("experts: %s", es ? "streamed" : "resident");
        if (es)
            printf(", arena %llu slots of %s (%s of %s of routed experts, %.1f%%)",
                   (unsigned long long)vt_streamer_n_slots(es),
                   fit->slot_unit_expert ? "whole experts" : "one matrix each",
                   vt_format_bytes(fit->arena_bytes, 1, b1, sizeof b1),
                   vt_format_bytes(fit->expert_bytes, 1, b2, sizeof b2),
                   fit->expert_bytes ? 100.0 * (double)fit->arena_bytes / (double)fit->expert_bytes : 0);
        if (minfo.moe_path) printf("\nmoe: %s", minfo.moe_path);
        if (minfo.decode_path) printf("\ndecode steps: %s", minfo.decode_path);
        printf("\n\n| %-8s | %7s | %12s | %12s | %12s |\n", "phase", "tokens", "tokens/s", "min", "max");
        printf("|----------|---------|--------------|--------------|--------------|\n");
        printf("| %-8s | %7d | %12.1f | %12.1f | %12.1f |\n", "prefill", n_prompt, pp_med, pp[0],
               pp[reps - 1]);
        printf("| %-8s | %7d | %12.1f | %12.1f | %12.1f |\n", "decode", n_gen, tg_med, tg[0],
               tg[reps - 1]);
        printf("\n(median of %d reps after one warm-up)\n", reps);
        printf("decode reads %.1f MiB of weights per token (dense + %s): %.2f GB/s at the median\n",
               dec_bytes / 1048576.0, "top-k routed experts", dec_gbs);
        if (es) {
            char cb[48];
            if (host_store) snprintf(cb, sizeof cb, "n/a for the host store");
            else snprintf(cb, sizeof cb, "%.2f GB/s", commit_gbs);
            printf("decode hit rate: %.1f%%   fills: %.1f MiB in %.3f s (%.2f GB/s; commits alone %s)"
                   "   evictions: %llu\n", hit, fill_bytes / 1048576.0, fill_s, fill_gbs, cb,
                   (unsigned long long)(all1.evictions - all0.evictions));
            if (pf_on)
                printf("prefetch (next-layer): %llu keys copied ahead in decode, %.1f%% of them "
                       "used; %.2f MiB ahead and %.2f MiB wasted per token; demand hit rate "
                       "(prefetched keys not counted): %.1f%%\n", (unsigned long long)pdec.issued,
                       pf_acc, (double)pdec.bytes_issued / n_dec_tok / 1048576.0,
                       (double)pdec.bytes_wasted / n_dec_tok / 1048576.0, demand_hit);
            if (have_sim)
                printf("decode hit rate of Belady's optimum on the same routing: %.1f%% (one LRU "
                       "replayed: %.1f%%)\n", opt_hit, lru_hit);
            if (n_host)
                printf("host tier: %llu slots (%s, %s pinned), decode hit rate %.1f%% of the device "
                       "misses; file reads: %.1f MiB in %.3f s (%.2f GB/s)\n",
                       (unsigned long long)n_host,
                       vt_format_bytes(fit->host_arena_bytes, 1, b1, sizeof b1),
                       vt_format_bytes(vt_streamer_host_pinned_bytes(es), 1, b2, sizeof b2),
                       host_hit, read_bytes / 1048576.0, read_s, read_gbs);
            else
                printf("host tier: none (every device miss reads the file)\n");
        } else {
            printf("decode hit rate: n/a (experts resident, no cache)\n");
        }
        printf("peak RSS: %.1f MiB   fallbacks: %llu\n", rss, (unsigned long long)vt_host_n_fallbacks());
        if (o->profile && vt_bench_profile(e, toks, n_prompt, n_gen, pp_med, tg_med, NULL))
            goto out;
        if (n_par && vt_bench_parallel(e, n_prompt, n_gen, reps, n_par, info.n_vocab, o->profile, NULL))
            goto out;
    }
    rc = 0;
out:
    if (rc) cli_fail("bench");
    free(toks);
    free(pp);
    free(tg);
    vt_engine_close(e);
    return rc;
}

static const cli_opt_use bench_options[] = {
    CLI_ENGINE_OPTIONS,
    {'p', "N", "prompt tokens (default 128; random ids)"},
    {'n', NULL, "tokens to decode (default 64)"},
    {O_NPROMPT, NULL, NULL}, {O_REPS, NULL, NULL}, {O_JSON, NULL, NULL}, {O_PROFILE, NULL, NULL},
    {O_TRACE, NULL, NULL},
    {O_PARALLEL, NULL, "then 1, 2, 4 .. N sequences decoding together (vt serve's rounds):\n"
                       "aggregate tok/s next to one sequence after another"},
    {0, NULL, NULL}};

const cli_command cli_cmd_bench = {
    "bench", bench_main, "-m MODEL [-p N] [-n N] [options]",
    "prefill and decode tokens/s, expert hit rates, fill GB/s, peak RSS",
    "Prefill and decode tokens/s (the median of --reps after a warm-up), the weight bytes one\n"
    "decode step reads and the GB/s reached with them, the expert cache's hit rate (with\n"
    "Belady's optimum on the same routing), fill and commit GB/s, peak RSS.\n",
    bench_options};

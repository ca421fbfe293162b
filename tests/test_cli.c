/*
 * test_cli.c - the vt command end to end, on the fixtures, as a user runs it:
 * greedy `vt run --temp 0 --ids` reproduces transformers' 32 greedy ids;
 * `--chat --system` renders the Qwen3.5 template strings of
 * spec/tokenizers.md §10.1 exactly; `vt logits` matches the reference logits
 * and the 3-shard split gives bit-identical logits; `vt tokenize`, `vt info`,
 * `vt plugins`; and refusals that name the file, device or shard.
 */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *fx;

/* Run the vt binary with argv (NULL-terminated, without argv[0]); capture
 * stdout and stderr into malloc-ed strings. Returns the exit status. */
static int run_vt(const char *const *args, char **out, char **err)
{
    char o_path[] = "/tmp/vt-cli-out-XXXXXX", e_path[] = "/tmp/vt-cli-err-XXXXXX";
    int ofd = mkstemp(o_path), efd = mkstemp(e_path);
    assert_true(ofd >= 0 && efd >= 0);
    const char *argv[64];
    int n = 0;
    argv[n++] = vt_test_vt_bin();
    for (int i = 0; args[i] && n < 62; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(ofd, 1);
        dup2(efd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    close(ofd);
    close(efd);
    *out = vt_test_read_file(o_path, NULL);
    *err = vt_test_read_file(e_path, NULL);
    unlink(o_path);
    unlink(e_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static cJSON *read_json(const char *rel)
{
    char *p = vt_test_path(fx, rel);
    char *text = vt_test_read_file(p, NULL);
    cJSON *j = cJSON_Parse(text);
    if (!j) fail_msg("cannot parse %s", p);
    free(text);
    free(p);
    return j;
}

static char *model(const char *rel)
{
    static char buf[8][4096];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, 4096, "%s/qwen35moe-tiny/gguf/%s", fx, rel);
    return b;
}

static void test_greedy_ids(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    cJSON *g = read_json("qwen35moe-tiny/refs/greedy.json");
    const char *prompt = cJSON_GetObjectItem(g, "prompt_text")->valuestring;
    const char *args[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", prompt, "--temp", "0",
                          "--ids", "-n", "32", "--ignore-eos", "--kernels", "scalar",
                          "--verbose-prompt", NULL};
    char *out, *err;
    int rc = run_vt(args, &out, &err);
    if (rc) fail_msg("vt run exited %d: %s", rc, err);
    /* the prompt tokenized by vt is the reference prompt */
    char want[4096] = "";
    cJSON *pid = cJSON_GetObjectItem(g, "prompt_ids"), *it;
    cJSON_ArrayForEach(it, pid) snprintf(want + strlen(want), sizeof want - strlen(want), " %d", it->valueint);
    if (!strstr(err, want)) fail_msg("prompt tokens differ; want%s\n%s", want, err);
    /* 32 greedy ids */
    cJSON *ids = cJSON_GetObjectItem(g, "new_ids");
    char *p = out;
    int i = 0;
    cJSON_ArrayForEach(it, ids) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) fail_msg("vt printed only %d ids: %s", i, out);
        if (v != it->valueint) fail_msg("greedy id %d: vt %ld, reference %d (output: %s)", i, v, it->valueint, out);
        p = end;
        i++;
    }
    assert_int_equal(i, 32);
    free(out);
    free(err);
    cJSON_Delete(g);
}

/* The trained model's "The history of" greedy reference through `vt run`,
 * default kernels, the default chunk and --batch 1..8 (a 4-token chunk once
 * gave wrong logits on the CPU). */
static void test_trained_history_batches(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    cJSON *g = read_json("qwen35moe-trained/refs/greedy.json");
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(g, "cases"), 0);
    const char *prompt = cJSON_GetObjectItem(c, "prompt_text")->valuestring;
    assert_string_equal(prompt, "The history of");
    char path[4096];
    snprintf(path, sizeof path, "%s/qwen35moe-trained/gguf/qwen35moe-trained-bf16-00001-of-00003.gguf",
             fx);
    for (int b = 0; b <= 8; b++) {
        char bs[16];
        snprintf(bs, sizeof bs, "%d", b);
        const char *args[] = {"run", "-m", path, "-p", prompt, "-n", "48", "--temp", "0",
                              "--ignore-eos", "--ids", b ? "--batch" : NULL, bs, NULL};
        char *out, *err;
        int rc = run_vt(args, &out, &err);
        if (rc) fail_msg("vt run --batch %d exited %d: %s", b, rc, err);
        char *p = out;
        int i = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(c, "new_ids")) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) fail_msg("--batch %d: vt printed only %d ids: %s", b, i, out);
            if (v != it->valueint)
                fail_msg("--batch %d: greedy id %d is %ld, the reference has %d (output: %s)", b, i,
                         v, it->valueint, out);
            p = end;
            i++;
        }
        assert_int_equal(i, 48);
        free(out);
        free(err);
    }
    cJSON_Delete(g);
}

/* vt run without -m runs the shipped demo model and says so under --stats */
static void test_default_demo_model(void **s)
{
    (void)s;
    const char *args[] = {"run", "-p", "This program is free software;", "-n", "16", "--temp",
                          "0", "--kernels", "scalar", "--stats", NULL};
    char *out, *err;
    int rc = run_vt(args, &out, &err);
    if (rc) fail_msg("vt run without -m exited %d: %s", rc, err);
    if (!strstr(err, "the demo model") || !strstr(err, "vt-demo-qwen35moe.gguf"))
        fail_msg("vt run without -m did not name the demo model: %s", err);
    /* the trained model continues the license text it learned (greedy, the
     * float32 reference kernels: the bf16 reference's first 12 tokens) */
    if (!strstr(out, " you can redistribute it and/or modify\nit under the same terms"))
        fail_msg("the demo model did not write the text: %s", out);
    free(out);
    free(err);
}

/* vt bench --profile: per-op call counts of the demo model's decode steps are
 * exact (8 layers: 6 DeltaNet with qkv, z, beta, alpha and out matrices, 2
 * attention with q, k, v and o; a shared expert of 3 matrices per layer; the
 * LM head; the F32 router and shared-expert gate per layer; the routed
 * experts as one moe_route and one moe_ffn per layer, backend-cpu having the
 * fused ops), and the op times fit in the profiled wall. */
static void test_bench_profile(void **s)
{
    (void)s;
    const char *src = getenv("VT_TEST_SOURCE_DIR");
    assert_non_null(src);
    char m[4096];
    snprintf(m, sizeof m, "%s/models/vt-demo-qwen35moe.gguf", src);
    const char *args[] = {"bench", "-m", m, "-p", "8", "-n", "4", "--reps", "1", "--profile",
                          "--json", "-t", "2", NULL};
    char *out, *err;
    int rc = run_vt(args, &out, &err);
    if (rc) fail_msg("vt bench --profile exited %d: %s", rc, err);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("vt bench --profile --json printed no JSON: %s", out);
    const cJSON *prof = cJSON_GetObjectItem(j, "profile");
    assert_non_null(prof);
    const cJSON *dec = cJSON_GetObjectItem(prof, "decode"), *pre = cJSON_GetObjectItem(prof, "prefill");
    assert_non_null(dec);
    assert_non_null(pre);
    assert_int_equal(cJSON_GetObjectItem(dec, "steps")->valueint, 4);
    assert_int_equal(cJSON_GetObjectItem(pre, "tokens")->valueint, 8);
    struct { const char *op; int calls; } want[] = {
        {"mat_mul Q8_0 (dense)", 4 * 63}, {"moe_route", 4 * 8}, {"moe_ffn", 4 * 8},
        {"mat_mul F32 (dense)", 4 * 16},  {"attention", 4 * 2},
        {"gated_delta_net", 4 * 6},       {"mat_mul Q8_0 (routed experts)", -1},
        {"softmax_topk", -1}, /* -1: not called (the fused path) */
    };
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        int found = -1;
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(dec, "ops"))
            if (!strcmp(cJSON_GetObjectItem(it, "op")->valuestring, want[w].op))
                found = cJSON_GetObjectItem(it, "calls")->valueint;
        if (found != want[w].calls)
            fail_msg("decode profile: %s called %d times, want %d\n%s", want[w].op, found,
                     want[w].calls, out);
    }
    for (int ph = 0; ph < 2; ph++) {
        const cJSON *p = ph ? dec : pre, *it;
        double sum = 0;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(p, "ops")) {
            double sec = cJSON_GetObjectItem(it, "seconds")->valuedouble;
            assert_true(sec >= 0);
            sum += sec;
        }
        double wall = cJSON_GetObjectItem(p, "profiled_seconds")->valuedouble;
        if (!(sum > 0 && sum <= wall * 1.0001))
            fail_msg("profile: ops add up to %.6f s of a %.6f s phase", sum, wall);
    }
    cJSON_Delete(j);
    free(out);
    free(err);
    /* the text form prints both tables */
    const char *a2[] = {"bench", "-m", m, "-p", "8", "-n", "2", "--reps", "1", "--profile", "-t",
                        "2", NULL};
    rc = run_vt(a2, &out, &err);
    if (rc || !strstr(out, "per-op profile, prefill") || !strstr(out, "per-op profile, decode") ||
        !strstr(out, "| moe_ffn") || !strstr(out, "moe: moe_ffn (fused; routing on the device)") ||
        !strstr(out, "decode steps: ops (one backend call per op)"))
        fail_msg("vt bench --profile (text) exited %d:\n%s\n%s", rc, out, err);
    free(out);
    free(err);
}

/* --chat renders with the model's own chat template by default (the demo
 * model's has no "<think>\n" after the generation prompt, vt's built-in
 * qwen35 template does: --no-jinja); --chat-template-file FILE with a file's; a file
 * that cannot be read and a template that raises are errors naming them. */
static void test_jinja_flags(void **s)
{
    (void)s;
    const char *bin = getenv("VT_TEST_SOURCE_DIR");
    assert_non_null(bin);
    char demo[4096];
    snprintf(demo, sizeof demo, "%s/models/vt-demo-qwen35moe.gguf", bin);
    char *out, *err;
    const char *own[] = {"run", "-m", demo, "--chat", "--jinja", "-p", "Hi", "-n", "1", "--temp", "0",
                         "--verbose-prompt", NULL};
    if (run_vt(own, &out, &err)) fail_msg("vt run --chat --jinja failed: %s", err);
    if (!strstr(err, "prompt: \"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n\"\n"))
        fail_msg("--jinja: not the model's own template's prompt: %s", err);
    free(out);
    free(err);
    /* the model's own template is the default; --no-jinja: vt's built-in one */
    const char *deflt[] = {"run", "-m", demo, "--chat", "-p", "Hi", "-n", "1", "--temp", "0",
                           "--verbose-prompt", NULL};
    if (run_vt(deflt, &out, &err)) fail_msg("vt run --chat failed: %s", err);
    if (!strstr(err, "prompt: \"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n\"\n"))
        fail_msg("default: not the model's own template's prompt: %s", err);
    free(out);
    free(err);
    const char *builtin[] = {"run", "-m", demo, "--chat", "--no-jinja", "-p", "Hi", "-n", "1", "--temp",
                             "0", "--verbose-prompt", NULL};
    if (run_vt(builtin, &out, &err)) fail_msg("vt run --chat --no-jinja failed: %s", err);
    if (!strstr(err, "<|im_start|>assistant\n<think>\n\"")) fail_msg("built-in template: %s", err);
    free(out);
    free(err);
    const char *both[] = {"run", "-m", demo, "--jinja", "--no-jinja", "-p", "Hi", "-n", "1", NULL};
    if (!run_vt(both, &out, &err) || !strstr(err, "--no-jinja contradicts --jinja"))
        fail_msg("--jinja --no-jinja: %s", err);
    free(out);
    free(err);
    char tpath[] = "/tmp/vt-cli-tmpl-XXXXXX";
    int fd = mkstemp(tpath);
    assert_true(fd >= 0);
    const char *t1 = "[{% for m in messages %}{{ m.role }}:{{ m.content|upper }}{% endfor %}]";
    assert_int_equal(write(fd, t1, strlen(t1)), (ssize_t)strlen(t1));
    close(fd);
    const char *file[] = {"run", "-m", demo, "--chat", "--system", "sys", "--chat-template-file", tpath,
                          "-p", "Hi", "-n", "1", "--temp", "0", "--verbose-prompt", NULL};
    if (run_vt(file, &out, &err)) fail_msg("vt run --chat-template-file failed: %s", err);
    if (!strstr(err, "prompt: \"[system:SYSuser:HI]\"")) fail_msg("--chat-template-file: %s", err);
    free(out);
    free(err);
    file[6] = "--chat-template"; /* llama.cpp's name for it */
    if (run_vt(file, &out, &err) || !strstr(err, "prompt: \"[system:SYSuser:HI]\""))
        fail_msg("--chat-template FILE: %s", err);
    free(out);
    free(err);
    file[6] = "--chat-template-file";
    FILE *f = fopen(tpath, "w");
    assert_non_null(f);
    fputs("{{ raise_exception('no such thing') }}", f);
    fclose(f);
    if (!run_vt(file, &out, &err) || !strstr(err, "raised: no such thing"))
        fail_msg("a template that raises: %s", err);
    free(out);
    free(err);
    /* llama.cpp's --chat-template: a file here; a template's name is not one */
    const char *named[] = {"run", "-m", demo, "--chat-template", "chatml", "-p", "Hi", "-n", "1", NULL};
    if (!run_vt(named, &out, &err) || !strstr(err, "chatml") || !strstr(err, "named templates"))
        fail_msg("--chat-template chatml: %s", err);
    free(out);
    free(err);
    const char *missing[] = {"run", "-m", demo, "--chat", "--chat-template-file", "/nonexistent/t.jinja",
                             "-p", "Hi", "-n", "1", NULL};
    if (!run_vt(missing, &out, &err) || !strstr(err, "/nonexistent/t.jinja") ||
        strchr(err, '\n') != err + strlen(err) - 1)
        fail_msg("a template file that is not there (one line naming it): %s", err);
    free(out);
    free(err);
    /* a template that does not parse is refused before anything is rendered */
    f = fopen(tpath, "w");
    assert_non_null(f);
    fputs("ok{% if %}", f);
    fclose(f);
    if (!run_vt(file, &out, &err) || !strstr(err, tpath) || !strstr(err, "chat template line 1"))
        fail_msg("a template that does not parse: %s", err);
    free(out);
    free(err);
    unlink(tpath);
    /* --jinja (and --chat-template-file) imply --chat */
    const char *implied[] = {"run", "-m", demo, "--jinja", "-p", "Hi", "-n", "1", "--temp", "0",
                             "--verbose-prompt", NULL};
    if (run_vt(implied, &out, &err) || !strstr(err, "prompt: \"<|im_start|>user\nHi<|im_end|>"))
        fail_msg("--jinja without --chat: %s", err);
    free(out);
    free(err);
}

static void test_chat_template(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    const char *args[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "--chat", "--no-jinja", "--system", "  SYS\n",
                          "-p", "\tUSER ", "--temp", "0", "-n", "1", "--verbose-prompt", NULL};
    char *out, *err;
    int rc = run_vt(args, &out, &err);
    if (rc) fail_msg("vt run --chat exited %d: %s", rc, err);
    /* spec/tokenizers.md §10.1, "System + user, then generate" */
    const char *want = "prompt: \"<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nUSER<|im_end|>\n"
                       "<|im_start|>assistant\n<think>\n\"\n";
    if (!strstr(err, want)) fail_msg("chat prompt not rendered as the spec says:\n%s", err);
    /* <|im_start|> (4071) and <|im_end|> (4072) are single tokens */
    assert_non_null(strstr(err, "prompt tokens"));
    assert_non_null(strstr(err, ": 4071 "));
    assert_non_null(strstr(err, " 4072 "));
    free(out);
    free(err);
}

static float *read_f32(const char *path, size_t *n)
{
    size_t len;
    float *v = vt_test_read_file(path, &len);
    *n = len / 4;
    return v;
}

static void test_logits_and_split(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    cJSON *idx = read_json("qwen35moe-tiny/refs/index.json");
    cJSON *pr = cJSON_GetArrayItem(cJSON_GetObjectItem(idx, "prompts"), 1); /* len8 */
    char toks[1024] = "";
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(pr, "prompt_ids"))
        snprintf(toks + strlen(toks), sizeof toks - strlen(toks), "%s%d", toks[0] ? "," : "", it->valueint);
    char o1[] = "/tmp/vt-logits-XXXXXX", o2[] = "/tmp/vt-logits-XXXXXX", o3[] = "/tmp/vt-logits-XXXXXX";
    close(mkstemp(o1));
    close(mkstemp(o2));
    close(mkstemp(o3));
    char *out, *err;
    const char *a1[] = {"logits", "-m", model("qwen35moe-tiny-bf16.gguf"), "--tokens", toks, "-o", o1,
                        "--kernels", "scalar", NULL};
    if (run_vt(a1, &out, &err)) fail_msg("vt logits failed: %s", err);
    free(out), free(err);
    size_t n, nr;
    float *got = read_f32(o1, &n);
    char *rp = vt_test_path(fx, "qwen35moe-tiny/refs/logits-len8.f32.bin");
    float *ref = read_f32(rp, &nr);
    assert_int_equal(n, nr);
    assert_int_equal(n, 8 * 4096);
    double maxd = 0;
    for (size_t i = 0; i < n; i++) maxd = fmax(maxd, fabs((double)got[i] - ref[i]));
    printf("vt logits (bf16, scalar) vs transformers, len8: max |d| = %.3g\n", maxd);
    assert_true(maxd <= 1e-2);

    const char *a2[] = {"logits", "-m", model("qwen35moe-tiny-q8_0.gguf"), "--tokens", toks, "-o", o2, NULL};
    if (run_vt(a2, &out, &err)) fail_msg("vt logits q8_0 failed: %s", err);
    free(out), free(err);
    const char *a3[] = {"logits", "-m", model("split/qwen35moe-tiny-q8_0-split-00001-of-00003.gguf"),
                        "--tokens", toks, "-o", o3, NULL};
    if (run_vt(a3, &out, &err)) fail_msg("vt logits split failed: %s", err);
    free(out), free(err);
    size_t n2, n3;
    float *l2 = read_f32(o2, &n2), *l3 = read_f32(o3, &n3);
    assert_int_equal(n2, n3);
    assert_memory_equal(l2, l3, n2 * 4);
    unlink(o1), unlink(o2), unlink(o3);
    free(got), free(ref), free(rp), free(l2), free(l3);
    cJSON_Delete(idx);
}

/* Gemma 4 through the whole engine: `vt logits` on every published prompt of
 * the f16 fixture (float32 scalar kernels) against transformers, with the
 * fixture README's criterion; `vt tokenize` adds BOS as the GGUF says. */
static void test_gemma4_logits(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    cJSON *idx = read_json("gemma4-moe-tiny/refs/index.json");
    char *gm = vt_test_path(fx, "gemma4-moe-tiny/gguf/gemma4-moe-tiny-f16.gguf");
    cJSON *pr;
    cJSON_ArrayForEach(pr, cJSON_GetObjectItem(idx, "prompts")) {
        char toks[4096] = "";
        cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(pr, "prompt_ids"))
            snprintf(toks + strlen(toks), sizeof toks - strlen(toks), "%s%d", toks[0] ? "," : "", it->valueint);
        char o[] = "/tmp/vt-glogits-XXXXXX";
        close(mkstemp(o));
        char *out, *err;
        const char *a[] = {"logits", "-m", gm, "--tokens", toks, "-o", o, "--kernels", "scalar", NULL};
        if (run_vt(a, &out, &err)) fail_msg("vt logits (gemma4) failed: %s", err);
        free(out), free(err);
        size_t n, nr;
        float *got = read_f32(o, &n);
        char rel[256];
        snprintf(rel, sizeof rel, "gemma4-moe-tiny/refs/%s", cJSON_GetObjectItem(pr, "file")->valuestring);
        char *rp = vt_test_path(fx, rel);
        float *ref = read_f32(rp, &nr);
        assert_int_equal(n, nr);
        int n_tok = cJSON_GetObjectItem(pr, "n_tokens")->valueint;
        size_t V = n / (size_t)n_tok;
        double maxd = 0;
        for (size_t i = 0; i < n; i++) maxd = fmax(maxd, fabs((double)got[i] - ref[i]));
        cJSON *margin = cJSON_GetObjectItem(pr, "top1_minus_top2_per_position");
        for (int t = 0; t < n_tok; t++) {
            size_t ga = 0, ra = 0;
            for (size_t v = 1; v < V; v++) {
                if (got[t * V + v] > got[t * V + ga]) ga = v;
                if (ref[t * V + v] > ref[t * V + ra]) ra = v;
            }
            if (ga != ra && cJSON_GetArrayItem(margin, t)->valuedouble > 1e-3)
                fail_msg("gemma4 %s position %d: argmax %zu, reference %zu", rel, t, ga, ra);
        }
        printf("vt logits (gemma4 f16, scalar) vs transformers, %s: max |d| = %.3g\n",
               cJSON_GetObjectItem(pr, "name")->valuestring, maxd);
        assert_true(maxd <= 1e-2);
        unlink(o);
        free(got), free(ref), free(rp);
    }
    free(gm);
    cJSON_Delete(idx);
}

static void test_tokenize_info_plugins(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    cJSON *tt = read_json("tokenizers/qwen35-tiny/tokenizer-tests.json");
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(tt, "cases"), 0);
    const char *text = cJSON_GetObjectItem(c0, "text")->valuestring;
    char want[4096] = "";
    cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(c0, "ids"))
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", want[0] ? " " : "", it->valueint);
    char *out, *err;
    const char *a1[] = {"tokenize", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", text, NULL};
    if (run_vt(a1, &out, &err)) fail_msg("vt tokenize failed: %s", err);
    if (strncmp(out, want, strlen(want)) || (out[strlen(want)] != '\n'))
        fail_msg("vt tokenize '%s': got '%s' want '%s'", text, out, want);
    free(out), free(err);
    cJSON_Delete(tt);

    /* --no-special: control-token text in the prompt stays text (issue 17) */
    const char *ns1[] = {"tokenize", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", "<|im_end|>", NULL};
    if (run_vt(ns1, &out, &err)) fail_msg("vt tokenize failed: %s", err);
    if (strcmp(out, "4072\n")) fail_msg("vt tokenize '<|im_end|>': got '%s', want the one id 4072", out);
    free(out), free(err);
    const char *ns2[] = {"tokenize", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", "<|im_end|>",
                         "--no-special", NULL};
    if (run_vt(ns2, &out, &err)) fail_msg("vt tokenize --no-special failed: %s", err);
    if (strstr(out, "4072") || !strchr(out, ' '))
        fail_msg("vt tokenize --no-special '<|im_end|>': got '%s', want several text ids", out);
    free(out), free(err);
    /* vt run --chat --no-special: the user's <|im_start|> is not a role marker; the
     * template's three remain (system-less: user start, assistant start; one end) */
    const char *ns3[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "--chat", "--no-special",
                         "-p", "x<|im_end|><|im_start|>system", "-n", "1", "--temp", "0",
                         "--verbose-prompt", NULL};
    if (run_vt(ns3, &out, &err)) fail_msg("vt run --chat --no-special failed: %s", err);
    const char *toks = strstr(err, "prompt tokens");
    assert_non_null(toks);
    int n71 = 0, n72 = 0;
    for (const char *q = toks; (q = strstr(q, " 407")); q += 4) n71 += !strncmp(q, " 4071", 5) &&
        (q[5] == ' ' || q[5] == '\n'), n72 += !strncmp(q, " 4072", 5) && (q[5] == ' ' || q[5] == '\n');
    if (n71 != 2 || n72 != 1) fail_msg("--no-special prompt holds %d <|im_start|> and %d <|im_end|> "
                                       "(want 2 and 1): %s", n71, n72, toks);
    free(out), free(err);

    const char *a2[] = {"info", "-m", model("split/qwen35moe-tiny-q8_0-split-00001-of-00003.gguf"), NULL};
    if (run_vt(a2, &out, &err)) fail_msg("vt info failed: %s", err);
    assert_non_null(strstr(out, "blk.3.attn_q.weight"));
    assert_non_null(strstr(out, "qwen35moe-tiny-q8_0-split-00003-of-00003.gguf"));
    free(out), free(err);

    const char *a3[] = {"plugins", NULL};
    if (run_vt(a3, &out, &err)) fail_msg("vt plugins failed (%s): %s", out, err);
    assert_non_null(strstr(out, "backend 'cpu'"));
    assert_non_null(strstr(out, "model 'qwen35'"));
    assert_non_null(strstr(out, "qwen35moe"));
    assert_non_null(strstr(out, "mat_mul.Q8_0"));
    free(out), free(err);
}

static void test_refusals(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    char *out, *err;
    const char *a1[] = {"run", "-m", "/nonexistent/model.gguf", "-p", "x", NULL};
    assert_int_equal(run_vt(a1, &out, &err), 1);
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
    free(out), free(err);

    const char *a2[] = {"run", "-m", model("split/qwen35moe-tiny-q8_0-split-00002-of-00003.gguf"), "-p", "x", NULL};
    assert_int_equal(run_vt(a2, &out, &err), 1);
    if (!strstr(err, "qwen35moe-tiny-q8_0-split-00001-of-00003.gguf"))
        fail_msg("later shard refusal does not name the first shard: %s", err);
    free(out), free(err);

    const char *a3[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", "x", "--device", "nosuch", NULL};
    assert_int_equal(run_vt(a3, &out, &err), 1);
    assert_non_null(strstr(err, "nosuch"));
    free(out), free(err);

    /* a backend that declares the ops ABSENT: refused by capability name before any weight is read */
    char fake_dir[4096];
    snprintf(fake_dir, sizeof fake_dir, "%s/tests/fake-plugins/good", getenv("VT_TEST_BINARY_DIR"));
    const char *a5[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", "x", "--plugin-dir", fake_dir,
                        "--device", "fake", NULL};
    assert_int_equal(run_vt(a5, &out, &err), 1);
    if (!strstr(err, "model 'qwen35' needs capability '") ||
        !strstr(err, "which backend 'fake' declares ABSENT (reason: fake backend computes nothing)"))
        fail_msg("capability refusal not as documented: %s", err);
    free(out), free(err);

    const char *a4[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", "x", "--temp", "abc", NULL};
    assert_int_equal(run_vt(a4, &out, &err), 2);
    assert_non_null(strstr(err, "--temp"));
    free(out), free(err);
}

/* vt config --show: values with their origin; --set wins and says so; a bad
 * override is refused naming it; --set reaches vt run (a KV cache of 4 tokens
 * cannot hold the prompt, and the refusal shows the override applied). */
static void test_config_show_and_set(void **s)
{
    (void)s;
    char *out, *err;
    const char *a1[] = {"config", "--show", "--set", "cuda.expert_cache.headroom=2GiB", NULL};
    if (run_vt(a1, &out, &err)) fail_msg("vt config --show failed: %s", err);
    if (!strstr(out, "platforms.cuda.expert_cache.headroom = 2 GiB (2147483648)") ||
        !strstr(out, "--set"))
        fail_msg("override not shown with its origin:\n%s", out);
    if (!strstr(out, "defaults.platform = cpu") || !strstr(out, "residency.yaml:"))
        fail_msg("file values not shown with file:line:col:\n%s", out);
    free(out), free(err);

    const char *a2[] = {"config", "--show", "--set", "cuda.expert_cache.headroom=2XB", NULL};
    assert_int_equal(run_vt(a2, &out, &err), 1);
    if (!strstr(err, "cuda.expert_cache.headroom=2XB")) fail_msg("bad override not named: %s", err);
    free(out), free(err);

    const char *a2b[] = {"config", "--set", "cpu.expert_cache.io=sideways", NULL};
    assert_int_equal(run_vt(a2b, &out, &err), 1);
    if (!strstr(err, "cpu.expert_cache.io=sideways") || !strstr(err, "pread, direct"))
        fail_msg("bad I/O mode not refused by name: %s", err);
    free(out), free(err);
    const char *a2c[] = {"config", "--show", "--set", "cpu.expert_cache.io=direct", NULL};
    if (run_vt(a2c, &out, &err)) fail_msg("vt config --set io=direct: %s", err);
    if (!strstr(out, "platforms.cpu.expert_cache.io = direct")) fail_msg("io not shown:\n%s", out);
    free(out), free(err);

    const char *a3[] = {"config", "--set", "cpu.no_such_key=1", NULL};
    assert_int_equal(run_vt(a3, &out, &err), 1);
    if (!strstr(err, "no_such_key")) fail_msg("unknown key not named: %s", err);
    free(out), free(err);

    if (!(fx = vt_test_fixtures())) return;
    /* the override reaches the engine: the KV length comes from cpu.kv_cache_tokens */
    const char *a4[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p",
                        "one two three four five six seven eight nine ten", "-n", "1",
                        "--set", "cpu.kv_cache_tokens=4", NULL};
    assert_int_equal(run_vt(a4, &out, &err), 1);
    if (!strstr(err, "the context holds 4")) fail_msg("kv_cache_tokens override not applied: %s", err);
    free(out), free(err);
}


/* Nothing silently ignored (issue 17): an empty --device is a usage error; an
 * environment setting with a value no code knows is a WARN that names it. */
static void test_settings_not_ignored(void **s)
{
    (void)s;
    if (!(fx = vt_test_fixtures())) return;
    char *out, *err;
    const char *a1[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", "x", "-n", "1",
                        "--device", "", NULL};
    int rc = run_vt(a1, &out, &err);
    if (rc != 2 || !strstr(err, "--device")) fail_msg("--device \"\" exited %d: %s", rc, err);
    free(out), free(err);

    /* --set naming a platform this run does not use: a WARN naming the key */
    const char *a4[] = {"fit", "-m", model("qwen35moe-tiny-bf16.gguf"), "--device", "cpu", "--set",
                        "cpux.experts=streamed", NULL};
    rc = run_vt(a4, &out, &err);
    if (rc != 0 || !strstr(err, "cpux.experts=streamed") || !strstr(err, "'cpu'"))
        fail_msg("--set cpux.experts=streamed on device cpu (exit %d): %s", rc, err);
    free(out), free(err);

    /* the expert cache of a resident platform: a WARN naming the key (issue 46 item 5) */
    const char *w5[] = {"fit", "-m", model("qwen35moe-tiny-bf16.gguf"), "--device", "cpu", "--set",
                        "cpu.expert_cache.arena=1GiB", NULL};
    rc = run_vt(w5, &out, &err);
    if (rc != 0 || !strstr(err, "cpu.expert_cache.arena=1GiB") || !strstr(err, "resident"))
        fail_msg("--set cpu.expert_cache.arena with resident experts (exit %d): %s", rc, err);
    free(out), free(err);
    const char *w6[] = {"fit", "-m", model("qwen35moe-tiny-bf16.gguf"), "--device", "cpu", "--set",
                        "cpu.experts=streamed", "--set", "cpu.expert_cache.arena=1GiB", NULL};
    rc = run_vt(w6, &out, &err);
    if (rc != 0 || strstr(err, "no expert cache"))
        fail_msg("--set cpu.expert_cache.arena with streamed experts (exit %d): %s", rc, err);
    free(out), free(err);

    /* more threads than cores: a WARN naming --threads, before anything loads */
    const char *w7[] = {"run", "-m", "/nonexistent.gguf", "-p", "x", "--threads", "4096", NULL};
    rc = run_vt(w7, &out, &err);
    if (rc == 0 || !strstr(err, "--threads 4096") || !strstr(err, "online cores"))
        fail_msg("--threads 4096 (exit %d): %s", rc, err);
    free(out), free(err);

    /* VT_CONFIG naming a missing file: the error names the variable */
    setenv("VT_CONFIG", "/nonexistent/residency.yaml", 1);
    const char *w8[] = {"config", NULL};
    rc = run_vt(w8, &out, &err);
    unsetenv("VT_CONFIG");
    if (rc == 0 || !strstr(err, "VT_CONFIG=/nonexistent/residency.yaml"))
        fail_msg("VT_CONFIG naming a missing file (exit %d): %s", rc, err);
    free(out), free(err);

    /* a tokenizer error of vt tokenize names the file (issue 17) */
    char *zoo = vt_test_path(fx, "quant-zoo/quant-zoo.gguf");
    const char *a5[] = {"tokenize", "-m", zoo, "-p", "x", NULL};
    rc = run_vt(a5, &out, &err);
    if (rc != 1 || !strstr(err, zoo) || !strstr(err, "tokenizer"))
        fail_msg("vt tokenize on a file without a tokenizer (exit %d): %s", rc, err);
    free(out), free(err), free(zoo);

    /* an option the command does not read is a usage error naming it (issue 17) */
    static const struct { const char *args[8]; const char *named; } na[] = {
        {{"fit", "-p", "x", "--chat", NULL}, "-p/--prompt"},
        {{"fit", "--chat", NULL}, "--chat"},
        {{"bench", "--ids", "--tokens", "9", NULL}, "--ids"},
        {{"info", "-m", "x.gguf", "--device", "cpu", NULL}, "--device"},
        {{"plugins", "--temp", "0", NULL}, "--temp"},
        {{"mkmodel", "-o", "/tmp/vt-cli-never.gguf", "--ctx", "9", NULL}, "--ctx"},
        {{"tokenize", "-m", "x.gguf", "-p", "x", "--n-layer", "2", NULL}, "--n-layer"},
    };
    for (size_t i = 0; i < sizeof na / sizeof na[0]; i++) {
        rc = run_vt(na[i].args, &out, &err);
        if (rc != 2 || !strstr(err, na[i].named) || !strstr(err, "does not apply"))
            fail_msg("vt %s with %s (exit %d): %s", na[i].args[0], na[i].named, rc, err);
        free(out), free(err);
    }
    assert_int_equal(access("/tmp/vt-cli-never.gguf", F_OK), -1);

    setenv("VT_LOG_LEVEL", "bogus", 1);
    const char *a2[] = {"plugins", NULL};
    rc = run_vt(a2, &out, &err);
    unsetenv("VT_LOG_LEVEL");
    if (rc != 0 || !strstr(err, "VT_LOG_LEVEL=bogus")) fail_msg("VT_LOG_LEVEL=bogus (exit %d): %s", rc, err);
    free(out), free(err);

    /* the models' comparison switches: a value other than 0 or 1 is named */
    static const char *const sw[] = {"VT_MOE_FFN", "VT_GRAPH", "VT_FUSED_OPS"};
    for (size_t i = 0; i < 3; i++) {
        setenv(sw[i], "banana", 1);
        const char *a6[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", "x", "-n", "1",
                            "--device", "cpu", NULL};
        rc = run_vt(a6, &out, &err);
        unsetenv(sw[i]);
        char want[64];
        snprintf(want, sizeof want, "%s=banana", sw[i]);
        if (rc != 0 || !strstr(err, want)) fail_msg("%s (exit %d): %s", want, rc, err);
        free(out), free(err);
    }

    setenv("VT_CPU_INT8_DOT", "banana", 1);
    const char *a3[] = {"run", "-m", model("qwen35moe-tiny-bf16.gguf"), "-p", "x", "-n", "1",
                        "--device", "cpu", NULL};
    rc = run_vt(a3, &out, &err);
    unsetenv("VT_CPU_INT8_DOT");
    if (rc != 0 || !strstr(err, "VT_CPU_INT8_DOT=banana"))
        fail_msg("VT_CPU_INT8_DOT=banana (exit %d): %s", rc, err);
    free(out), free(err);
}


/* A vt copied out of its build tree reads neither the source tree's
 * conf/residency.yaml nor anything else of the build (issue 17): only its
 * prefix, --config and VT_CONFIG. */
static void test_copied_vt_reads_no_source_config(void **s)
{
    (void)s;
    char d[] = "/tmp/vt-copy-XXXXXX";
    assert_non_null(mkdtemp(d));
    char cmd[9000], bin[300], outp[300];
    snprintf(bin, sizeof bin, "%s/vt", d);
    snprintf(outp, sizeof outp, "%s/out", d);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && env -u VT_CONFIG '%s' config > '%s' 2>&1", vt_test_vt_bin(),
             bin, bin, outp);
    int rc = system(cmd);
    char *out = vt_test_read_file(outp, NULL);
    if (rc != 0 || !strstr(out, "# residency config: (built-in defaults)"))
        fail_msg("a copied vt (%s config, exit %d) read: %s", bin, rc, out);
    free(out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    assert_int_equal(system(cmd), 0);
}

/* vt bench --parallel 3: rows for 1, 2 and 3 streams, and the 3-wide round's
 * profile: the routed experts run once per layer per round whatever the
 * number of streams (grouped across sequences), each sequence's mixer once
 * per layer per round */
static void test_bench_parallel(void **s)
{
    (void)s;
    const char *src = getenv("VT_TEST_SOURCE_DIR");
    assert_non_null(src);
    char m[4096];
    snprintf(m, sizeof m, "%s/models/vt-demo-qwen35moe.gguf", src);
    const char *args[] = {"bench", "-m", m, "-p", "8", "-n", "4", "--reps", "1", "--parallel", "3",
                          "--profile", "--json", "-t", "2", NULL};
    char *out, *err;
    int rc = run_vt(args, &out, &err);
    if (rc) fail_msg("vt bench --parallel 3 exited %d: %s", rc, err);
    cJSON *j = cJSON_Parse(out);
    if (!j) fail_msg("vt bench --parallel --json printed no JSON: %s", out);
    const cJSON *par = cJSON_GetObjectItem(j, "parallel");
    if (cJSON_GetArraySize(par) != 3) fail_msg("want rows for 1, 2, 3 streams: %s", out);
    for (int i = 0; i < 3; i++) {
        const cJSON *r = cJSON_GetArrayItem(par, i);
        assert_int_equal(cJSON_GetObjectItem(r, "streams")->valueint, i + 1);
        double b = cJSON_GetObjectItem(r, "batched_tok_s")->valuedouble;
        double o = cJSON_GetObjectItem(r, "one_by_one_tok_s")->valuedouble;
        if (!(b > 0 && b < 1e9 && o > 0 && o < 1e9)) fail_msg("row %d: %g and %g tok/s", i, b, o);
    }
    const cJSON *prof = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "profile_parallel"),
                                            "batched decode");
    if (!prof) fail_msg("no profile_parallel: %s", out);
    assert_int_equal(cJSON_GetObjectItem(prof, "steps")->valueint, 4);
    assert_int_equal(cJSON_GetObjectItem(prof, "tokens")->valueint, 12);
    struct { const char *op; int calls; } want[] = {
        {"moe_ffn", 4 * 8}, {"moe_route", 4 * 8}, {"gated_delta_net", 4 * 6 * 3},
        {"attention", 4 * 2 * 3},
    };
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        int found = -1;
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItem(prof, "ops"))
            if (!strcmp(cJSON_GetObjectItem(it, "op")->valuestring, want[w].op))
                found = cJSON_GetObjectItem(it, "calls")->valueint;
        if (found != want[w].calls)
            fail_msg("batched decode profile: %s called %d times, want %d\n%s", want[w].op, found,
                     want[w].calls, out);
    }
    cJSON_Delete(j);
    free(out);
    free(err);
}

/* vt --help lists every subcommand once (serve was listed twice) */
static void test_help_lists_each_command_once(void **s)
{
    (void)s;
    const char *args[] = {"--help", NULL};
    char *out, *err;
    int rc = run_vt(args, &out, &err);
    if (rc != 0) fail_msg("vt --help exited %d: %s", rc, err);
    static const char *const cmds[] = {"run", "logits", "tokenize", "info", "plugins", "config",
                                       "fit", "mkmodel", "bench", "serve"};
    char *text = strstr(out, "commands:") ? strstr(out, "commands:") : strstr(err, "commands:");
    if (!text) fail_msg("vt --help has no 'commands:' section");
    char *end = strstr(text, "common options:"); /* the command list only */
    if (end) *end = '\0';
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char key[32];
        snprintf(key, sizeof key, "\n  %s ", cmds[i]);
        int n = 0;
        for (const char *p = text; (p = strstr(p, key)); p++) n++;
        if (n != 1) fail_msg("vt --help lists '%s' %d times", cmds[i], n);
    }
    free(out);
    free(err);
}

/* vt <cmd> --help prints that command's usage and options only (issue 44:
 * every command printed the same 70-line global help) */
static void test_command_help(void **s)
{
    (void)s;
    static const struct {
        const char *cmd, *has[3], *lacks[3];
    } c[] = {
        {"run", {"--temp", "--chat", "--ctx"}, {"--port", "--tokens", "--n-embd"}},
        {"info", {"--model", "usage: vt info -m MODEL", NULL}, {"--temp", "--ctx", "--port"}},
        {"serve", {"--port", "--api-key", "--temp"}, {"--ids", "--tokens", "--n-embd"}},
        {"chat", {"--system", "--temp", "--no-jinja"}, {"--port", "--tokens", "--chat "}},
        {"mkmodel", {"--n-embd", "--type", "--nextn"}, {"--port", "--temp", "--model"}},
        {"bench", {"--reps", "--profile", "--trace"}, {"--port", "--chat", "--n-embd"}},
        {"fit", {"--parallel", "--device", NULL}, {"--temp", "--port", "--reps"}},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const char *args[] = {c[i].cmd, "--help", NULL};
        char *out, *err;
        int rc = run_vt(args, &out, &err);
        if (rc != 0) fail_msg("vt %s --help exited %d: %s", c[i].cmd, rc, err);
        char usage[64];
        snprintf(usage, sizeof usage, "usage: vt %s ", c[i].cmd);
        if (!strstr(out, usage)) fail_msg("vt %s --help: no '%s' line:\n%s", c[i].cmd, usage, out);
        if (strstr(out, "commands:")) fail_msg("vt %s --help prints the global help", c[i].cmd);
        for (int k = 0; k < 3; k++) {
            if (c[i].has[k] && !strstr(out, c[i].has[k]))
                fail_msg("vt %s --help lacks %s", c[i].cmd, c[i].has[k]);
            if (c[i].lacks[k] && strstr(out, c[i].lacks[k]))
                fail_msg("vt %s --help lists %s, which it does not read", c[i].cmd, c[i].lacks[k]);
        }
        free(out);
        free(err);
    }
}

/* llama.cpp's flags (issue 46 item 6): each is named with what vt does
 * instead, exit 2, before anything is loaded (no model file is needed);
 * "-ngl 99" is not read as "-n gl". The same letters as a vt option's
 * argument stay that argument. */
static void test_llama_flags(void **s)
{
    (void)s;
    static const struct {
        const char *flag, *value, *hint;
    } c[] = {
        {"-ngl", "99", "--device"},          {"--n-gpu-layers", "99", "--device"},
        {"-np", "4", "--parallel"},          {"-c", "4096", "--ctx"},
        {"--ctx-size=4096", NULL, "--ctx"},  {"-fa", NULL, "fused"},
        {"--n-cpu-moe", "10", "streamed"},   {"-ot", "exps=CPU", "residency config"},
        {"-b", "256", "--batch"},            {"-i", NULL, "vt chat"},
        {"-hf", "org/model", "-m"},          {"-r", "x", "reverse"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const char *args[] = {"run", "-m", "/nonexistent.gguf", c[i].flag, c[i].value, NULL};
        char *out, *err;
        int rc = run_vt(args, &out, &err);
        char want[64];
        snprintf(want, sizeof want, "'%s' is a llama.cpp flag", c[i].flag);
        if (rc != 2 || !strstr(err, want) || !strstr(err, c[i].hint))
            fail_msg("vt run %s %s: exit %d, want 2 naming the flag and '%s':\n%s", c[i].flag,
                     c[i].value ? c[i].value : "", rc, c[i].hint, err);
        free(out), free(err);
    }
    /* "-c" as the prompt is the prompt: the refusal is the missing model's */
    const char *args[] = {"run", "-m", "/nonexistent.gguf", "-p", "-c", NULL};
    char *out, *err;
    int rc = run_vt(args, &out, &err);
    if (rc == 0 || strstr(err, "llama.cpp") || !strstr(err, "/nonexistent.gguf"))
        fail_msg("vt run -p -c: exit %d, want the missing model named:\n%s", rc, err);
    free(out), free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama_flags),
        cmocka_unit_test(test_help_lists_each_command_once),
        cmocka_unit_test(test_command_help),
        cmocka_unit_test(test_greedy_ids),
        cmocka_unit_test(test_trained_history_batches),
        cmocka_unit_test(test_default_demo_model),
        cmocka_unit_test(test_bench_profile),
        cmocka_unit_test(test_bench_parallel),
        cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_jinja_flags),
        cmocka_unit_test(test_logits_and_split),
        cmocka_unit_test(test_tokenize_info_plugins),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_settings_not_ignored),
        cmocka_unit_test(test_copied_vt_reads_no_source_config),
        cmocka_unit_test(test_config_show_and_set),
        cmocka_unit_test(test_gemma4_logits),
    };
    return vt_test_exit(cmocka_run_group_tests(tests, NULL, NULL));
}

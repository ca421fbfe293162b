/*
 * cli_llama_flags.c - llama.cpp's command-line flags that people bring to
 * vt, each with what vt does instead (or that it has no such thing), so that
 * `vt run -ngl 99` says so rather than reading "-n gl".
 */
#include <stddef.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *flags[5]; /* the short and long spellings, NULL-padded */
    const char *hint;
} llama_flags[] = {
    {{"-ngl", "--n-gpu-layers", "--gpu-layers", "-ngld", "--n-gpu-layers-draft"},
     "vt runs every layer on the platform --device names (--device cuda: everything on the GPU); "
     "routed experts that do not fit are streamed from host memory by default (cuda.experts = "
     "auto; 'vt fit' shows the plan)"},
    {{"--n-cpu-moe", "-ncmoe", "--cpu-moe", "-cmoe"},
     "routed experts that do not fit on the GPU stay in host memory and are streamed through it "
     "(cuda.experts = auto or streamed, the host tier expert_cache.host_arena); vt does not run "
     "experts on the CPU beside a GPU"},
    {{"-ot", "--override-tensor"},
     "tensor placement comes from the residency config (conf/residency.yaml, --set KEY=VALUE; "
     "'vt config --show' lists the keys)"},
    {{"-np"}, "use --parallel N (vt serve)"},
    {{"-c", "--ctx-size"}, "use --ctx N"},
    {{"-b", "--batch-size", "-ub", "--ubatch-size"}, "use --batch N (the prefill chunk)"},
    {{"-tb", "--threads-batch"}, "use --threads N (one count for prefill and decode)"},
    {{"-s"}, "use --seed S"},
    {{"-fa", "--flash-attn"}, "vt's attention is always one fused kernel: drop the flag"},
    {{"-i", "--interactive"}, "for a conversation in the terminal use 'vt chat' (or vt run -cnv)"},
    {{"-r", "--reverse-prompt"},
     "vt stops at the model's end-of-generation tokens (--ignore-eos to go on); there is no reverse "
     "prompt"},
    {{"-mg", "--main-gpu", "-ts", "--tensor-split", "-sm"}, "vt uses one GPU; there is no split"},
    {{"--split-mode"}, "vt uses one GPU; there is no split"},
    {{"--mlock", "--no-mmap", "--mmap"},
     "vt maps the file and places the weights as the residency config says; on the CPU it reads "
     "them at load (--no-prefault: at first use instead)"},
    {{"-ctk", "--cache-type-k", "-ctv", "--cache-type-v"},
     "vt's KV cache is float32; there is no such option"},
    {{"-hf", "-hfr", "--hf-repo", "-hff", "--hf-file"},
     "vt does not download models: pass the GGUF file with -m"},
};

const char *cli_llama_hint(const char *arg)
{
    size_t n = strlen(arg);
    const char *eq = arg[0] == '-' && arg[1] == '-' ? strchr(arg, '=') : NULL;
    if (eq) n = (size_t)(eq - arg); /* --ctx-size=4096 */
    for (size_t i = 0; i < sizeof llama_flags / sizeof llama_flags[0]; i++)
        for (size_t k = 0; k < 5 && llama_flags[i].flags[k]; k++)
            if (strlen(llama_flags[i].flags[k]) == n && !strncmp(llama_flags[i].flags[k], arg, n))
                return llama_flags[i].hint;
    return NULL;
}

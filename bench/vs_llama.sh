#!/usr/bin/env bash
# vs_llama.sh - vt next to llama.cpp on the same machine and the same files
# (the shapes of stream_vs_anchor.sh, Q4_K_M, made by `vt mkmodel`):
#   vt resident                     every expert on the GPU
#   vt streamed, 25% + host tier    the defaults of a 25% device arena
#   llama.cpp -ngl 99               everything on the GPU
#   llama.cpp -ot exps=CPU          every routed expert computed by the CPU
#                                   (the anchor's configuration)
#   llama.cpp, a share on the GPU   the routed experts of the first layers on
#                                   the GPU, the rest on the CPU: the static
#                                   split llama.cpp offers for a memory budget
#                                   (Qwen: 2 of 8 layers = 25%; Gemma 4: 1 and
#                                   2 of 6 layers = 17% and 33%)
# Prints decode and prefill tok/s of each, one line a run.
#   bench/vs_llama.sh [--type T] VT_BUILD_DIR LLAMA_BENCH
# --type: the file's weight type or mix as `vt mkmodel --type` takes it
# (default q4_k_m; the low-bit mixes ud-iq2_xs, ud-iq1_s, ud-iq1_xxxs, whose
# IQ1_XXXS experts need llama.cpp's iq1-narrow branch, 36fe8e1cc).
# LLAMA_BENCH: llama.cpp's llama-bench built with CUDA (the project's anchor
# figures come from llama.cpp d32676d77: cmake -DGGML_CUDA=ON, target
# llama-bench). Environment: MODEL_DIR (/tmp), PROMPT (512), GEN (128),
# REPS (2), THREADS (the host's logical CPUs), SHAPES ("qwen gemma"),
# SPLITS (1; 0 skips llama.cpp's static layer splits).
set -euo pipefail
type=q4_k_m
if [ "${1:-}" = --type ]; then
  type=${2:?--type needs a type}
  shift 2
fi
build=${1:?usage: bench/vs_llama.sh VT_BUILD_DIR LLAMA_BENCH}
lb=${2:?usage: bench/vs_llama.sh VT_BUILD_DIR LLAMA_BENCH}
vt=$build/bin/vt
dir=${MODEL_DIR:-/tmp}
prompt=${PROMPT:-512}
gen=${GEN:-128}
reps=${REPS:-2}
threads=${THREADS:-$(nproc)}
here=$(cd "$(dirname "$0")" && pwd)
QWEN=$(sed -n 's/^QWEN="\(.*\)"$/\1/p' "$here/stream_vs_anchor.sh")
GEMMA=$(sed -n 's/^GEMMA="\(.*\)"$/\1/p' "$here/stream_vs_anchor.sh")
: "${QWEN:?the QWEN shape was not found in bench/stream_vs_anchor.sh}"
: "${GEMMA:?the GEMMA shape was not found in bench/stream_vs_anchor.sh}"
log=$(mktemp /tmp/vs-llama-XXXXXX.log)
json=$(mktemp /tmp/vs-llama-XXXXXX.json)
trap 'rm -f "$log" "$json"' EXIT
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true

vt_run() { # label, model, options
  local label=$1 model=$2; shift 2
  if ! $vt bench -m "$model" --device cuda -p "$prompt" -n "$gen" --reps "$reps" --json \
       --no-progress "$@" > "$json" 2> "$log"; then
    echo "$label: vt bench failed:"; tail -5 "$log"; return 0
  fi
  python3 -c "import json,sys; j=json.load(open(sys.argv[2])); \
print('%-44s decode %8.1f tok/s  prefill %9.1f tok/s' % (sys.argv[1], j['decode_tok_s'], j['prefill_tok_s']))" "$label" "$json"
}
llama_run() { # label, model, llama-bench options
  local label=$1 model=$2; shift 2
  if ! "$lb" -m "$model" -p "$prompt" -n "$gen" -r "$reps" -o json "$@" > "$json" 2> "$log"; then
    echo "$label: llama-bench failed:"; tail -5 "$log"; return 0
  fi
  python3 -c "import json,sys; r=json.load(open(sys.argv[2])); \
t={('pp' if x['n_prompt'] else 'tg'): x['avg_ts'] for x in r}; \
print('%-44s decode %8.1f tok/s  prefill %9.1f tok/s' % (sys.argv[1], t['tg'], t['pp']))" "$label" "$json"
}

for shape in ${SHAPES:-qwen gemma}; do
  if [ "$shape" = qwen ]; then opts=$QWEN; n_layer=8; shares="2"; else opts=$GEMMA; n_layer=6; shares="1 2"; fi
  model=$dir/vt-anchor-$shape-$type.gguf
  # shellcheck disable=SC2086 # opts: one word per option
  [ -f "$model" ] || $vt mkmodel -o "$model" --type "$type" $opts > /dev/null
  exp_bytes=$({ $vt fit -m "$model" --device cuda --set cuda.experts=streamed || true; } |
              awk '/routed experts/ {print $NF; exit}')
  if [ -z "$exp_bytes" ]; then echo "$shape: vt fit printed no routed-expert bytes"; exit 1; fi
  echo "== $shape shape, $type, $(numfmt --to=iec "$exp_bytes") of routed experts, p$prompt n$gen"
  vt_run "vt resident" "$model" --set cuda.experts=resident
  vt_run "vt streamed, 25% arena + host tier" "$model" --set cuda.experts=streamed \
    --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100))
  llama_run "llama.cpp -ngl 99" "$model" -ngl 99
  llama_run "llama.cpp -ot exps=CPU" "$model" -ngl 99 -ot exps=CPU -t "$threads"
  [ "${SPLITS:-1}" = 0 ] && shares=""
  for k in $shares; do
    # the experts of layers k .. n_layer-1 on the CPU, of layers 0 .. k-1 on the GPU
    re="blk\\.($(seq -s '|' "$k" $((n_layer - 1))))\\.ffn_.*_exps=CPU"
    llama_run "llama.cpp, $k of $n_layer layers' experts on GPU" "$model" -ngl 99 -ot "$re" -t "$threads"
  done
done

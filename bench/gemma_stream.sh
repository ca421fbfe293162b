#!/usr/bin/env bash
# gemma_stream.sh - a generated gemma4 MoE model with gemma-4-26B-A4B layer
# shapes (D 2816, 128 experts top-8, expert ff 704, shared MLP 2112, sliding
# window 1024, (S x5, F) pattern, head dims 256/512, vocab 262144) and 12
# layers in Q8_0 (about 10.5 GB): decode and prefill tokens/s with experts
# resident and streamed (100/50/25% and the minimum arena) on DEVICE, then
# resident and minimum-arena on the CPU for comparison.
#   bench/gemma_stream.sh [BUILD_DIR] [DEVICE]   (DEVICE: cuda (default) or cpu)
set -euo pipefail
build=${1:-build}
dev=${2:-cuda}
export TYPE=q8_0 KEEP=1
export SHAPE="--arch gemma4 --n-layer 12 --n-embd 2816 --n-head 16 --n-head-kv 8 --n-head-kv-full 2 --head-dim 512 --head-dim-swa 256 --n-rot 512 --n-ff 2112 --n-expert 128 --n-expert-used 8 --n-ff-exp 704 --sliding-window 1024 --full-attention-interval 6 --k-eq-v 1 --n-vocab 262144"
export PROMPT=${PROMPT:-128} GEN=${GEN:-32} REPS=${REPS:-1}
dir=${MODEL_DIR:-/tmp}
bash "$(dirname "$0")/stream_sweep.sh" "$build" "$dev"
if [ "$dev" != cpu ]; then
  echo
  echo "== the same model on --device cpu: resident, and streamed through the minimum arena"
  for e in resident "streamed --set cpu.expert_cache.slots=16"; do
    $build/bin/vt bench -m "$dir/vt-sweep-q8_0.gguf" --device cpu -p 32 -n 16 --reps 1 --set cpu.experts=$e | grep -E "experts|prefill|decode"
  done
fi
rm -f "$dir/vt-sweep-q8_0.gguf"

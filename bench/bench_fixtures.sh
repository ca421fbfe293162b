#!/usr/bin/env bash
# Prefill (128-token prompt) and decode tokens/s of the tiny fixture models,
# 1 and 2 threads, fast and reference kernels. Not run by CI.
#   usage: bench/bench_fixtures.sh [build-dir] [fixtures-dir]
set -euo pipefail
build=${1:-build}
fx=${2:-${VT_FIXTURES_DIR:-../shared/fixtures}}
vt=$build/bin/vt
for f in qwen35moe-tiny-bf16 qwen35moe-tiny-q8_0; do
  for t in 1 2; do
    for k in auto scalar; do
      echo "== $f threads=$t kernels=$k"
      "$vt" bench -m "$fx/qwen35moe-tiny/gguf/$f.gguf" -t "$t" --kernels "$k" \
        --n-prompt 128 -n 128 --reps 7 | grep -E 'prefill|decode'
    done
  done
done

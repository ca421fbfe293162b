#!/usr/bin/env bash
# stream_vs_anchor.sh - issue 15's table on the H200 (< 10 minutes): expert
# streaming against the anchor (llama.cpp with its experts on the CPU: 227
# decode / 784 prefill tok/s for the Qwen shape, 152 / 769 for the Gemma 4
# shape, measured with the same kind of file; see the issue).
#
# For each shape, a Q4_K_M model made by `vt mkmodel` (Qwen3.5-35B-A3B layer
# shapes with 8 layers: 3.6 GiB of routed experts; Gemma 4 26B-A4B shapes with
# 6 layers), `vt bench` on --device cuda:
#   resident                   every expert in device memory
#   dev 25% + host             device arena 25% of the expert bytes, the host
#                              tier holding the rest (expert_cache.host_arena auto),
#                              prefetch off
#   dev 10% + host             the same with 10%
#   dev 25% + host, one slot size   expert_cache.slot_classes: off (every slot the
#                              largest slice, as before slot classes)
#   dev 25%/10% + host + prefetch   the same with expert_cache.prefetch:
#                              next-layer (copies of the predicted experts on a
#                              second queue while the layer before computes; what
#                              prefetch: auto, the default, gives on CUDA): of the
#                              likeliest 6 of the 8 predicted (prefetch_top: auto),
#                              at most 3 copied (prefetch_max: auto)
#   dev 25% + host + prefetch, no cap   prefetch_top 5, prefetch_max 1024 (the
#                              default before prefetch_max)
#   dev 25% + host + prefetch, matrix slots   expert_cache.slot_unit: matrix (a
#                              slot per matrix of an expert, three copies per miss;
#                              every other row: auto, a whole expert per slot)
#   dev 25% + host + prefetch of every prediction   prefetch_top and prefetch_max
#                              1024: all 8 copied ahead (what prefetch did before
#                              prefetch_top)
#   dev 25%, file only         no host tier: every device miss reads the file
# and prints decode/prefill tok/s, the decode hit rate of each tier and of
# Belady's optimum on the same routing, fill issue GB/s (device-tier fills as
# the CPU sees them: with the host tier they are queued copies, so this is
# not the copy rate), file read GB/s, peak RSS and fallbacks; then the H2D
# rate of the decode copies (the profile times each layer's copies) against
# bench_h2d's pinned figure, measured first in the same run.
#   bench/stream_vs_anchor.sh [BUILD_DIR]
# Environment: MODEL_DIR (/tmp), PROMPT (512), GEN (128), REPS (3), SHAPES
# ("qwen gemma"), PROF_DIR (keep each shape's decode profile there), TRACE_DIR
# (write each shape's routing trace at 25% + host there).
set -euo pipefail
build=${1:-build}
vt=$build/bin/vt
dir=${MODEL_DIR:-/tmp}
prompt=${PROMPT:-512}
gen=${GEN:-128}
reps=${REPS:-3}
QWEN="--n-layer 8 --n-embd 2048 --n-expert 256 --n-expert-used 8 --n-ff-exp 512 --n-ff-shexp 512 --n-head 16 --n-head-kv 2 --head-dim 256 --n-rot 64 --ssm-d-k 128 --ssm-n-k 16 --ssm-n-v 32 --n-vocab 248320"
GEMMA="--arch gemma4 --n-layer 6 --n-embd 2816 --n-head 16 --n-head-kv 8 --n-head-kv-full 2 --head-dim 512 --head-dim-swa 256 --n-rot 512 --n-ff 2112 --n-expert 128 --n-expert-used 8 --n-ff-exp 704 --sliding-window 1024 --full-attention-interval 6 --k-eq-v 1 --n-vocab 262144"

echo "== H2D copy bandwidth of backend-cuda (one Q4_K expert gate matrix: 589824 bytes)"
$build/bin/bench_h2d $build/lib/vt/plugins/backend-cuda.so 589824 2048 || true

for shape in ${SHAPES:-qwen gemma}; do
  if [ "$shape" = qwen ]; then opts=$QWEN; anchor="227 decode / 784 prefill"; else opts=$GEMMA; anchor="152 decode / 769 prefill"; fi
  model=$dir/vt-anchor-$shape-q4_k_m.gguf
  [ -f "$model" ] || $vt mkmodel -o "$model" --type q4_k_m $opts > /dev/null
  fit=$($vt fit -m "$model" --device cuda --set cuda.experts=streamed || true)
  exp_bytes=$(echo "$fit" | awk '/routed experts/ {print $NF; exit}')
  echo
  echo "== $shape shape, Q4_K_M, $(numfmt --to=iec "$exp_bytes") of routed experts; anchor (llama.cpp -ot exps=CPU): $anchor tok/s"
  echo "| run | device arena | host tier | prefill tok/s | decode tok/s | device hit | Belady | host hit | prefetch used | demand hit | ahead / wasted MiB per token | fill issue GB/s | file GB/s | peak RSS MiB | fallbacks |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  run() { # label, options
    local label=$1; shift
    $vt bench -m "$model" --device cuda -p "$prompt" -n "$gen" --reps "$reps" --json --no-progress "$@" > /tmp/vt-anchor.json
    python3 - "$label" /tmp/vt-anchor.json <<'PY'
import json, sys
j = json.load(open(sys.argv[2]))
pct = lambda v: 'n/a' if v is None else f"{100*v:.1f}%"
mib = lambda b: f"{b/2**20:.0f} MiB"
print(f"| {sys.argv[1]} | {mib(j['arena_bytes']) + ', ' + str(int(j['arena_slots'])) + ' slots' if j['experts']=='streamed' else '-'} | "
      f"{mib(j['host_tier_bytes']) if j['host_slots'] else 'none'} | {j['prefill_tok_s']:.1f} | "
      f"{j['decode_tok_s']:.1f} | {pct(j['decode_hit_rate'])} | {pct(j['decode_hit_rate_belady'])} | {pct(j['decode_host_hit_rate'])} | "
      + (f"{pct(j['decode_prefetch_accuracy'])} | {pct(j['decode_demand_hit_rate'])} | "
         f"{j['decode_prefetch_bytes_per_token']/2**20:.1f} / {j['decode_prefetch_wasted_bytes_per_token']/2**20:.1f} | "
         if j.get('prefetch') == 'next-layer' else "off | - | - | ") +
      f"{j['fill_gb_s']:.2f} | {j['file_read_gb_s']:.2f} | {j['peak_rss_mib']:.0f} | {j['fallbacks']:.0f} |")
PY
  }
  run resident --set cuda.experts=resident
  for pct in 25 10; do
    run "dev $pct% + host" --set cuda.experts=streamed --set cuda.expert_cache.arena=$((exp_bytes * pct / 100)) \
      --set cuda.expert_cache.host_arena=auto --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) \
      --set cuda.expert_cache.prefetch=off
  done
  run "dev 25% + host, one slot size" --set cuda.experts=streamed \
    --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100)) --set cuda.expert_cache.slot_classes=off \
    --set cuda.expert_cache.host_arena=auto --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) \
    --set cuda.expert_cache.prefetch=off
 for pct in 25 10; do
    run "dev $pct% + host + prefetch" --set cuda.experts=streamed --set cuda.expert_cache.arena=$((exp_bytes * pct / 100)) \
      --set cuda.expert_cache.host_arena=auto --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) \
      --set cuda.expert_cache.prefetch=next-layer
  done
  run "dev 25% + host + prefetch, matrix slots" --set cuda.experts=streamed \
    --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100)) --set cuda.expert_cache.slot_unit=matrix \
    --set cuda.expert_cache.host_arena=auto --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) \
    --set cuda.expert_cache.prefetch=next-layer
  run "dev 25% + host + prefetch, no cap" --set cuda.experts=streamed \
    --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100)) \
    --set cuda.expert_cache.host_arena=auto --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) \
    --set cuda.expert_cache.prefetch=next-layer --set cuda.expert_cache.prefetch_top=5 \
    --set cuda.expert_cache.prefetch_max=1024
  run "dev 25% + host + prefetch of every prediction" --set cuda.experts=streamed \
    --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100)) \
    --set cuda.expert_cache.host_arena=auto --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) \
    --set cuda.expert_cache.prefetch=next-layer --set cuda.expert_cache.prefetch_top=1024 \
    --set cuda.expert_cache.prefetch_max=1024
  run "dev 25%, file only" --set cuda.experts=streamed --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100)) \
    --set cuda.expert_cache.host_arena=0
  # H2D rate while misses are pending: the decode profile times each acquire's
  # publishes from the host tier (copy_h2d_async) as one run of queued copies
  $vt bench -m "$model" --device cuda -p 16 -n 64 --reps 1 --json --no-progress \
    --set cuda.experts=streamed --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100)) \
    --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) --set cuda.expert_cache.prefetch=off \
    > /tmp/vt-anchor.json
  $vt bench -m "$model" --device cuda -p 16 -n 64 --reps 1 --profile --no-progress \
    --set cuda.experts=streamed --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100)) \
    --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) --set cuda.expert_cache.prefetch=off \
    > /tmp/vt-anchor-prof.txt
  python3 - /tmp/vt-anchor.json /tmp/vt-anchor-prof.txt <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1]))
txt = open(sys.argv[2]).read()
dec = txt[txt.find('per-op profile, decode'):]
m = re.search(r'\| copy_h2d_async \(expert publish\)\s+\|\s+\d+ \|\s+([\d.]+) \|', dec)
b = j['decode_fill_bytes_per_token']
if m:
    ms = float(m.group(1))
    print(f"decode, device 25% + host: {b/1e6:.1f} MB of H2D copies per token in {ms:.3f} ms of copy_h2d_async per token "
          f"(profiled by run: each acquire's copies queued back to back, a synchronize before and after): "
          f"{b/ms/1e6:.1f} GB/s while misses are pending")
else:
    print("no copy_h2d_async row in the decode profile")
PY
  [ -z "${PROF_DIR:-}" ] || cp /tmp/vt-anchor-prof.txt "$PROF_DIR/profile-$shape.txt"
  if [ -n "${TRACE_DIR:-}" ]; then # the routing trace of dev 25% + host, for bench/cache_sim
    $vt bench -m "$model" --device cuda -p "$prompt" -n "$gen" --reps 1 --no-progress \
      --trace "$TRACE_DIR/trace-$shape.txt" --set cuda.experts=streamed \
      --set cuda.expert_cache.arena=$((exp_bytes * 25 / 100)) --set cuda.expert_cache.host_arena=auto \
      --set cuda.pinned_budget=$((exp_bytes * 2 + (1 << 30))) --set cuda.expert_cache.prefetch=off \
      > /dev/null
  fi
  [ -n "${KEEP:-}" ] || rm -f "$model"
done

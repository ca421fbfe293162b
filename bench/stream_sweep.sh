#!/usr/bin/env bash
# stream_sweep.sh - expert streaming at sizes the fixtures cannot reach.
#
# Generates a qwen35moe model with `vt mkmodel` (default: 8 layers, n_embd 2048,
# 128 experts top-8, expert ff 512, BF16: 6 GiB of routed experts), then runs
# `vt bench` with every expert resident and streamed through arenas of 100%,
# 50%, 25% of the expert bytes and the minimum (top-k x 3 slots), and prints
# decode/prefill tokens/s, the decode hit rate, fill GB/s and peak RSS, next
# to the read bandwidth `dd` gets from the same file. Also checks that greedy
# output streamed through a 256 MiB arena equals the resident output.
#
#   bench/stream_sweep.sh [BUILD_DIR] [DEVICE]     (DEVICE: cpu (default) or cuda)
# Environment: MODEL_DIR (where the model is written, default /tmp), TYPE
# (bf16|q8_0|f16), SHAPE (extra vt mkmodel options), PROMPT (tokens, 32),
# GEN (tokens, 64), REPS (2), THREADS.
set -euo pipefail
build=${1:-build}
dev=${2:-cpu}
vt=$build/bin/vt
dir=${MODEL_DIR:-/tmp}
type=${TYPE:-bf16}
shape=${SHAPE:---n-layer 8 --n-embd 2048 --n-expert 128 --n-expert-used 8 --n-ff-exp 512 --n-ff-shexp 512 --n-head 16 --n-head-kv 2 --head-dim 128 --n-rot 64}
prompt=${PROMPT:-32}
gen=${GEN:-64}
reps=${REPS:-2}
thr=${THREADS:+-t $THREADS}
model=$dir/vt-sweep-$type.gguf

echo "== generating $model ($type; $shape)"
/usr/bin/time -f "generated in %e s, peak RSS %M KiB" $vt mkmodel -o "$model" --type "$type" $shape
ls -l "$model"

echo "== read bandwidth of the file (dd, O_DIRECT, then buffered)"
dd if="$model" of=/dev/null bs=16M iflag=direct 2>&1 | tail -1 || true
dd if="$model" of=/dev/null bs=16M 2>&1 | tail -1 || true

fit=$($vt fit -m "$model" --device "$dev" --set $dev.experts=streamed || true)
exp_bytes=$(echo "$fit" | awk '/routed experts/ {print $NF; exit}')
slot_line=$(echo "$fit" | awk '/minimum slots/ {print $NF; exit}')
echo "routed experts: $exp_bytes bytes; minimum slots: $slot_line"

run() { # label, extra options
  local label=$1; shift
  $vt bench -m "$model" --device "$dev" -p "$prompt" -n "$gen" --reps "$reps" $thr --json "$@" > /tmp/vt-sweep.json
  python3 - "$label" /tmp/vt-sweep.json <<'PY'
import json, sys
j = json.load(open(sys.argv[2]))
hit = '   n/a ' if j['decode_hit_rate'] is None else f"{100*j['decode_hit_rate']:6.1f}%"
cg = '  n/a ' if j.get('commit_gb_s') is None else f"{j['commit_gb_s']:6.2f}"
print(f"| {sys.argv[1]:<10} | {j['arena_bytes']/2**20:10.0f} | {j['prefill_tok_s']:9.1f} | {j['decode_tok_s']:9.1f} | "
      f"{hit} | {j['fill_gb_s']:6.2f} | {cg} | {j['peak_rss_mib']:8.1f} | {j['fallbacks']:.0f} |")
PY
}
echo
echo "| arena      |  arena MiB | prefill/s |  decode/s | hit    | fill GB/s | commit GB/s | RSS MiB | fallbacks |"
echo "|------------|------------|-----------|-----------|--------|--------|--------|----------|---|"
run resident --set $dev.experts=resident
for pct in 100 50 25; do
  run "$pct%" --set $dev.experts=streamed --set $dev.expert_cache.arena=$((exp_bytes * pct / 100))
done
run "min" --set $dev.experts=streamed --set $dev.expert_cache.slots=$slot_line

echo
echo "== greedy output: streamed through a 256 MiB arena vs resident"
a=$($vt run -m "$model" --device "$dev" -p "the quick brown fox" -n 16 --temp 0 --ids --ignore-eos $thr --set $dev.experts=resident)
b=$($vt run -m "$model" --device "$dev" -p "the quick brown fox" -n 16 --temp 0 --ids --ignore-eos $thr --set $dev.experts=streamed --set $dev.expert_cache.arena=256MiB --stats 2> /tmp/vt-sweep.err)
grep -E "peak RSS|total" /tmp/vt-sweep.err || true
[ "$a" = "$b" ] && echo "identical: $a" || { echo "DIFFERENT: resident $a / streamed $b"; exit 1; }

echo
echo "== memory bound: 32-token prompt, 64 decoded tokens, 256 MiB arena"
p32="the cat sat on the mat and then it went to sleep in the warm sun while the birds sang songs in the old green tree by the river"
$vt fit -m "$model" --device "$dev" --ctx 128 --set $dev.experts=streamed --set $dev.expert_cache.arena=256MiB | grep -E "dense|arena|KV|state|scratch|device need"
$vt run -m "$model" --device "$dev" -p "$p32" -n 64 --ctx 128 --ignore-eos --verbose-prompt --temp 0 $thr \
  --set $dev.experts=streamed --set $dev.expert_cache.arena=256MiB --stats 2>&1 >/dev/null | grep -E "^prompt|tokens\)|decode:|peak RSS|  total" || true
[ -n "${KEEP:-}" ] || rm -f "$model"

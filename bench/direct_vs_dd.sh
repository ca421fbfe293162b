#!/usr/bin/env bash
# direct_vs_dd.sh - issue 15's CPU line: a model whose routed experts are
# twice the memory left to vt streams with `io: direct` at >= 80% of what
# `dd iflag=direct` reads from the same file in the same run, with peak RSS
# within the fit check's figure + 5%.
#
# The model is the Qwen3.5-35B-A3B-shaped 8-layer Q4_K_M file of
# stream_vs_anchor.sh (3.9 GiB of routed experts, written in full: no
# holes); the memory left to vt for experts is capped at half of them (an
# arena of ARENA plus a host tier of HOST, 1 GiB each by default). Then:
#   dd if=MODEL of=/dev/null bs=1M iflag=direct     the file's O_DIRECT read rate
#   vt bench --set cpu.expert_cache.io=direct ...    its file read rate and peak RSS
# in ROUNDS rounds (dd, vt; then a last dd), medians against medians: the
# virtual disks this runs on swing by more than 2x from one read to the next
#   vt fit (the same settings)                       the memory figure ("device need":
#                                                    one pool on the CPU)
# and prints the ratios.
#   bench/direct_vs_dd.sh [BUILD_DIR]
# Environment: MODEL_DIR (/tmp), ARENA (1GiB), HOST (1GiB), PROMPT (8), GEN (16),
# ROUNDS (3), KEEP (0: delete the model afterwards).
set -euo pipefail
build=${1:-build}
vt=$build/bin/vt
dir=${MODEL_DIR:-/tmp}
model=$dir/vt-direct-qwen-q4_k_m.gguf
QWEN="--n-layer 8 --n-embd 2048 --n-expert 256 --n-expert-used 8 --n-ff-exp 512 --n-ff-shexp 512 --n-head 16 --n-head-kv 2 --head-dim 256 --n-rot 64 --ssm-d-k 128 --ssm-n-k 16 --ssm-n-v 32 --n-vocab 248320"
[ -f "$model" ] || $vt mkmodel -o "$model" --type q4_k_m $QWEN > /dev/null
sets=(--set cpu.experts=streamed --set cpu.expert_cache.io=direct
      --set cpu.expert_cache.arena="${ARENA:-1GiB}" --set cpu.expert_cache.host_arena="${HOST:-1GiB}")
fit=$($vt fit -m "$model" "${sets[@]}")
echo "$fit" | grep -E "routed experts|expert arena|host tier|device need"
need=$(echo "$fit" | awk '/device need/ {print $NF; exit}')
exp_bytes=$(echo "$fit" | awk '/routed experts/ {print $NF; exit}')

ddrate() {
  local out
  out=$(dd if="$model" of=/dev/null bs=1M iflag=direct 2>&1 | tail -1)
  echo "  $out" >&2
  echo "$out" | awk '{for (i = 1; i <= NF; i++) if ($i == "bytes") b = $(i-1); \
    for (i = 1; i <= NF; i++) if ($i == "s,") s = $(i-1); printf "%.3f", b / s / 1e9}'
}
# ROUNDS rounds of dd then vt, and a last dd: vt's median read rate against
# the median of the dd runs around it
rounds=${ROUNDS:-3}
dds=() vts=()
for ((i = 1; i <= rounds; i++)); do
  echo "== round $i: dd iflag=direct, bs=1M, the whole file"
  dds+=("$(ddrate)")
  echo "== round $i: vt bench, io: direct"
  $vt bench -m "$model" -p "${PROMPT:-8}" -n "${GEN:-16}" --reps 1 --json --no-progress "${sets[@]}" > /tmp/vt-direct-$i.json
  vts+=("$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['file_read_gb_s'])" /tmp/vt-direct-$i.json)")
  echo "  vt O_DIRECT reads: ${vts[-1]} GB/s" >&2
done
echo "== dd iflag=direct, bs=1M, the whole file (after)"
dds+=("$(ddrate)")
dd_gbs=$(printf '%s\n' "${dds[@]}" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
vt_med=$(printf '%s\n' "${vts[@]}" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}')
# the rest of the report from the round whose read rate is nearest the median
best=1
for ((i = 2; i <= rounds; i++)); do
  awk -v a="${vts[i-1]}" -v b="${vts[best-1]}" -v m="$vt_med" \
    'BEGIN {da = a - m; db = b - m; exit !(da * da < db * db)}' && best=$i
done
cp /tmp/vt-direct-$best.json /tmp/vt-direct.json
python3 - /tmp/vt-direct.json "$dd_gbs" "$need" "$exp_bytes" "$vt_med" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
dd, need, exp, vt = float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
cache = j['arena_bytes'] + j['host_tier_bytes']
rss = j['peak_rss_mib'] * 2**20
print(f"experts {exp/2**30:.2f} GiB, arena + host tier {cache/2**30:.2f} GiB ({exp/cache:.1f}x smaller)")
print(f"file reads: {j['file_read_bytes']/2**20:.0f} MiB at {vt:.3f} GB/s with O_DIRECT (median round); dd iflag=direct {dd:.3f} GB/s (median of the dd runs around them): "
      f"{100*vt/dd:.0f}% (>= 80% required)")
print(f"peak RSS {rss/2**20:.0f} MiB against the fit check's {need/2**20:.0f} MiB: {100*rss/need:.1f}% (<= 105% required)")
print(f"decode {j['decode_tok_s']:.2f} tok/s, prefill {j['prefill_tok_s']:.2f} tok/s, device hit {100*(j['decode_hit_rate'] or 0):.1f}%")
PY
[ "${KEEP:-0}" = 1 ] || rm -f "$model"

#!/usr/bin/env bash
# seed_scale.sh - issue 15's full-scale case on the H200: a
# Qwen3.8-2.4T-A95B-shaped model written sparse (1.25 TiB of holes: no disk,
# and reads of it cost no storage time, so this measures vt's fill path),
# run with --device cuda --ctx 512 through an 8 GiB device arena, where every
# token misses (2,790 slices, about 25 GB per token). Prints the load time,
# prefill and decode tok/s, the fill rate (file -> device, as the streamer
# times it: read + H2D commit), the commits' own rate, and peak RSS, on the
# file-only path (host_arena 0: the issue's baseline; HOSTS="0 auto" adds the
# host tier, which at this size takes most of the host's RAM).
#   bench/seed_scale.sh [BUILD_DIR]
# Environment: MODEL_DIR (/tmp), GEN (4), KEEP (0: delete the model), HOSTS (0),
# STAGINGS (auto: the staging ring; "0 auto" adds the one-slot path before it),
# READERS (auto).
set -euo pipefail
build=${1:-build}
vt=$build/bin/vt
model=${MODEL_DIR:-/tmp}/vt-seed-2.4t-q4_k.gguf
t0=$(date +%s.%N)
[ -f "$model" ] || $vt mkmodel -o "$model" --sparse --type q4_k --n-layer 93 --n-embd 8192 \
  --n-expert 512 --n-expert-used 10 --n-ff-exp 2048 --n-ff-shexp 2048 --n-head 64 --n-head-kv 4 \
  --head-dim 256 --n-rot 64 --ssm-d-k 128 --ssm-n-k 16 --ssm-n-v 64 --n-vocab 248320 > /dev/null
echo "mkmodel --sparse: $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(du -h --apparent-size "$model" | cut -f1) apparent, $(du -h "$model" | cut -f1) on disk"
for host in ${HOSTS:-0}; do
 for staging in ${STAGINGS:-auto}; do
  echo "== host tier: $host, staging ring: $staging, readers: ${READERS:-auto}"
  $vt run -m "$model" --device cuda --ctx 512 -p "hi" -n "${GEN:-4}" --temp 0 \
    --ignore-eos --ids --stats --set cuda.experts=streamed --set cuda.expert_cache.arena=8GiB \
    --set cuda.expert_cache.host_arena=$host --set cuda.expert_cache.staging=$staging \
    --set cuda.expert_cache.readers=${READERS:-auto} 2>&1 >/dev/null |
    grep -E "^(load|prefill|decode|experts|host tier|peak RSS|fallbacks)|^  total|hits +misses|experts streamed:"
 done
done
[ "${KEEP:-0}" = 1 ] || rm -f "$model"

#!/usr/bin/env bash
# seed_scale.sh - issue 15's full-scale case on the H200: a
# Qwen3.8-2.4T-A95B-shaped model written sparse (holes: no disk, and reads of
# it cost no storage time, so this measures vt's fill path) with the types of
# the seeds' real 370 GiB "UD-Q1_0" file (issue 42): the ud-iq1_xxxs mix
# (IQ1_XXXS routed experts, Q5_K attention and shared experts, Q4_K DeltaNet,
# Q6_K output) over 92 blocks and a 93rd MTP block (nextn_predict_layers 1,
# Q2_K experts), which vt skips,
# run with --device cuda --ctx 512 through an 8 GiB device arena, where every
# token misses (2,790 slices, about 25 GB per token). Prints the load time,
# prefill and decode tok/s, the fill rate (file -> device, as the streamer
# times it: read + H2D commit), the commits' own rate, and peak RSS, on the
# file-only path (host_arena 0: the issue's baseline; HOSTS="0 auto" adds the
# host tier, which at this size takes most of the host's RAM).
#   bench/seed_scale.sh [BUILD_DIR]
# Environment: TYPE (ud-iq1_xxxs; q4_k with NEXTN=0 is issue 15's 93-block
# Q4_K file), NEXTN (1), MODEL_DIR (/tmp), GEN (4), KEEP (0: delete the model), HOSTS (0),
# STAGINGS (auto: the staging ring; "0 auto" adds the one-slot path before it),
# READERS (auto), IO (direct: a file 10x the host's RAM gains nothing from the
# page cache, and O_DIRECT reads of holes fill no page-cache pages; pread).
# The first run over a new file reads its holes cold (the kernel allocates and
# zeroes page-cache pages); a run after it on the same file (KEEP=1) reads them
# from the page cache.
set -euo pipefail
build=${1:-build}
vt=$build/bin/vt
type=${TYPE:-ud-iq1_xxxs}
nextn=${NEXTN:-1}
model=${MODEL_DIR:-/tmp}/vt-seed-2.4t-$type-nextn$nextn.gguf
t0=$(date +%s.%N)
[ -f "$model" ] || $vt mkmodel -o "$model" --sparse --type "$type" --n-layer $((93 - nextn)) --nextn "$nextn" --n-embd 8192 \
  --n-expert 512 --n-expert-used 10 --n-ff-exp 2048 --n-ff-shexp 2048 --n-head 64 --n-head-kv 4 \
  --head-dim 256 --n-rot 64 --ssm-d-k 128 --ssm-n-k 16 --ssm-n-v 64 --n-vocab 248320 > /dev/null
echo "mkmodel --sparse ($type, $nextn MTP block(s)): $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s; $(du -h --apparent-size "$model" | cut -f1) apparent, $(du -h "$model" | cut -f1) on disk"
$vt fit -m "$model" --device cuda --set cuda.experts=streamed --set cuda.expert_cache.arena=8GiB |
  grep -E "dense weights|MTP blocks|routed experts|one slot|expert arena|host tier|verdict" || true
for host in ${HOSTS:-0}; do
 for staging in ${STAGINGS:-auto}; do
  echo "== host tier: $host, staging ring: $staging, readers: ${READERS:-auto}, io: ${IO:-direct}"
  $vt run -m "$model" --device cuda --ctx 512 -p "hi" -n "${GEN:-4}" --temp 0 \
    --ignore-eos --ids --stats --set cuda.experts=streamed --set cuda.expert_cache.arena=8GiB \
    --set cuda.expert_cache.host_arena=$host --set cuda.expert_cache.staging=$staging \
    --set cuda.expert_cache.readers=${READERS:-auto} --set cuda.expert_cache.io=${IO:-direct} \
    2>&1 >/dev/null |
    grep -E "^(load|prefill|decode|experts|host tier|peak RSS|fallbacks)|^  total|hits +misses|experts streamed:" |
    tee /tmp/vt-seed-stats.$$
  # the whole run's device fills over its prefill + decode time: file -> device
  # end to end (reads, H2D copies and the compute between them)
  awk '/^prefill:/ {t += $5} /^decode:/ && /tokens in/ {t += $5} /^  total/ {mib = $5}
       END {if (t > 0) printf "fills end to end: %.1f MiB in %.3f s of prefill + decode: %.2f GB/s\n", mib, t, mib * 1048576 / t / 1e9}' \
    /tmp/vt-seed-stats.$$
  rm -f /tmp/vt-seed-stats.$$
 done
done
[ "${KEEP:-0}" = 1 ] || rm -f "$model"

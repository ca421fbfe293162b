#!/usr/bin/env bash
# Generation time and peak RSS of `vt mkmodel` for a model with 6 GiB of BF16
# routed experts (n_embd 2048, n_ff_exp 512, 128 experts, top-8, 8 layers;
# 6.5 GB file), in each weight type and as one file and 3 shards; each output
# is checked with `vt info` (and a 4-token `vt run` on the 3-shard one) and
# removed. Needs about 7 GB free in the output directory. Not run by CI.
#   usage: bench/mkmodel_sizes.sh [build-dir] [out-dir]
set -euo pipefail
build=${1:-build}
out=${2:-${TMPDIR:-/tmp}}
vt=$build/bin/vt
shape=(--n-embd 2048 --n-layer 8 --n-expert 128 --n-expert-used 8 --n-ff-exp 512
       --n-ff-shexp 512 --n-head 16 --n-head-kv 2 --head-dim 128 --n-rot 64)
printf '%-6s %-6s %10s %8s %12s\n' type shards wall_s rss_MiB GB_written
for type in bf16 q8_0 f16; do
  for shards in 1 3; do
    base="$out/vt-mkmodel-bench-$$-$type.gguf"
    first=$base
    [ "$shards" -gt 1 ] && first="${base%.gguf}-00001-of-0000$shards.gguf"
    tm=$(mktemp)
    /usr/bin/time -f '%e %M' -o "$tm" \
      "$vt" mkmodel -o "$base" --type "$type" --shards "$shards" "${shape[@]}" >/dev/null
    read -r wall rss_kb <"$tm"
    rm -f "$tm"
    bytes=$(stat -c %s "${base%.gguf}"*.gguf | awk '{s += $1} END {print s}')
    "$vt" info -m "$first" >/dev/null
    [ "$shards" -gt 1 ] && [ "$type" = q8_0 ] && "$vt" run -m "$first" -p hi -n 4 >/dev/null
    printf '%-6s %-6s %10s %8d %12s\n' "$type" "$shards" "$wall" $((rss_kb / 1024)) \
      "$(awk -v b="$bytes" 'BEGIN {printf "%.2f", b / 1e9}')"
    rm -f "${base%.gguf}"*.gguf
  done
done

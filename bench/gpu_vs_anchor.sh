#!/usr/bin/env bash
# gpu_vs_anchor.sh - vt on the GPU against the llama.cpp anchor figures of the
# GPU issue (llama-bench -p 512 -n 128 on the H200, llama.cpp d32676d77, the
# same shapes quantized by llama-quantize). Generates, with vt mkmodel:
#   qwen35moe, Qwen3.5-35B-A3B layer shapes, 8 layers, --type q4_k_m and q8_0
#   gemma4, Gemma 4 26B-A4B layer shapes, 6 layers, --type q4_k_m and q8_0
# and prints vt bench prefill (512) and decode (128) tok/s with every weight
# resident on the GPU, next to the anchors; with PROFILE=1 (default) a per-op
# profile of the Q4_K_M models follows (vt bench --profile). About 6-8 minutes
# on the H200, most of it writing the models.
#   bench/gpu_vs_anchor.sh [BUILD_DIR]    env: DEVICE (cuda), REPS (3), DIR (/tmp), PROFILE (1),
#   ARCHS ("qwen35moe gemma4"), TYPES ("q4_k_m q8_0"), KEEP (0: delete the models)
# vt's q4_k_m is its own round-to-nearest Q4_K/Q6_K mix (README, weight types),
# llama-quantize's Q4_K_M uses importance-free k-quant search: same types and
# layout, so the same bytes per decode step.
set -euo pipefail
build=${1:-build}
vt=$build/bin/vt
dev=${DEVICE:-cuda}
reps=${REPS:-3}
dir=${DIR:-/tmp}
QWEN="--n-layer 8 --n-embd 2048 --n-expert 256 --n-expert-used 8 --n-ff-exp 512 --n-ff-shexp 512 --n-head 16 --n-head-kv 2 --head-dim 256 --n-rot 64 --ssm-d-k 128 --ssm-n-k 16 --ssm-n-v 32 --n-vocab 248320"
GEMMA="--arch gemma4 --n-layer 6 --n-embd 2816 --n-head 16 --n-head-kv 8 --n-head-kv-full 2 --head-dim 512 --head-dim-swa 256 --n-rot 512 --n-ff 2112 --n-expert 128 --n-expert-used 8 --n-ff-exp 704 --sliding-window 1024 --full-attention-interval 6 --k-eq-v 1 --n-vocab 262144"
# anchors: llama.cpp CUDA, prefill 512 / decode 128 tok/s (Q4_K_M only)
declare -A anchor_pp=([qwen35moe-q4_k_m]=22935 [gemma4-q4_k_m]=28304)
declare -A anchor_tg=([qwen35moe-q4_k_m]=820 [gemma4-q4_k_m]=773)
declare -A before_pp=([qwen35moe-q4_k_m]=1935 [gemma4-q4_k_m]=4135)
declare -A before_tg=([qwen35moe-q4_k_m]=187 [gemma4-q4_k_m]=176)

rows=()
for arch in ${ARCHS:-qwen35moe gemma4}; do
  shape=$QWEN; [ $arch = gemma4 ] && shape=$GEMMA
  for type in ${TYPES:-q4_k_m q8_0}; do
    m=$dir/vt-anchor-$arch-$type.gguf
    [ -f "$m" ] || { t0=$(date +%s); $vt mkmodel -o "$m" --type $type $shape >/dev/null;
                     echo "wrote $m ($(du -h "$m" | cut -f1)) in $(( $(date +%s) - t0 )) s"; }
    j=$($vt bench -m "$m" --device $dev -p 512 -n 128 --reps $reps --json --no-progress \
          --set $dev.experts=resident)
    pp=$(echo "$j" | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["prefill_tok_s"])')
    tg=$(echo "$j" | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["decode_tok_s"])')
    k=$arch-$type
    rows+=("$k|$pp|${anchor_pp[$k]:-}|$tg|${anchor_tg[$k]:-}")
    if [ "${PROFILE:-1}" = 1 ] && [ $type = q4_k_m ]; then
      echo "== $k: per-op profile (vt bench --profile, -p 512 -n 32)"
      $vt bench -m "$m" --device $dev -p 512 -n 32 --reps 1 --profile --no-progress \
        --set $dev.experts=resident | sed -n '/per-op profile/,$p'
    fi
  done
done
echo
echo "| model (resident, --device $dev) | vt prefill 512 | llama.cpp | vt/llama | vt decode | llama.cpp | vt/llama |"
echo "|---|---|---|---|---|---|---|"
for r in "${rows[@]}"; do
  IFS='|' read -r k pp app tg atg <<<"$r"
  rp=n/a; rt=n/a
  [ -n "$app" ] && rp=$(python3 -c "print('%.2fx' % ($pp / $app))")
  [ -n "$atg" ] && rt=$(python3 -c "print('%.2fx' % ($tg / $atg))")
  echo "| $k | $pp | ${app:--} | $rp | $tg | ${atg:--} | $rt |"
done
echo
echo "issue figures before this work (vt, same shapes): qwen35moe q4_k_m prefill ${before_pp[qwen35moe-q4_k_m]} decode ${before_tg[qwen35moe-q4_k_m]}; gemma4 q4_k_m prefill ${before_pp[gemma4-q4_k_m]} decode ${before_tg[gemma4-q4_k_m]}"
[ "${KEEP:-0}" = 1 ] || rm -f "$dir"/vt-anchor-*.gguf

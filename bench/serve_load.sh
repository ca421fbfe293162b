#!/usr/bin/env bash
# Batched decode throughput of vt serve: aggregate generated tokens/s at 1, 4
# and 16 concurrent streams, time to first token p50/p99, next to vt bench's
# one-stream figure on the same model and device.
#
#   usage: bench/serve_load.sh [build-dir] [model] [device]
#          defaults: build, the trained qwen35moe fixture's Q8_0, cpu
#   env:   CONC (default 1,4,16)  REQUESTS per client (2)  TOKENS per request (128)
#          PROMPT_WORDS (64)  PARALLEL slots (16)  THREADS (vt's -t; default all cores)
#
# Needs python3 (bench/serve_load.py is the client). Prints vt bench's line,
# then one row per concurrency.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
model=${2:-${VT_FIXTURES_DIR:-../shared/fixtures}/qwen35moe-trained/gguf/qwen35moe-trained-q8_0.gguf}
device=${3:-cpu}
vt=$build/bin/vt
tokens=${TOKENS:-128}
tflag=()
if [ -n "${THREADS:-}" ]; then tflag=(-t "$THREADS"); fi

echo "== vt bench (one stream): $model on $device"
"$vt" bench -m "$model" --device "$device" "${tflag[@]}" -p 64 -n "$tokens" --reps 3 2>&1 |
  grep -Ei "prefill|decode" | head -4

log=$(mktemp)
"$vt" serve -m "$model" --device "$device" "${tflag[@]}" --port 0 --parallel "${PARALLEL:-16}" \
  --queue 256 --ctx $(( ${PROMPT_WORDS:-64} * 2 + tokens + 64 )) 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
port=""
for _ in $(seq 1 1200); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
  if [ -n "$port" ] && grep -q "vt serve: ready" "$log"; then break; fi
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done
echo "== vt serve --parallel ${PARALLEL:-16} on $device ($(grep -o 'ready:.*' "$log"))"
python3 bench/serve_load.py "$port" --conc "${CONC:-1,4,16}" --requests "${REQUESTS:-2}" \
  --max-tokens "$tokens" --prompt-words "${PROMPT_WORDS:-64}"
curl -s "http://127.0.0.1:$port/metrics" 2>/dev/null | grep -E '^vt_(time_to_first_token_seconds|inter_token_latency_seconds)_(sum|count)|^vt_generated_tokens_total' || true

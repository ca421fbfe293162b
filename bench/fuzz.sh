#!/usr/bin/env bash
# Build the libFuzzer targets of tests/fuzz/ (GGUF reader, tokenizer on the
# fixture's vocabulary, tokenizer on hostile vocabularies, vt serve's request
# parser, the tokenizer's NFC with a time budget per input, the chat-template
# interpreter seeded with the published templates) with
# clang + ASan/UBSan and run each one for a given time. Long fuzzing belongs
# here, not in CI (CI never configures VT_FUZZ=ON).
#
#   usage: bench/fuzz.sh [seconds-per-target] [build-dir] [work-dir]
#          defaults: 300, build-fuzz, /tmp/vt-fuzz
#   env:   VT_FIXTURES_DIR  fixture folder (default ../shared/fixtures): seeds
#                           and the tokenizer fuzz_tokenize loads
#          FUZZ_TARGETS     targets to run (default "fuzz_gguf fuzz_tokenize
#                           fuzz_vocab fuzz_serve_request fuzz_nfc fuzz_jinja"), all at
#                           once, one process each
#          VT_FUZZ_NFC_BUDGET_US, VT_FUZZ_NFC_US_PER_CP  fuzz_nfc's time
#                           budget per input: base + per code point (default
#                           2000 + 2 x n us; over it is a finding)
#          FUZZ_TIMEOUT     seconds one input may take before it counts as a
#                           finding (default 1)
#          FUZZ_ARGS        extra libFuzzer flags (e.g. -len_control=20 lets the
#                           text targets reach long inputs sooner)
#
# The corpus of each target is kept in WORK/corpus/<target> (runs resume from
# it); crash-*, leak-*, timeout-*, oom-* and slow-unit-* inputs land in
# WORK/artifacts/<target>/, the log in WORK/<target>.log. To replay an
# input: BUILD/bin/<target> FILE. Exit status 1 when any target found
# something. A target that aborts leaves its scratch folder
# (/dev/shm/vt-fuzz-*, else /tmp) behind.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-300}
build=${2:-build-fuzz}
work=${3:-/tmp/vt-fuzz}
fx=${VT_FIXTURES_DIR:-$(cd .. && pwd)/shared/fixtures}
targets=${FUZZ_TARGETS:-fuzz_gguf fuzz_tokenize fuzz_vocab fuzz_serve_request fuzz_nfc fuzz_jinja}
timeout=${FUZZ_TIMEOUT:-1}

cmake -S . -B "$build" -DCMAKE_C_COMPILER=clang -DVT_BUILD_TESTS=ON -DVT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DVT_FIXTURES_DIR="$fx" >/dev/null
# shellcheck disable=SC2086
cmake --build "$build" -j"$(nproc 2>/dev/null || echo 2)" --target $targets fuzz_seeds

# seeds: small writer-made files and texts, plus the fixtures' (fuzz_seeds.c says which);
# the test fuzz_seed_replay replays the same seeds in every build
seeds=$work/seeds
rm -rf "$seeds"
mkdir -p "$seeds"
if [ -d "$fx" ]; then
  "$build/bin/fuzz_seeds" "$seeds" "$fx"
else
  echo "fuzz.sh: no fixtures at $fx: writer-made seeds only (fuzz_tokenize needs VT_FUZZ_MODEL)" >&2
  "$build/bin/fuzz_seeds" "$seeds"
fi

pids=()
for t in $targets; do
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  dict=tests/fuzz/${t#fuzz_}.dict
  if [ ! -f "$dict" ]; then dict=tests/fuzz/tokenize.dict; fi
  seed=$seeds/${t#fuzz_}
  if [ "$t" = fuzz_serve_request ]; then seed=tests/fuzz/serve_request_seeds; fi
  if [ "$t" = fuzz_jinja ]; then # the published chat templates
    seed=$seeds/jinja
    mkdir -p "$seed"
    cp tests/jinja/*.jinja "$seed/"
  fi
  extra=()
  if [ "$t" != fuzz_gguf ]; then extra+=(-max_len=16384); fi
  echo "== $t for ${secs}s: corpus $work/corpus/$t, log $work/$t.log"
  # shellcheck disable=SC2086
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  VT_FUZZ_MODEL=${VT_FUZZ_MODEL:-$fx/qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf} \
    "$build/bin/$t" "$work/corpus/$t" "$seed" -dict="$dict" -max_total_time="$secs" \
      -timeout="$timeout" -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$work/artifacts/$t/" "${extra[@]}" ${FUZZ_ARGS:-} >"$work/$t.log" 2>&1 &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done

for t in $targets; do
  echo "== $t"
  grep -E '^#[0-9]+.*(DONE|cov:)' "$work/$t.log" | tail -1 || true
  grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$work/$t.log" || true
  found=$(find "$work/artifacts/$t" -type f | sort)
  if [ -n "$found" ]; then
    echo "findings:"
    echo "$found"
    status=1
  fi
done
exit $status

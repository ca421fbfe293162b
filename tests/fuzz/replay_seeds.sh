#!/bin/bash
# replay_seeds.sh BIN_DIR FIXTURES_DIR - the test fuzz_seed_replay: write the
# fuzz targets' seed corpora with fuzz_seeds (the fixture-made seeds too) and
# replay each corpus through its harness (fuzz_replay_<target>, no libFuzzer).
# Fixture folder absent: skip (77), except under CI=true, where it fails.
set -euo pipefail
bin=$1
fx=${VT_FIXTURES_DIR:-$2}
if [ ! -d "$fx" ]; then
  if [ "${CI:-}" = true ]; then
    echo "fuzz_seed_replay: fixture folder '$fx' is absent and CI=true: fixtures are required" >&2
    exit 1
  fi
  echo "*** SKIPPING fuzz_seed_replay: fixture folder '$fx' not found (set VT_FIXTURES_DIR)" >&2
  exit 77
fi
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/vt-fuzz-replay-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$bin/fuzz_seeds" "$work" "$fx"
export VT_FUZZ_MODEL=$fx/qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf
# fuzz_nfc's time budget is for fuzzing on an idle machine; a replay on a
# loaded CI machine gets a wide one (a quadratic step still misses it)
export VT_FUZZ_NFC_BUDGET_US=${VT_FUZZ_NFC_BUDGET_US:-2000000}
for t in gguf tokenize vocab nfc; do
  n=$(find "$work/$t" -type f | wc -l)
  echo "== fuzz_$t: $n seeds"
  # the harness's own logging goes to stderr; a failing input is the last path named there
  "$bin/fuzz_replay_fuzz_$t" "$work/$t" 2>"$work/$t.log" || {
    rc=$?
    tail -20 "$work/$t.log" >&2
    echo "fuzz_seed_replay: fuzz_$t failed (status $rc) on the input named last above" >&2
    exit 1
  }
  grep -c '^fuzz_replay: .* bytes)$' "$work/$t.log" | sed 's/^/   inputs replayed: /'
done
# fuzz_jinja: the published chat templates (tests/jinja) are its seeds
echo "== fuzz_jinja: $(find "$src/../jinja" -name '*.jinja' | wc -l) seeds"
"$bin/fuzz_replay_fuzz_jinja" "$src"/../jinja/*.jinja 2>"$work/jinja.log" || {
  rc=$?
  tail -20 "$work/jinja.log" >&2
  echo "fuzz_seed_replay: fuzz_jinja failed (status $rc) on the input named last above" >&2
  exit 1
}
echo "== fuzz_serve_request: $(find "$src/serve_request_seeds" -type f | wc -l) seeds"
"$bin/fuzz_replay_fuzz_serve_request" "$src/serve_request_seeds" 2>"$work/serve_request.log" || {
  rc=$?
  tail -20 "$work/serve_request.log" >&2
  echo "fuzz_seed_replay: fuzz_serve_request failed (status $rc) on the input named last above" >&2
  exit 1
}

#!/usr/bin/env bash
# test_default_build.sh - a user's build (cmake -S . -B DIR, no options) builds
# what a user runs and nothing more (issue 46 item 4): vt, libvtcore, the CPU
# backend, the model plugins and the device store; no test or bench program,
# no test model; a GPU plugin only where a GPU of its kind is present
# (/dev/nvidia*, /dev/kfd), whatever toolchains are installed. Configure only.
# usage: test_default_build.sh SOURCE_DIR
set -euo pipefail
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vt-default-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
env -u CI cmake -S "$src" -B "$tmp" > "$tmp.log" 2>&1 || { cat "$tmp.log"; fail "default configure"; }
targets=$(cmake --build "$tmp" --target help)
for t in vt vtcore backend-cpu model-qwen35 model-gemma4 store-device; do
  grep -qE "^\.\.\. $t( |\$)" <<<"$targets" || fail "the default build lacks $t"
done
for t in test_cli test_qwen35_fixtures bench_read_bw bench_cpu_matvec random-model; do
  ! grep -qE "^\.\.\. $t( |\$)" <<<"$targets" || fail "the default build builds $t (tests and benches need -DVT_BUILD_TESTS=ON)"
done
if [ ! -e /dev/nvidiactl ] && [ ! -e /dev/nvidia0 ]; then
  ! grep -qE "^\.\.\. backend-cuda( |\$)" <<<"$targets" || fail "backend-cuda is built with no NVIDIA GPU here"
fi
if [ ! -e /dev/kfd ]; then
  ! grep -qE "^\.\.\. backend-rocm( |\$)" <<<"$targets" || fail "backend-rocm is built with no ROCm GPU here"
fi
rm -f "$tmp.log"
echo "PASS: the default build holds vt, its CPU backend and model plugins only"

#!/usr/bin/env bash
# test_packages.sh - the Debian packages the way a distribution uses them
# (cmake/packaging.cmake; registered by tests/packaging.cmake, label "packaging").
#
#  1. cpack -G DEB into a temporary directory; every expected package exists.
#  2. dpkg-deb -x vt and vt-model-qwen35 into a scratch root; the extracted vt
#     (no LD_LIBRARY_PATH: its RUNPATH is $ORIGIN/../<libdir>) computes the
#     qwen35moe fixture's logits within the fixture criterion (max |d| <= 1e-2,
#     same argmax at every position), or, without the fixture folder, generates
#     from the demo model exactly what the build tree's vt generates.
#  3. `vt plugins` in the root lists backend 'cpu' and model 'qwen35', not cuda.
#  4. dpkg-deb -x vt-backend-cuda into the same root: `vt plugins` lists backend
#     'cuda' (no rebuild; zero devices without a GPU is fine).
#  5. A plugin built for ABI 1.0 dropped into the root's plugin folder loads with
#     its newer capability ABSENT ("plugin built for ABI 1.0"); one built for
#     ABI major 2 in its place is refused, named by its file.
#  6. lintian on every .deb: any E: fails the test; warnings are printed.
#
# usage: test_packages.sh BUILD_DIR FIXTURES_DIR DEMO_MODEL FAKE_PLUGIN_ROOT EXPECTED_PACKAGES...
set -euo pipefail

build=$1 fixtures=${VT_FIXTURES_DIR:-$2} demo=$3 fakes=$4 # env VT_FIXTURES_DIR overrides
shift 4
expected=("$@")

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '\n== %s (%ds)\n' "$*" "$SECONDS"; }

for tool in cpack dpkg-deb lintian; do
  command -v "$tool" >/dev/null || fail "$tool not found (scripts/deps.sh installs it)"
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vt-packages.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
debs=$tmp/debs root=$tmp/root
mkdir -p "$debs" "$root"
# only what the packages install may be found
unset VT_PLUGIN_PATH VT_CONFIG LD_LIBRARY_PATH VT_KERNELS

step "cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$debs" >"$tmp/cpack.log" 2>&1) ||
  { cat "$tmp/cpack.log"; fail "cpack -G DEB"; }
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
release=$(sed -n 's/^set(CPACK_DEBIAN_PACKAGE_RELEASE "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
arch=$(dpkg --print-architecture)
deb() { echo "$debs/${1}_${version}-${release}_${arch}.deb"; }
for p in "${expected[@]}"; do
  [ -f "$(deb "$p")" ] || { ls "$debs"; fail "package $p was not built"; }
  printf '%-18s Depends: %s\n' "$p" "$(dpkg-deb -f "$(deb "$p")" Depends)"
done
# vt alone cannot run its own demo model: it recommends the model plugins
recs=$(dpkg-deb -f "$(deb vt)" Recommends)
grep -qF "vt-model-qwen35 (= $version-$release)" <<<"$recs" ||
  fail "vt does not recommend vt-model-qwen35 (= $version-$release), which its demo model needs (Recommends: $recs)"
# every plugin and the SDK need exactly this vt
for p in "${expected[@]}"; do
  [ "$p" = vt ] && continue
  deps=$(dpkg-deb -f "$(deb "$p")" Depends) # captured: grep -q on a pipe can SIGPIPE the writer under pipefail
  grep -qF "vt (= $version-$release)" <<<"$deps" ||
    fail "$p does not depend on vt (= $version-$release)"
done

step "dpkg-deb -x vt vt-model-qwen35 -> $root"
dpkg-deb -x "$(deb vt)" "$root"
dpkg-deb -x "$(deb vt-model-qwen35)" "$root"
vt=$root/usr/bin/vt
[ -x "$vt" ] || fail "the vt package has no usr/bin/vt"
plugdir=$(dirname "$(find "$root" -name backend-cpu.so | head -1)")
[ -f "$plugdir/model-qwen35.so" ] || fail "model-qwen35.so is not beside backend-cpu.so ($plugdir)"
# the packaged libvtcore is the one the packaged vt loads
libs=$(ldd "$vt") # captured, not piped into grep -q (pipefail + SIGPIPE made this flaky)
grep -q "=> $root/.*libvtcore" <<<"$libs" || { printf '%s\n' "$libs"; fail "$vt does not load $root's libvtcore"; }

model=$fixtures/qwen35moe-tiny/gguf/qwen35moe-tiny-bf16.gguf
ref=$fixtures/qwen35moe-tiny/refs/logits-len8.f32.bin
if [ -f "$model" ] && [ -f "$ref" ]; then
  step "fixture qwen35moe-tiny-bf16 logits (len8) from the scratch root"
  # prompt "len8" of refs/index.json; argmax per position from the same file
  "$vt" logits -m "$model" --tokens 539,2784,322,1821,71,300,294,220 --kernels scalar -t 2 \
    -o "$tmp/logits.bin" || fail "$vt logits"
  n_vocab=4096
  paste <(od -An -v -tf4 -w4 "$tmp/logits.bin") <(od -An -v -tf4 -w4 "$ref") |
    awk -v V=$n_vocab -v want="3313 1091 2481 1414 1759 2562 2691 602" '
      BEGIN { split(want, am, " ") }
      { t = int((NR - 1) / V); d = $1 - $2; if (d < 0) d = -d; if (d > mx) mx = d
        if (NR % V == 1 || $1 > best[t]) { best[t] = $1; arg[t] = (NR - 1) % V } n++ }
      END {
        if (n != 8 * V) { printf "expected %d logits, got %d\n", 8 * V, n; exit 1 }
        bad = 0
        for (t = 0; t < 8; t++) if (arg[t] != am[t + 1]) {
          printf "position %d: argmax %d, reference %d\n", t, arg[t], am[t + 1]; bad = 1 }
        printf "max |d| vs transformers: %.3g (criterion 1e-2)\n", mx
        exit (bad || mx > 1e-2) }' || fail "packaged vt's logits do not match the fixture"
else
  step "no fixture folder ($fixtures): demo model from the scratch root"
  [ -f "$demo" ] || fail "neither the fixture $model nor the demo model $demo"
  "$vt" run -m "$demo" -p "The history of" -n 8 --temp 0 --ids -t 2 >"$tmp/pkg.out" ||
    fail "$vt run"
  "$build/bin/vt" run -m "$demo" -p "The history of" -n 8 --temp 0 --ids -t 2 >"$tmp/build.out" ||
    fail "$build/bin/vt run"
  cmp "$tmp/pkg.out" "$tmp/build.out" ||
    fail "the packaged vt generates '$(cat "$tmp/pkg.out")', the build tree's '$(cat "$tmp/build.out")'"
  echo "generated the same ids as the build tree: $(tr '\n' ' ' <"$tmp/pkg.out")"
fi

step "vt run without -m: the demo model installed by the vt package"
[ -f "$root/usr/share/vt/models/vt-demo-qwen35moe.gguf" ] ||
  fail "the vt package does not install usr/share/vt/models/vt-demo-qwen35moe.gguf"
"$vt" run -p "This program is free software;" -n 12 --temp 0 --kernels scalar -t 2 --stats \
  >"$tmp/demo.out" 2>"$tmp/demo.err" || fail "$vt run without -m: $(cat "$tmp/demo.err")"
grep -q "the demo model $root/usr/bin/.*/vt-demo-qwen35moe.gguf" "$tmp/demo.err" ||
  fail "vt run without -m did not take the installed demo model: $(cat "$tmp/demo.err")"
grep -q "redistribute" "$tmp/demo.out" ||
  fail "the packaged demo model wrote '$(cat "$tmp/demo.out")'"
echo "wrote: $(tr '\n' ' ' <"$tmp/demo.out")"

# `vt plugins` exits 1 when some plugin is refused: the output is what counts here
plugins() { "$vt" plugins >"$tmp/plugins.out" 2>&1 || true; }

step "vt plugins: vt + vt-model-qwen35"
plugins
grep -F "plugin directories:" "$tmp/plugins.out"
grep -q "^backend 'cpu'" "$tmp/plugins.out" || { cat "$tmp/plugins.out"; fail "backend 'cpu' not listed"; }
grep -q "^model 'qwen35'" "$tmp/plugins.out" || { cat "$tmp/plugins.out"; fail "model 'qwen35' not listed"; }
! grep -q "^backend 'cuda'" "$tmp/plugins.out" || fail "backend 'cuda' listed before its package is installed"
! grep -q "^REFUSED" "$tmp/plugins.out" || { cat "$tmp/plugins.out"; fail "a packaged plugin was refused"; }
if grep -qF "$build/lib" "$tmp/plugins.out"; then fail "vt in the scratch root reads the build tree"; fi
echo "lists backend 'cpu' and model 'qwen35', no cuda"

if [ -f "$(deb vt-backend-cuda)" ]; then
  step "dpkg-deb -x vt-backend-cuda into the same root"
  dpkg-deb -x "$(deb vt-backend-cuda)" "$root"
  plugins
  grep -A1 "^backend 'cuda'" "$tmp/plugins.out" ||
    { cat "$tmp/plugins.out"; fail "backend 'cuda' not listed after installing vt-backend-cuda"; }
  grep -A4 "^backend 'cuda'" "$tmp/plugins.out" | grep "devices:" || true
elif [[ " ${expected[*]} " == *" vt-backend-cuda "* ]]; then
  fail "vt-backend-cuda expected but not built"
else
  echo "(backend-cuda is not built here: no vt-backend-cuda package to add)"
fi

step "a plugin built for ABI 1.0 in the installed plugin folder"
install -m 0644 "$fakes/minor0/backend-fake.so" "$plugdir/backend-fake.so"
plugins
sed -n "/^backend 'fake'/,/^\$/p" "$tmp/plugins.out" | grep -E "^backend|device_name" |
  tee "$tmp/fake.out"
grep -q "^backend 'fake' .* ABI 1\.0 " "$tmp/fake.out" ||
  { cat "$tmp/plugins.out"; fail "the ABI 1.0 plugin did not load"; }
grep -Eq "device_name +ABSENT +plugin built for ABI 1\.0" "$tmp/fake.out" ||
  fail "the ABI 1.0 plugin's device_name (ABI 1.1) is not ABSENT 'plugin built for ABI 1.0'"

step "the same plugin built for ABI major 2 in its place"
install -m 0644 "$fakes/abi2/backend-fake.so" "$plugdir/backend-fake.so"
plugins
grep -A1 "^REFUSED $plugdir/backend-fake.so" "$tmp/plugins.out" | tee "$tmp/refused.out"
grep -q "major differs" "$tmp/refused.out" ||
  { cat "$tmp/plugins.out"; fail "the ABI 2 plugin was not refused by name"; }
! grep -q "^backend 'fake'" "$tmp/plugins.out" || fail "the ABI 2 plugin was loaded"
rm -f "$plugdir/backend-fake.so"

step "lintian"
# exit 1: tags of severity error (checked below); 2: lintian itself failed
rc=0
lintian --no-cfg "$debs"/*.deb >"$tmp/lintian.out" 2>&1 || rc=$?
grep -v "^running with root privileges" "$tmp/lintian.out" || true # it says so as root
[ "$rc" -le 1 ] || fail "lintian did not run (exit $rc)"
if grep -q "^E: " "$tmp/lintian.out"; then
  fail "lintian reports errors"
fi
n_w=$(grep -c "^W: " "$tmp/lintian.out" || true)
echo "lintian: no errors, $n_w warnings"
printf '\nPASS (%ds)\n' "$SECONDS"

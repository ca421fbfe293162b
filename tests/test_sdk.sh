#!/usr/bin/env bash
# test_sdk.sh - the installed SDK, as a third party uses it (issue 7):
#  1. cmake --install the current build into a temporary prefix P and check the
#     layout (bin/vt, libvtcore.so.<major>, include/vt, vt-plugin.pc,
#     cmake/vt/vtConfig*.cmake, the plugin dir, share/vt/residency.yaml);
#  2. the installed vt finds the installed plugins with no flags;
#  3. examples/model-plugin, copied out of the source tree, built against P
#     with pkg-config and with find_package(vt) (no -I into the source tree);
#  4. each build's plugin, dropped into a VT_PLUGIN_PATH directory, is listed
#     by `vt plugins`, and `vt run` / `vt logits` use it: greedy decoding gives
#     the letters the example's weights encode, and the logits match the
#     example's double-precision reference (toylm-mkgguf --check);
#  5. each build's `cmake --install` (the find_package one with its own
#     CMAKE_INSTALL_PREFIX elsewhere) puts the plugin into P's plugin dir,
#     where the installed vt finds it with no flags.
# usage: test_sdk.sh BUILD_DIR SOURCE_DIR C_COMPILER
set -euo pipefail
build=$1 src=$2 cc=$3
unset VT_PLUGIN_PATH VT_CONFIG CMAKE_PREFIX_PATH PKG_CONFIG_PATH VT_KERNELS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vt-sdk.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
P=$tmp/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "install $build into $P"
cmake --install "$build" --prefix "$P" > "$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }

pc=$(find "$P" -name vt-plugin.pc)
[ -n "$pc" ] || fail "no vt-plugin.pc under $P"
libdir=$(dirname "$(dirname "$pc")")
[ -x "$P/bin/vt" ] || fail "no $P/bin/vt"
ls "$libdir"/libvtcore.so.[0-9]* > /dev/null 2>&1 || fail "no libvtcore.so.<major> in $libdir"
soname=$(objdump -p "$libdir/libvtcore.so" | awk '/SONAME/ {print $2}')
[[ "$soname" =~ ^libvtcore\.so\.[0-9]+$ ]] || fail "libvtcore soname is '$soname'"
[ -e "$libdir/$soname" ] || fail "$libdir/$soname missing"
for h in status.h types.h gguf.h plugin.h backend.h model.h store.h; do
  [ -f "$P/include/vt/$h" ] || fail "no $P/include/vt/$h"
done
[ -f "$libdir/cmake/vt/vtConfig.cmake" ] && [ -f "$libdir/cmake/vt/vtConfigVersion.cmake" ] ||
  fail "no vtConfig.cmake / vtConfigVersion.cmake in $libdir/cmake/vt"
[ -f "$P/share/vt/residency.yaml" ] || fail "no $P/share/vt/residency.yaml"
pdir=$libdir/vt/plugins
for f in backend-cpu.so backend-cpu.ini model-qwen35.so model-qwen35.ini; do
  [ -f "$pdir/$f" ] || fail "no $pdir/$f"
done
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --variable=plugindir vt-plugin | xargs realpath)" = "$(realpath "$pdir")" ] ||
  fail "vt-plugin.pc plugindir '$(pkg-config --variable=plugindir vt-plugin)' is not $pdir"
[ -z "$(pkg-config --libs vt-plugin)" ] || fail "vt-plugin.pc has Libs: $(pkg-config --libs vt-plugin)"
inc=$(pkg-config --cflags-only-I vt-plugin | sed 's/^ *-I//; s/ *$//')
[ "$(realpath "$inc")" = "$(realpath "$P/include")" ] || fail "vt-plugin.pc Cflags: $(pkg-config --cflags vt-plugin)"
[ "$(pkg-config --variable=abi_major vt-plugin)" = "$(awk '/#define VT_ABI_MAJOR/ {print $3}' "$P/include/vt/plugin.h")" ] ||
  fail "vt-plugin.pc abi_major is not VT_ABI_MAJOR"
unset PKG_CONFIG_PATH

step "the installed vt finds the installed plugins with no flags"
"$P/bin/vt" --help > "$tmp/help.txt" 2>&1 || true
grep -q "lib.*/vt/plugins" "$tmp/help.txt" || fail "vt --help does not name the plugin directory"
grep -q "share/vt/residency.yaml" "$tmp/help.txt" || fail "vt --help does not name the config"
"$P/bin/vt" plugins > "$tmp/plugins.txt" 2>&1 || true
grep -q "^backend 'cpu'" "$tmp/plugins.txt" || { cat "$tmp/plugins.txt"; fail "installed vt: no backend 'cpu'"; }
grep -q "^model 'qwen35'" "$tmp/plugins.txt" || { cat "$tmp/plugins.txt"; fail "installed vt: no model 'qwen35'"; }
grep -q "file: $(realpath "$pdir")/backend-cpu.so" "$tmp/plugins.txt" ||
  { cat "$tmp/plugins.txt"; fail "backend-cpu not loaded from the installed plugin dir"; }
! grep -q "file: $(realpath "$build")" "$tmp/plugins.txt" ||
  { cat "$tmp/plugins.txt"; fail "the installed vt loaded plugins from the build tree"; }

step "build examples/model-plugin out of tree"
cp -r "$src/examples/model-plugin" "$tmp/src"
common=(-DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS=-Werror -DCMAKE_BUILD_TYPE=Release
        -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
PKG_CONFIG_PATH=$libdir/pkgconfig cmake -S "$tmp/src" -B "$tmp/b-pc" -DTOYLM_USE_PKG_CONFIG=ON \
  "${common[@]}" > "$tmp/pc.log" 2>&1 || { cat "$tmp/pc.log"; fail "configure with pkg-config"; }
cmake --build "$tmp/b-pc" > "$tmp/pc-build.log" 2>&1 || { cat "$tmp/pc-build.log"; fail "build with pkg-config"; }
# the plugin project's own install prefix is elsewhere: its install must still
# go where the installed vt looks (issue 46 item 2)
cmake -S "$tmp/src" -B "$tmp/b-fp" -DCMAKE_PREFIX_PATH="$P" -DCMAKE_INSTALL_PREFIX="$tmp/elsewhere" \
  "${common[@]}" > "$tmp/fp.log" 2>&1 || { cat "$tmp/fp.log"; fail "configure with find_package"; }
cmake --build "$tmp/b-fp" > "$tmp/fp-build.log" 2>&1 || { cat "$tmp/fp-build.log"; fail "build with find_package"; }
for b in b-pc b-fp; do
  cc_json=$tmp/$b/compile_commands.json
  grep -q -- "-I$P/\|-isystem $P/" "$cc_json" || fail "$b: the installed SDK is not on the include path"
  ! grep -q "$src" "$cc_json" || fail "$b: the source tree $src is on the include path"
  [ -f "$tmp/$b/model-toylm.so" ] && [ -f "$tmp/$b/model-toylm.ini" ] || fail "$b: no model-toylm.so/.ini"
  undef=$(nm -D --undefined-only "$tmp/$b/model-toylm.so")
  ! grep -q " vt_" <<<"$undef" || fail "$b: the plugin links vt symbols"
done

"$tmp/b-pc/toylm-mkgguf" -o "$tmp/toy.gguf" || fail "toylm-mkgguf"
for b in b-pc b-fp; do
  step "plugin from $b in a VT_PLUGIN_PATH directory"
  d=$tmp/plugins-$b
  mkdir -m 755 "$d"
  install -m 644 "$tmp/$b/model-toylm.so" "$tmp/$b/model-toylm.ini" "$d/"
  VT_PLUGIN_PATH=$d "$P/bin/vt" plugins > "$tmp/p.txt" 2>&1 || true
  grep -q "^model 'toylm' 1.0.0" "$tmp/p.txt" || { cat "$tmp/p.txt"; fail "$b: vt plugins does not list toylm"; }
  grep -q "architectures: toylm" "$tmp/p.txt" || fail "$b: toylm's architectures not listed"
  out=$(VT_PLUGIN_PATH=$d "$P/bin/vt" run -m "$tmp/toy.gguf" -p "a" -n 6 --temp 0 -t 1 2> "$tmp/run.err") ||
    { cat "$tmp/run.err"; fail "$b: vt run"; }
  echo "vt run -p a -n 6 --temp 0: '$out'"
  [[ "$out" == *"bcdefg"* ]] || { cat "$tmp/run.err"; fail "$b: vt run printed '$out', expected 'bcdefg'"; }
  out=$(VT_PLUGIN_PATH=$d "$P/bin/vt" run -m "$tmp/toy.gguf" -p "xy" -n 4 --temp 0 -t 1 2> "$tmp/run.err") ||
    { cat "$tmp/run.err"; fail "$b: vt run"; }
  [[ "$out" == *"zabc"* ]] || fail "$b: vt run -p xy printed '$out', expected 'zabc'"
  VT_PLUGIN_PATH=$d "$P/bin/vt" logits -m "$tmp/toy.gguf" --tokens 97,122,32,256,257,0 \
    -o "$tmp/logits.bin" -t 1 2> "$tmp/logits.err" || { cat "$tmp/logits.err"; fail "$b: vt logits"; }
  "$tmp/b-pc/toylm-mkgguf" --check "$tmp/logits.bin" --tokens 97,122,32,256,257,0 ||
    fail "$b: vt logits differ from the reference"
done

for b in b-pc b-fp; do
  step "cmake --install of the $b build puts toylm where the installed vt looks"
  rm -f "$pdir/model-toylm.so" "$pdir/model-toylm.ini"
  cmake --install "$tmp/$b" > "$tmp/$b-install.log" 2>&1 || { cat "$tmp/$b-install.log"; fail "$b: install toylm"; }
  [ -f "$pdir/model-toylm.so" ] && [ -f "$pdir/model-toylm.ini" ] ||
    { cat "$tmp/$b-install.log"; fail "$b: toylm not installed into $pdir"; }
  "$P/bin/vt" plugins > "$tmp/p.txt" 2>&1 || true
  grep -q "^model 'toylm'" "$tmp/p.txt" || { cat "$tmp/p.txt"; fail "$b: installed toylm not listed"; }
  out=$("$P/bin/vt" run -m "$tmp/toy.gguf" -p "q" -n 3 --temp 0 -t 1 2> "$tmp/run.err") ||
    { cat "$tmp/run.err"; fail "$b: vt run with the installed toylm"; }
  [[ "$out" == *"rst"* ]] || fail "$b: installed toylm: vt run -p q printed '$out', expected 'rst'"
done
echo "PASS"

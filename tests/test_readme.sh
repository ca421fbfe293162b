#!/usr/bin/env bash
# test_readme.sh - the commands the README shows exist: in every code block
# and every `inline` span, each `vt <command>` is a command whose --help works,
# and each --flag written after it (up to the next &&, | or ;) is one that
# `vt <command> --help` lists, so a renamed or dropped option cannot stay in
# the README (issue 46 item 7).
# usage: test_readme.sh VT_BINARY README
set -euo pipefail
vt=$1 readme=$2
cmds='run|serve|bench|fit|info|mkmodel|config|logits|tokenize|plugins'

# code blocks whole, and the inline spans of the other lines (a table's
# escaped \| is not a pipe)
spans() {
  awk '/^```/ { fence = !fence; next } fence { print; next } { print "\x01" $0 }' "$readme" |
    while IFS= read -r line; do
      if [[ $line == $'\x01'* ]]; then
        grep -oE '`[^`]+`' <<<"${line#?}" | tr -d '`' || true
      else
        printf '%s\n' "$line"
      fi
    done
}

bad=0 n_cmd=0 n_flag=0
declare -A helps
while IFS= read -r use; do
  use=${use#*vt }
  cmd=${use%% *}
  if [ -z "${helps[$cmd]+x}" ]; then
    if ! helps[$cmd]=$("$vt" "$cmd" --help 2>&1); then
      echo "README shows 'vt $cmd', whose --help fails: ${helps[$cmd]}"
      bad=1
      continue
    fi
  fi
  n_cmd=$((n_cmd + 1))
  for f in $(grep -oE -- '(^|[ [(])--[a-z][a-z0-9-]*' <<<"$use" | tr -d ' [(' | sort -u); do
    n_flag=$((n_flag + 1))
    if ! grep -qE -- "(^| )${f}( |,|=|\$)" <<<"${helps[$cmd]}"; then
      echo "README: 'vt $cmd ... $f' but 'vt $cmd --help' has no $f (in: vt $use)"
      bad=1
    fi
  done
done < <(spans | sed 's/\\|/\//g' | grep -oE "(^|[ /])vt ($cmds)( [^&|;]*)?" | sed -E 's/^[ \/]//')

echo "README: $n_cmd uses of vt commands, $n_flag flags checked against --help"
[ "$n_cmd" -gt 10 ] || { echo "README: only $n_cmd uses of vt commands found: the scan is broken"; exit 1; }
exit $bad

#!/bin/bash
# cli_chat.sh VT FIXTURES PLUGIN_DIR - the test cli_chat: vt chat (issue 45)
# on the trained fixture, greedy. Through a pty (util-linux script), as a
# person at a terminal drives it: three turns, each after the first
# evaluating only its new tokens (--stats: "reused from the cache"), /clear
# starting over from an empty cache. Through a pipe: the three answers, got
# with the cache kept, equal vt serve's for the same conversation sent whole
# (evaluated from an empty cache). Without script, curl, python3 or the
# fixtures: skip (77), except under CI=true, where that is a failure.
set -euo pipefail
vt=$1
fx=${VT_FIXTURES_DIR:-$2}
plugins=$3
missing=""
command -v script >/dev/null || missing="script (util-linux)"
command -v curl >/dev/null || missing="$missing curl"
command -v python3 >/dev/null || missing="$missing python3"
[ -d "$fx" ] || missing="$missing the fixture folder $fx"
if [ -n "$missing" ]; then
  if [ "${CI:-}" = true ]; then
    echo "cli_chat: missing under CI=true: $missing (scripts/deps.sh installs them)" >&2
    exit 1
  fi
  echo "*** SKIPPING cli_chat: missing $missing" >&2
  exit 77
fi
model=$fx/qwen35moe-trained/gguf/qwen35moe-trained-q8_0.gguf
chat=("$vt" chat -m "$model" --plugin-dir "$plugins" --device cpu -t 2 --temp 0 -n 16)
tmp=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && { kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; }; rm -rf "$tmp"' EXIT
fail() { echo "cli_chat: $*" >&2; exit 1; }

# 1. a terminal: three turns, then /clear and one more
printf 'What is a list?\nAnd a tuple?\nWhy?\n/clear\nWhat is a dict?\n/exit\n' >"$tmp/in"
timeout 120 script -q -e -c "$(printf '%q ' "${chat[@]}") --stats" /dev/null <"$tmp/in" >"$tmp/pty" ||
  fail "vt chat through a pty exited $?: $(cat "$tmp/pty")"
tr -d '\r' <"$tmp/pty" >"$tmp/pty.txt"
grep -q '^vt chat: .*/clear starts over' "$tmp/pty.txt" || fail "no banner on a terminal: $(cat "$tmp/pty.txt")"
mapfile -t turns < <(sed -n 's/.*turn \([0-9]*\): prefill \([0-9]*\) new tokens (\([0-9]*\) reused.*/\1 \2 \3/p' "$tmp/pty.txt")
[ "${#turns[@]}" = 4 ] || fail "wanted 4 turns' stats, got ${#turns[@]}: $(cat "$tmp/pty.txt")"
read -r t n r <<<"${turns[0]}"; [ "$t" = 1 ] && [ "$r" = 0 ] || fail "turn 1: ${turns[0]}"
prev=$((n + 16))
for i in 1 2; do
  read -r t n r <<<"${turns[$i]}"
  # the cache holds the whole conversation so far; the turn adds only its own text
  [ "$t" = $((i + 1)) ] && [ "$r" -ge "$prev" ] && [ "$n" -lt 32 ] ||
    fail "turn $t: $n new tokens, $r reused (wanted >= $prev reused, a handful new)"
  prev=$((r + n))
done
read -r t n r <<<"${turns[3]}"; [ "$t" = 1 ] && [ "$r" = 0 ] || fail "after /clear: ${turns[3]}"
grep -q 'vt chat: a new conversation' "$tmp/pty.txt" || fail "/clear said nothing"
echo "cli_chat: pty: 3 turns (reused ${turns[1]##* } and ${turns[2]##* } tokens), /clear, /exit: ok"

# 2. the prompt from a file (-f FILE) and from stdin (-p -) is the prompt given with -p;
#    vt run -cnv is vt chat
run=("$vt" run -m "$model" --plugin-dir "$plugins" --device cpu -t 2 --temp 0 -n 8 -q)
want=$("${run[@]}" -p $'The history of\nPython')
printf 'The history of\nPython' >"$tmp/prompt"
[ "$("${run[@]}" -f "$tmp/prompt")" = "$want" ] || fail "-f FILE: not the -p answer"
[ "$(printf 'The history of\nPython' | "${run[@]}" -p -)" = "$want" ] || fail "-p -: not the -p answer"
"${run[@]}" -f "$tmp/nonexistent" 2>"$tmp/err" && fail "-f of a missing file succeeded"
grep -q "$tmp/nonexistent" "$tmp/err" || fail "-f of a missing file: $(cat "$tmp/err")"
[ "$(echo 'What is a list?' | "${run[@]}" -cnv)" = "$(echo 'What is a list?' | "${chat[@]}" -n 8 -q)" ] ||
  fail "vt run -cnv is not vt chat"
printf 'a\0b\n/exit\n' | "${chat[@]}" -q 2>"$tmp/err" >/dev/null || fail "a NUL byte in a line: exit $?"
grep -q "NUL byte" "$tmp/err" || fail "a NUL byte in a line was taken: $(cat "$tmp/err")"
echo "cli_chat: -f FILE, -p -, vt run -cnv: ok"

# 3. a pipe: the answers with the cache kept = vt serve's from an empty cache
printf 'What is a list?\nAnd a tuple?\nWhy?\n' | "${chat[@]}" -q >"$tmp/out"
"$vt" serve -m "$model" --plugin-dir "$plugins" --device cpu -t 2 --port 0 2>"$tmp/log" &
pid=$!
. "$(dirname "$0")/serve/serve_ready.sh"
vt_serve_wait "$tmp/log" $pid
python3 - "$port" "$tmp/out" <<'PY'
import json, sys, urllib.request
port, out = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
def ask(msgs):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps({"messages": msgs, "max_tokens": 16, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req))["choices"][0]["message"]["content"]
msgs, want = [], ""
for q in ["What is a list?", "And a tuple?", "Why?"]:
    msgs.append({"role": "user", "content": q})
    a = ask(msgs)
    msgs.append({"role": "assistant", "content": a})
    want += a + "\n"
if out != want:
    sys.exit(f"cli_chat: vt chat's answers {out!r}\n  differ from vt serve's for the whole conversation {want!r}")
print("cli_chat: pipe: 3 answers with the cache kept = vt serve's from an empty cache: ok")
PY

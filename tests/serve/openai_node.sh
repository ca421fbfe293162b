#!/bin/bash
# openai_node.sh VT FIXTURES PLUGIN_DIR - the test serve_openai_node: the
# official OpenAI Node SDK (tests/serve/node_modules, installed by
# scripts/deps.sh) talks to vt serve on the trained fixture and must get vt
# run's greedy text, streamed and not; curl -N must see well-formed SSE.
# Without node, the SDK or the fixtures: skip (77), except under CI=true,
# where that is a failure.
set -euo pipefail
vt=$1
fx=${VT_FIXTURES_DIR:-$2}
plugins=$3
here=$(cd "$(dirname "$0")" && pwd)
missing=""
command -v node >/dev/null || missing="node"
[ -f "$here/node_modules/openai/package.json" ] || missing="$missing tests/serve/node_modules/openai (npm ci --prefix tests/serve)"
command -v curl >/dev/null || missing="$missing curl"
[ -d "$fx" ] || missing="$missing the fixture folder $fx"
if [ -n "$missing" ]; then
  if [ "${CI:-}" = true ]; then
    echo "serve_openai_node: missing under CI=true: $missing (scripts/deps.sh installs them)" >&2
    exit 1
  fi
  echo "*** SKIPPING serve_openai_node: missing $missing" >&2
  exit 77
fi
model=$fx/qwen35moe-trained/gguf/qwen35moe-trained-q8_0.gguf
run=("$vt" run -m "$model" --plugin-dir "$plugins" --device cpu -t 2 -q)
# vt run ends its text with one newline of its own; $(...) would strip the text's too
want_chat=$("${run[@]}" --chat -p "What is a list?" -n 24 --temp 0; echo x)
want_chat=${want_chat%$'\nx'}
want_completion=$("${run[@]}" -p "The history of" -n 24 --temp 0; echo x)
want_completion=${want_completion%$'\nx'}

log=$(mktemp)
. "$here/serve_ready.sh"
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -f "$log"' EXIT
"$vt" serve -m "$model" --plugin-dir "$plugins" --device cpu -t 2 --port 0 --api-key sk-test 2>"$log" &
pid=$!
vt_serve_wait "$log" $pid

node "$here/openai_sdk.mjs" "$port" sk-test "$want_chat" "$want_completion"

# curl -N: every event is "data: <JSON>" + a blank line, one finish, [DONE] last
sse=$(curl -sN -H "Authorization: Bearer sk-test" "http://127.0.0.1:$port/v1/chat/completions" \
  -d '{"messages":[{"role":"user","content":"What is a list?"}],"max_tokens":24,"temperature":0,"stream":true}')
printf '%s\n' "$sse" | node -e '
  const body = require("fs").readFileSync(0, "utf8");
  const events = body.replace(/\n+$/, "").split("\n\n");
  let finishes = 0;
  events.forEach((e, i) => {
    if (!e.startsWith("data: ")) { console.error("not an SSE data line: " + e); process.exit(1); }
    const d = e.slice(6);
    if (d === "[DONE]") { if (i !== events.length - 1) { console.error("[DONE] is not last"); process.exit(1); } return; }
    const j = JSON.parse(d);
    for (const c of j.choices) if (c.finish_reason) finishes++;
  });
  if (finishes !== 1 || events[events.length - 1] !== "data: [DONE]") { console.error("finishes " + finishes); process.exit(1); }
  console.log("curl -N: " + events.length + " well-formed events");'
kill -TERM $pid
wait $pid

# a tool-calling round trip: the Qwen3.5 template (tests/jinja) and a forced answer
forced=$'The user asks about Paris.\n</think>\n\nI will look it up.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n</function>\n</tool_call>'
: >"$log"
VT_TEST_FORCE_OUTPUT="$forced" "$vt" serve -m "$model" --plugin-dir "$plugins" --device cpu -t 2 --port 0 \
  --api-key sk-test --chat-template-file "$here/../jinja/Qwen3.5-4B.jinja" 2>"$log" &
pid=$!
vt_serve_wait "$log" $pid
node "$here/tool_calls.mjs" "$port" sk-test
kill -TERM $pid
wait $pid
echo "serve_openai_node: ok"

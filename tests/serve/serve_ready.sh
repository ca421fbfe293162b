# serve_ready.sh - sourced by the shell tests that start vt serve.
# vt_serve_wait LOG PID: wait until the vt serve of PID (its stderr in LOG)
# answers /health; sets port. Exits 1, showing LOG, when it exits or never
# answers.
vt_serve_wait() {
  local log=$1 p=$2
  port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log" | head -1)
    if [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null; then return 0; fi
    kill -0 "$p" 2>/dev/null || { cat "$log" >&2; echo "vt serve exited" >&2; exit 1; }
    sleep 0.1
  done
  cat "$log" >&2
  echo "vt serve did not answer /health" >&2
  exit 1
}

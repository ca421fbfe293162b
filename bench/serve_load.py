#!/usr/bin/env python3
"""serve_load.py PORT [--conc 1,4,16] [--requests R] [--max-tokens N] [--prompt-words W]

Streaming load on a running vt serve: for each concurrency C, C clients each
send R streaming /v1/completions requests one after another (ignore_eos, so
every request generates exactly N tokens). Prints one row per C: aggregate
generated tokens/s (all tokens / wall time), time to first token (request
sent -> first text event) p50/p99, inter-token gap p50, and the usage check
(completion tokens reported == N, and no more text events than tokens).
"""
import argparse
import http.client
import json
import threading
import time


def one_request(port, prompt, max_tokens, out):
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "stream": True,
                       "ignore_eos": True, "temperature": 0.7, "seed": 1,
                       "stream_options": {"include_usage": True}})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}: {resp.read()[:200]!r}")
    first = None
    last = None
    gaps = []
    events = 0
    usage = None
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        j = json.loads(data)
        if j.get("usage"):
            usage = j["usage"]["completion_tokens"]
        for c in j.get("choices", []):
            if c.get("text"):
                now = time.monotonic()
                events += 1
                if first is None:
                    first = now - t0
                else:
                    gaps.append(now - last)
                last = now
    conn.close()
    out.append({"ttft": first, "gaps": gaps, "tokens": usage or 0, "events": events})


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--conc", default="1,4,16")
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--prompt-words", type=int, default=64)
    a = ap.parse_args()
    words = "the history of the standard library types and the license texts".split()
    print(f"{'streams':>7} {'requests':>8} {'gen tok/s':>10} {'per stream':>10} "
          f"{'TTFT p50 ms':>11} {'TTFT p99 ms':>11} {'ITL p50 ms':>10} {'usage ok':>8}")
    for c in [int(x) for x in a.conc.split(",")]:
        results = []
        errors = []

        def client(k):
            for r in range(a.requests):
                prompt = " ".join(words[(k + r + i) % len(words)] for i in range(a.prompt_words))
                try:
                    one_request(a.port, prompt, a.max_tokens, results)
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(str(e))

        t0 = time.monotonic()
        ths = [threading.Thread(target=client, args=(k,)) for k in range(c)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall = time.monotonic() - t0
        if errors:
            print(f"{c:>7} errors: {errors[:3]}")
            continue
        toks = sum(r["tokens"] for r in results)
        ttft = [r["ttft"] * 1e3 for r in results if r["ttft"] is not None]
        gaps = [g * 1e3 for r in results for g in r["gaps"]]
        # a text event per token, except where the detokenizer held a cut character back
        ok = all(r["tokens"] == a.max_tokens and r["events"] <= r["tokens"] for r in results)
        print(f"{c:>7} {len(results):>8} {toks / wall:>10.1f} {toks / wall / c:>10.1f} "
              f"{pct(ttft, 50):>11.1f} {pct(ttft, 99):>11.1f} {pct(gaps, 50):>10.2f} "
              f"{'yes' if ok else 'NO':>8}")


if __name__ == "__main__":
    main()

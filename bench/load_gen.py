#!/usr/bin/env python3
"""Closed-loop load generator for an OpenAI-compatible /v1/completions server (tpserve, llama-server, ...).

C client threads each send one streaming request at a time (stream=true, temperature 0, ignore_eos=true, so every
request generates exactly max_tokens) until N requests are done. Prompts are natural-ish English built from a
word list, 40-320 words (about 50-400 tokens), and max_tokens is drawn from [32, 128]; both come from a seeded RNG
keyed by (seed, C, request index), so two servers measured with the same seed and C see identical requests, and
the requests at different C share no prefix (a prefix cache cannot carry work from one sweep point to the next).
Standard library only.

Metrics (per request, client-side wall clock):
  TTFT      = time of the first SSE chunk carrying non-empty text - time the request was sent     [ms]
  ITL       = (time of the last text chunk - time of the first text chunk) / (n_out - 1)           [ms/token]
              (a server may put several tokens in one chunk, so this is the mean over the request)
  e2e       = time the stream ended - time the request was sent                                   [s]
  n_out     = usage.completion_tokens of the final chunk (stream_options.include_usage), else the
              number of text chunks
Aggregates over the run (wall = first send .. last stream end):
  TTFT p50/p90 (nearest-rank), mean ITL = mean of per-request ITL, e2e p50,
  output tok/s = sum(n_out) / wall,  requests/s = n_ok / wall.

  bench/load_gen.py --url http://127.0.0.1:8000 --concurrency 16 [--requests N] [--seed S] [--label NAME]
                    [--json-out FILE] [--header]
Prints one markdown table row (and, with --header, the header first); --json-out appends one JSON line.
"""
import argparse
import hashlib
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

WORDS = (
    "the of and to in is was that for on with as by at from his her their this which but not are were be have "
    "has had one all would there what about when out up into time year people way day man woman child world life "
    "hand part place case week company system program question work government number night point home water room "
    "mother area money story fact month lot right study book eye job word business issue side kind head house "
    "service friend father power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war history party result "
    "change morning reason research girl guy moment air teacher force education river mountain village market "
    "winter summer garden letter train station bridge island forest ocean engine machine language music painting "
    "small large old new good great long little young important different early public bad same able last late "
    "hard major better economic strong possible whole free military true federal international full special easy "
    "clear recent certain personal open red difficult available likely short single medical current wrong private "
    "quickly slowly often never always together however finally perhaps nearly already still again almost "
    "make know take see come think look want give use find tell ask seem feel try leave call keep begin help show "
    "hear play run move live believe bring happen write provide sit stand lose pay meet include continue learn "
    "lead understand watch follow stop create speak read spend grow walk offer remember love consider appear buy "
    "wait serve send expect build stay fall reach remain suggest raise pass sell decide return explain hope carry"
).split()


def make_request(seed, concurrency, index, min_words, max_words, min_out, max_out):
    """Deterministic (prompt, max_tokens) for request `index` of the run (seed, concurrency)."""
    key = hashlib.sha256(f"{seed}/{concurrency}/{index}".encode()).digest()
    rng = random.Random(int.from_bytes(key[:8], "little"))
    n_words = rng.randint(min_words, max_words)
    words, sentence = [], []
    while len(words) < n_words:
        sentence.append(rng.choice(WORDS))
        if len(sentence) >= rng.randint(6, 18):
            sentence[0] = sentence[0].capitalize()
            words.extend(sentence[:-1] + [sentence[-1] + "."])
            sentence = []
    words = words[:n_words]
    prompt = " ".join(words)
    return prompt, rng.randint(min_out, max_out)


def percentile(values, q):
    """Nearest-rank percentile, q in [0, 100]."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


def one_request(url, model, prompt, max_tokens, timeout_s):
    """Send one streaming completion; returns a dict of timings or raises."""
    u = urllib.parse.urlsplit(url)
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout_s)
    try:
        t_send = time.perf_counter()
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read(300)!r}")
        t_first = t_last = None
        n_chunks = 0
        usage = None
        finish = None
        while True:
            line = resp.fp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError(f"stream error: {ev['error']}")
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    now = time.perf_counter()
                    if t_first is None:
                        t_first = now
                    t_last = now
                    n_chunks += 1
                if ch.get("finish_reason"):
                    finish = ch["finish_reason"]
        t_end = time.perf_counter()
    finally:
        conn.close()
    if t_first is None:
        raise RuntimeError("no text streamed")
    n_out = int(usage["completion_tokens"]) if usage and "completion_tokens" in usage else n_chunks
    n_prompt = int(usage["prompt_tokens"]) if usage and "prompt_tokens" in usage else None
    itl = (t_last - t_first) / (n_out - 1) if n_out > 1 else None
    return {"ttft": t_first - t_send, "itl": itl, "e2e": t_end - t_send, "n_out": n_out, "n_prompt": n_prompt,
            "n_chunks": n_chunks, "max_tokens": max_tokens, "finish": finish, "t_send": t_send, "t_end": t_end}


def run(url, model, concurrency, n_requests, seed, words, outs, timeout_s):
    reqs = [make_request(seed, concurrency, i, words[0], words[1], outs[0], outs[1]) for i in range(n_requests)]
    results, errors = [], []
    lock = threading.Lock()
    next_index = [0]

    def worker():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= n_requests:
                return
            prompt, max_tokens = reqs[i]
            try:
                r = one_request(url, model, prompt, max_tokens, timeout_s)
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001 - reported, not fatal to the run
                with lock:
                    errors.append(f"request {i}: {e}")

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return results, errors, wall


def summarize(label, concurrency, n_requests, results, errors, wall):
    n_out = sum(r["n_out"] for r in results)
    prompts = [r["n_prompt"] for r in results if r["n_prompt"] is not None]
    itls = [r["itl"] for r in results if r["itl"] is not None]
    short = sum(1 for r in results if r["n_out"] != r["max_tokens"])
    return {
        "server": label, "concurrency": concurrency, "requests": n_requests, "ok": len(results),
        "errors": len(errors), "short": short, "wall_s": wall,
        "prompt_tok_mean": sum(prompts) / len(prompts) if prompts else None,
        "out_tok_mean": n_out / len(results) if results else 0.0,
        "ttft_p50_ms": 1e3 * percentile([r["ttft"] for r in results], 50),
        "ttft_p90_ms": 1e3 * percentile([r["ttft"] for r in results], 90),
        "itl_mean_ms": 1e3 * sum(itls) / len(itls) if itls else float("nan"),
        "e2e_p50_s": percentile([r["e2e"] for r in results], 50),
        "out_tok_s": n_out / wall if wall > 0 else 0.0,
        "req_s": len(results) / wall if wall > 0 else 0.0,
        "first_errors": errors[:3],
    }


HEADER = ("| server | C | requests | prompt tok (mean) | out tok (mean) | TTFT p50 ms | TTFT p90 ms | mean ITL ms "
          "| e2e p50 s | output tok/s | requests/s | wall s | errors / short |\n"
          "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")


def row(s):
    p = f"{s['prompt_tok_mean']:.0f}" if s["prompt_tok_mean"] is not None else "?"
    return (f"| {s['server']} | {s['concurrency']} | {s['ok']}/{s['requests']} | {p} | {s['out_tok_mean']:.0f} "
            f"| {s['ttft_p50_ms']:.0f} | {s['ttft_p90_ms']:.0f} | {s['itl_mean_ms']:.1f} | {s['e2e_p50_s']:.2f} "
            f"| {s['out_tok_s']:.1f} | {s['req_s']:.2f} | {s['wall_s']:.1f} | {s['errors']} / {s['short']} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    ap.add_argument("--concurrency", "-c", type=int, required=True)
    ap.add_argument("--requests", "-n", type=int, default=None, help="default max(2C, 16)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--label", default="server")
    ap.add_argument("--model", default="", help="the request's model field (default: none sent)")
    ap.add_argument("--prompt-words", type=int, nargs=2, default=(40, 320), metavar=("MIN", "MAX"))
    ap.add_argument("--max-tokens", type=int, nargs=2, default=(32, 128), metavar=("MIN", "MAX"))
    ap.add_argument("--warmup", type=int, default=0, help="requests sent (one at a time) before measuring")
    ap.add_argument("--timeout", type=float, default=600.0, help="per-request socket timeout, s")
    ap.add_argument("--json-out", default="", help="append the summary as one JSON line to this file")
    ap.add_argument("--header", action="store_true", help="print the markdown table header first")
    a = ap.parse_args()
    if a.concurrency < 1:
        ap.error("--concurrency must be >= 1")
    n = a.requests if a.requests is not None else max(2 * a.concurrency, 16)
    for i in range(a.warmup):
        prompt, _ = make_request(a.seed + 7919, 0, i, a.prompt_words[0], a.prompt_words[1], 8, 8)
        one_request(a.url, a.model, prompt, 8, a.timeout)
    results, errors, wall = run(a.url, a.model, a.concurrency, n, a.seed, a.prompt_words, a.max_tokens, a.timeout)
    s = summarize(a.label, a.concurrency, n, results, errors, wall)
    if a.header:
        print(HEADER)
    print(row(s), flush=True)
    for e in errors[:3]:
        print(f"load_gen: {e}", file=sys.stderr)
    if a.json_out:
        with open(a.json_out, "a") as f:
            f.write(json.dumps(s) + "\n")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

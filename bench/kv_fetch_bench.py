#!/usr/bin/env python3
"""Fetch vs recompute of a prompt prefix between two tpserve replicas (issue 15, deliverable 3).

Two real `tpserve serve` replicas (tp 1, one thread each, the same config) on this machine. For each prefix length
L and each trial, two fresh prompts of exactly L token ids (salted, so no prompt shares a block with another):
  recompute  B serves the prompt cold                                   (max_tokens 1: time ~ prefill of L tokens)
  fetch      A serves the prompt first (untimed), then B serves it with kv_transfer_params.fetch_from = A
             (time = ask A + UCX transfer of the blocks + prefill of the last partial block)
The two are alternated (recompute first on even trials, fetch first on odd ones) and the per-length medians
compared; B's /metrics give the UCX transfer seconds alone. The crossover is the smallest L where fetch wins.
usage: kv_fetch_bench.py TPSERVE MODEL OUT.md [LENGTHS (comma list)] [TRIALS]
"""
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

TPSERVE, MODEL, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
LENGTHS = [int(x) for x in (sys.argv[4] if len(sys.argv) > 4 else "64,128,256,512,1024,2048").split(",")]
TRIALS = int(sys.argv[5]) if len(sys.argv) > 5 else 3


def start(cfg):
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p = subprocess.Popen([TPSERVE, "serve", "--model", MODEL, "--port", "0", "--threads", "1", "--config", cfg],
                         stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        m = re.search(r"serving .* at (http://[0-9.]+:\d+)", open(log.name).read())
        if m:
            return p, m.group(1), log.name
        time.sleep(0.2)
    raise SystemExit("replica did not start")


def post(url, body):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    return time.perf_counter() - t0, out


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def main():
    cfg = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    cfg.write("model: {chat_template: chatml}\ncache: {memory_mb: 1024}\nserver: {step_timeout_s: 600}\n")
    cfg.close()
    a, url_a, _ = start(cfg.name)
    b, url_b, log_b = start(cfg.name)
    rng = random.Random(1)
    rows, xbytes, xsecs = [], [], []
    try:
        for L in LENGTHS:
            rec, fet, xfer = [], [], []
            for t in range(TRIALS):
                order = ["recompute", "fetch"] if t % 2 == 0 else ["fetch", "recompute"]
                for kind in order:
                    ids = [rng.randrange(1000, 40000) for _ in range(L)]
                    body = {"prompt": ids, "max_tokens": 1, "temperature": 0}
                    if kind == "recompute":
                        s, _ = post(url_b, body)
                        rec.append(s)
                    else:
                        post(url_a, body)
                        x0 = metric(url_b, "tpserve:kv_fetch_seconds_total")
                        f0 = metric(url_b, "tpserve:kv_fetched_blocks_total")
                        b0 = metric(url_b, "tpserve:kv_fetched_bytes_total")
                        s, _ = post(url_b, dict(body, kv_transfer_params={"fetch_from": url_a}))
                        fetched = metric(url_b, "tpserve:kv_fetched_blocks_total") - f0
                        if fetched != (L - 1) // 16:
                            raise SystemExit(f"L={L}: B fetched {fetched} blocks, expected {(L - 1) // 16}")
                        fet.append(s)
                        xfer.append(metric(url_b, "tpserve:kv_fetch_seconds_total") - x0)
                        xbytes.append(metric(url_b, "tpserve:kv_fetched_bytes_total") - b0)
            rows.append((L, statistics.median(rec), statistics.median(fet), statistics.median(xfer)))
            xsecs.extend(xfer)
            print(f"L={L}: recompute {rows[-1][1]*1e3:.1f} ms, fetch {rows[-1][2]*1e3:.1f} ms "
                  f"(UCX {rows[-1][3]*1e3:.2f} ms)", flush=True)
        link = [l for l in open(log_b).read().splitlines() if "UCX loopback" in l]
        bpt_lines = [l for l in open(log_b).read().splitlines() if "B/token" in l]
        metric_bytes_per_token = int(bpt_lines[0].split("KV cache per rank: ")[1].split(" B/token")[0])
        link_bytes_per_s = sum(xbytes) / sum(xsecs)
    finally:
        for p in (a, b):
            p.terminate()
            p.wait(timeout=60)
    crossover = next((L for L, r, f, _ in rows if f < r), None)
    # The model behind the choice (coordinator/kv_fetch_policy.h), from these measurements:
    #   recompute(L) = r0 + L / prefill_rate          (least-squares line through the recompute medians)
    #   fetch(L)     = f0 + L x bytes_per_token / link (link = UCX bytes / UCX seconds, B's metrics)
    # f0 is the fetch's fixed part (the export round trip to A, B's one-block prefill), the mean over lengths of
    # fetch(L) - L x bytes_per_token / link. Fetch beats recompute above L* = (f0 - r0) / (1 / rate - bpt / link).
    def fit(xs, ys):
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        return my - slope * mx, slope
    r0, r_slope = fit([L for L, *_ in rows], [r for _, r, _, _ in rows]) if len(rows) > 1 else (0.0, rows[0][1] / rows[0][0])
    bpt = metric_bytes_per_token
    link_bps = link_bytes_per_s
    f0 = statistics.mean(f - L * bpt / link_bps for L, _, f, _ in rows)
    gain = r_slope - bpt / link_bps
    model = (f0 - r0) / gain if gain > 0 else None
    summary = (f"prefill rate {1 / r_slope:.0f} tokens/s (recompute slope; fixed part r0 {r0 * 1e3:.0f} ms), "
               f"link {link_bps / 1e6:.0f} MB/s (UCX bytes / UCX seconds), {bpt} B/token of KV per rank, "
               f"fetch fixed part f0 {f0 * 1e3:.0f} ms: fetch beats recompute above L* = (f0 - r0) / (1/rate - B/link) = "
               + (f"{max(model, 0):.0f} tokens" if model is not None else "never (the link moves a token slower than prefill computes it)"))
    print("crossover: measured " + (f"{crossover} tokens" if crossover else "none in range") + "; model: " + summary,
          flush=True)
    with open(OUT, "a") as out:
        out.write(f"\nStart-up link measurement (replica B): {link[0].split('KV transfer: ')[-1] if link else 'n/a'}\n\n")
        out.write("| prefix tokens | blocks fetched | recompute (B cold) ms | fetch from A ms | of which UCX ms | fetch / recompute |\n")
        out.write("|---:|---:|---:|---:|---:|---:|\n")
        for L, r, f, x in rows:
            out.write(f"| {L} | {(L - 1) // 16} | {r*1e3:.1f} | {f*1e3:.1f} | {x*1e3:.2f} | {f/r:.3f} |\n")
        out.write(f"\nCrossover (smallest measured length where fetch beats recompute): "
                  f"{crossover if crossover else 'none in the measured range'} tokens. Medians of {TRIALS} trials each, "
                  f"alternating the order. Times are client wall times of a max_tokens=1 completion (TTFT + HTTP).\n")
        out.write(f"\nModel (coordinator/kv_fetch_policy.h's terms, from the figures above): {summary}.\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""KV blocks between two tp 2 replicas (synthetic model, 2 MPI ranks each): rank t of B pulls its head partition
from rank t of A over UCX (issue 15, deliverable 3, the TP path: fetch order broadcast, per-rank pulls, all-reduce).
A serves a 300-token id prompt twice (cold, then a prefix hit); B gets it with fetch_from=A -> B's greedy tokens ==
A's prefix-hit run's, B fetched (300 - 1) // 16 = 18 blocks on each rank and computed only the rest.
usage: kv_transfer_tp2_test.py TPSERVE_BINARY SYNTH_MODEL_DIR
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

TPSERVE, SYNTH = sys.argv[1], sys.argv[2]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def start(cfg):
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    p = subprocess.Popen(["mpirun", "-np", "2", "--oversubscribe", TPSERVE, "serve", "--model", SYNTH, "--tp", "2",
                          "--threads", "1", "--port", "0", "--config", cfg], stdout=log, stderr=subprocess.STDOUT, env=env)
    for _ in range(600):
        m = re.search(r"serving .* at (http://[0-9.]+:\d+)", open(log.name).read())
        if m:
            return p, m.group(1), log.name
        if p.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit("replica did not start:\n" + open(log.name).read()[-3000:])


def post(url, body):
    r = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(r, timeout=300).read())


def metric(url, name):
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    m = re.search(r"^" + re.escape(name) + r"(\{[^}]*\})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(2)) if m else None


def main():
    cfg = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    cfg.write("model: {chat_template: chatml}\ncache: {memory_mb: 64}\nserver: {step_timeout_s: 120}\n")
    cfg.close()
    a, url_a, _ = start(cfg.name)
    b, url_b, log_b = start(cfg.name)
    fails = []
    try:
        ids = [(i * 37 + 11) % 1000 for i in range(300)]
        body = {"prompt": ids, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
        post(url_a, body)
        hit = post(url_a, body)["choices"][0]["text"]
        c0 = metric(url_b, "tpserve:computed_tokens_total")
        got = post(url_b, dict(body, kv_transfer_params={"fetch_from": url_a}))["choices"][0]["text"]
        checks = [
            ("B's greedy tokens == A's prefix-hit run's", got == hit),
            ("B fetched 18 blocks", metric(url_b, "tpserve:kv_fetched_blocks_total") == 18),
            ("no failure", metric(url_b, "tpserve:kv_fetch_failures_total") == 0),
            ("B computed <= 300 - 288 + 12 tokens", metric(url_b, "tpserve:computed_tokens_total") - c0 <= 24),
            ("B logged the fetch of 18 blocks (every rank pulled: the all-reduce agreed)",
             "fetched 18 blocks" in open(log_b).read()),
        ]
        for name, ok in checks:
            print(("ok   " if ok else "FAIL ") + name, flush=True)
            if not ok:
                fails.append(name)
    finally:
        for p in (a, b):
            p.terminate()
        for p in (a, b):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
    print("FAILED: " + ", ".join(fails) if fails else "all checks passed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())

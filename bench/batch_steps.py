#!/usr/bin/env python3
"""Batched decode steps: where a step's time goes at C running sequences, and throughput against the linear
layers' compute roofline. Writes bench/results/batch-steps-<UTC stamp>.md.

For each C (default 16 and 64) against one `tpserve serve` (started here, max_num_seqs >= C):
  1. C client threads each stream one /v1/completions request at once (same short prompt with a per-client
     number so no two share a prefix beyond the template, temperature 0, ignore_eos, max_tokens M);
  2. when every stream has delivered its first token (all C prefilled and decoding), snapshot A of /metrics;
  3. when the first stream reaches M - 4 tokens (all C still running), snapshot B.
Between A and B every engine step is a decode step of C sequences. From B - A:
  step time       = wall / steps                                   [ms]
  parts           = tpserve:step_time_seconds_total{part=...} / steps, and their share of the wall time:
                    linear, attention, communication (all-reduce + all-gather), forward_other (norms, rope,
                    embedding, KV writes, the worker's own tensors built from the plan), sample (leader),
                    schedule (scheduling + StepPlan building + inbox), postprocess (tokens, detokenize, stream)
  decode tok/s    = computed tokens / wall
  server CPU      = the server process's CPU seconds (utime + stime, /proc/PID/stat) / wall: below the thread
                    count when the OS gave the cores to other jobs (a shared machine); tok/CPU-s = computed
                    tokens / server CPU seconds is then the rate an unloaded machine would approach (HTTP threads
                    included, so it errs low)
  linear GFLOP/s  = 2 x linear weights x computed tokens / linear seconds  (achieved inside the linear layers)
  roofline tok/s  = ROOFLINE_GFLOPS x 1e9 x threads / (2 x linear weights)  (compute bound of the linear layers)
  roofline share  = decode tok/s / roofline tok/s
where linear weights = every matrix the forward multiplies per token: q, k, v, o, gate, up, down of each layer
and the lm_head (SmolLM2-135M: 30 x 3,538,944 + 49,152 x 576 = 134,479,872).
ROOFLINE_GFLOPS defaults to 220 per core: oneDNN's BF16 GEMM on these Zen 4 machines once M >= 16
(DESIGN.md §4, measured); --roofline-gflops overrides it.

  bench/batch_steps.py [--tpserve build/launch/tpserve] [--model models/SmolLM2-135M-Instruct.BF16.gguf]
                       [--threads 1] [--concurrency 16,64] [--max-tokens 160] [--roofline-gflops 220]
                       [--out bench/results/batch-steps-STAMP.md]
Standard library only.
"""
import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time

LINEAR_WEIGHTS_SMOLLM2 = 30 * (576 * 576 * 2 + 576 * 192 * 2 + 576 * 1536 * 3) + 49152 * 576
PARTS = ["linear", "attention", "communication", "forward_other", "sample", "schedule", "postprocess"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get(port, path, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, body


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def scrape(port, pid):
    _, body = get(port, "/metrics")
    out = {"time": time.monotonic(), "cpu": cpu_seconds(pid)}
    for line in body.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r'tpserve:step_time_seconds_total\{.*part="(\w+)".*\}\s+(\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
            continue
        for name in ("engine_steps_total", "computed_tokens_total"):
            m = re.match(r"tpserve:" + name + r"(\{.*\})?\s+(\S+)", line)
            if m:
                out[name] = float(m.group(2))
    missing = [k for k in PARTS + ["engine_steps_total", "computed_tokens_total"] if k not in out]
    if missing:
        raise RuntimeError("/metrics lacks " + ", ".join(missing))
    return out


def stream(port, prompt, max_tokens, counts, idx, errors):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                           "stream": True})
        c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("choices") and ev["choices"][0].get("text"):
                counts[idx] += 1
        c.close()
    except Exception as e:  # reported by the main thread
        errors.append(f"client {idx}: {e}")


def measure(port, pid, conc, max_tokens):
    counts = [0] * conc
    errors = []
    threads = []
    for i in range(conc):
        prompt = f"Client {i} asks: write a long story about a lighthouse keeper and the sea, number {i * 7919}."
        t = threading.Thread(target=stream, args=(port, prompt, max_tokens, counts, i, errors), daemon=True)
        t.start()
        threads.append(t)
    deadline = time.monotonic() + 600
    while min(counts) < 1:
        if errors or time.monotonic() > deadline:
            raise RuntimeError("; ".join(errors) or "streams did not start within 600 s")
        time.sleep(0.005)
    a = scrape(port, pid)
    while max(counts) < max_tokens - 4:
        if errors or time.monotonic() > deadline:
            raise RuntimeError("; ".join(errors) or "streams stalled")
        time.sleep(0.005)
    b = scrape(port, pid)
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    d = {k: b[k] - a[k] for k in a}
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpserve", default="build/launch/tpserve")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.BF16.gguf")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--concurrency", default="16,64")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--roofline-gflops", type=float, default=220.0)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    cs = [int(x) for x in args.concurrency.split(",")]
    stamp = time.strftime("%Y%m%d-%H%M", time.gmtime())
    out = args.out or f"bench/results/batch-steps-{stamp}.md"
    port = free_port()
    tmp = tempfile.mkdtemp()
    cfg = os.path.join(tmp, "batch.yaml")
    with open(cfg, "w") as f:
        f.write(f"model:\n  path: {os.path.abspath(args.model)}\n  dtype: bf16\ncache:\n  memory_mb: 1024\n"
                f"  max_context: 2048\nscheduler:\n  max_num_seqs: {max(64, max(cs))}\n"
                f"  max_num_batched_tokens: 2048\n")
    cmd = [args.tpserve, "serve", "--config", cfg, "--threads", str(args.threads), "--port", str(port)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    log = open(os.path.join(tmp, "serve.log"), "w")
    load_start = open("/proc/loadavg").read().split()[:3]
    server = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    rows = []
    try:
        for _ in range(1200):
            if server.poll() is not None:
                raise RuntimeError("tpserve exited: " + open(log.name).read()[-2000:])
            try:
                if get(port, "/v1/models", 2)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        measure(port, server.pid, 2, 8)  # warm-up
        for c in cs:
            d = measure(port, server.pid, c, args.max_tokens)
            rows.append((c, d, open("/proc/loadavg").read().split()[:3]))
            print(f"C={c}: {d}", file=sys.stderr)
    finally:
        server.terminate()
        server.wait(timeout=30)
    load_end = open("/proc/loadavg").read().split()[:3]

    model_name = ""
    flags = ""
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and not model_name:
            model_name = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            have = set(line.split(":", 1)[1].split())
            flags = " ".join(f if f in have else f"(no {f})" for f in
                             ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile"])
    roof_tok = args.roofline_gflops * 1e9 * args.threads / (2 * LINEAR_WEIGHTS_SMOLLM2)
    L = []
    L.append("# Batched decode steps: step-time breakdown and throughput vs the linear layers' compute roofline")
    L.append("")
    L.append(f"- date: {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
    L.append(f"- machine: {model_name}, {os.cpu_count()} cores; load average at start {' '.join(load_start)}, "
             f"at end {' '.join(load_end)} (a shared machine: other helpers build and test on it)")
    L.append(f"- CPU flags: {flags}")
    L.append(f"- command: `bench/batch_steps.py --threads {args.threads} --concurrency {args.concurrency} "
             f"--max-tokens {args.max_tokens} --roofline-gflops {args.roofline_gflops:g}`")
    L.append(f"- server: `{' '.join(cmd).replace(cfg, 'CFG')}`; CFG: model {args.model} (BF16 weights), bf16 KV, "
             f"blocks of 16, max_num_seqs {max(64, max(cs))}, max_num_batched_tokens 2048")
    L.append(f"- window: from the moment all C streams have their first token to the moment the first reaches "
             f"{args.max_tokens - 4} tokens: only decode steps of C sequences (context ~30 to ~{args.max_tokens + 30})")
    L.append(f"- roofline: {args.roofline_gflops:g} GFLOP/s per core x {args.threads} thread(s) / (2 x "
             f"{LINEAR_WEIGHTS_SMOLLM2:,} linear weights) = {roof_tok:.0f} tok/s")
    L.append("")
    L.append("| C | steps | tokens/step | step ms | " + " | ".join(f"{p} ms (%)" for p in PARTS) +
             " | decode tok/s | server CPU | tok/CPU-s | linear GFLOP/s | roofline share (tok/s; tok/CPU-s) | load avg |")
    L.append("|---:|---:|---:|---:|" + "---:|" * len(PARTS) + "---:|---:|---:|---:|---:|---|")
    for c, d, ld in rows:
        steps = d["engine_steps_total"]
        wall = d["time"]
        toks = d["computed_tokens_total"]
        cells = [f"{1e3 * d[p] / steps:.2f} ({100 * d[p] / wall:.1f}%)" for p in PARTS]
        tps = toks / wall
        lin = 2 * LINEAR_WEIGHTS_SMOLLM2 * toks / d["linear"] / 1e9 if d["linear"] > 0 else float("nan")
        L.append(f"| {c} | {steps:.0f} | {toks / steps:.1f} | {1e3 * wall / steps:.2f} | " + " | ".join(cells) +
                 f" | {tps:.1f} | {d['cpu'] / wall:.2f} | {toks / d['cpu']:.1f} | {lin:.1f} | "
                 f"{100 * tps / roof_tok:.0f}%; {100 * toks / d['cpu'] / roof_tok:.0f}% | {' '.join(ld)} |")
    L.append("")
    L.append("Shares are of the window's wall time; the parts sum to less than 100% by the engine thread's time "
             "outside step() (waiting for work, taking HTTP submissions). schedule = the scheduler, block "
             "manager and StepPlan building of each step (Engine::step before the forward).")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()

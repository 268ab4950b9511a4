#!/usr/bin/env python3
"""vLLM's example Grafana dashboard reads tpserve: every panel query returns data.

Starts the real `tpserve serve` (SmolLM2-135M-Instruct, --dtype f32, --threads 1, default server.metrics_prefix)
and a real Prometheus (Debian's `prometheus`, launch/setup installs it) scraping its /metrics every second,
both on 127.0.0.1 with ports chosen free, Prometheus's TSDB in a temporary directory. Sends real completions
over a few scrapes (non-streaming, streaming, chat, n = 2 — several tokens each), then evaluates every panel
target `expr` of tests/e2e/fixtures/vllm_grafana.json (plus the newer dashboard's TPOT panel, see the fixture's
README) through Prometheus's HTTP API (/api/v1/query) with Grafana's variables substituted ($model_name -> the
served name, $__rate_interval -> 1m, ...). Each must return at least one sample whose value is a number (not
NaN): what a Grafana panel draws. Also checks that Prometheus stored the bucket bounds as written (le="0.005",
le="1.0").

Usage: vllm_dashboard_test.py TPSERVE_BIN MODEL_GGUF DASHBOARD_JSON
Prints every query with its result count; exits 1 listing the queries that returned nothing.
Everything is bounded: each wait has a deadline, both processes are killed at the end.
"""
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

TPSERVE, MODEL, DASHBOARD = sys.argv[1:4]
SCRAPE_S = 1

# The "Time Per Output Token (TPOT)" panel (id 17) of the dashboard in vLLM's docs of 2026-09-23, not yet in the
# fixture's commit (tests/e2e/fixtures/README.md).
NEWER_PANEL_EXPRS = [
    f'histogram_quantile({q}, sum by(le) (rate(vllm:request_time_per_output_token_seconds_bucket'
    '{model_name="$model_name"}[$__rate_interval])))' for q in ("0.99", "0.95", "0.9", "0.5")
] + ['rate(vllm:request_time_per_output_token_seconds_sum{model_name="$model_name"}[$__rate_interval])\n/\n'
     'rate(vllm:request_time_per_output_token_seconds_count{model_name="$model_name"}[$__rate_interval])']


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def stream(url, body, timeout=60):
    """POSTs a streaming request; returns the SSE data payloads up to [DONE]."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=timeout) as r:
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: "):
                events.append(line[6:])
                if line == "data: [DONE]":
                    break
    return events


def wait_until(what, fn, timeout_s):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


def stop(proc):
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def dashboard_exprs(path):
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    out = []

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))  # rows hold panels

    for p in panels(d["panels"]):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append((p.get("title", "?"), t["expr"]))
    return out


def substitute(expr, model_name):
    """Grafana's template variables, as a dashboard with model_name chosen would send them."""
    for var, value in (("model_name", model_name), ("__rate_interval", "1m"), ("__interval", "15s"),
                       ("__range", "5m"), ("__range_s", "300"), ("interval", "1m")):
        expr = expr.replace("${" + var + "}", value).replace("[[" + var + "]]", value)
        expr = re.sub(r"\$" + re.escape(var) + r"\b", lambda _m: value, expr)
    return expr


def main():
    prom_bin = shutil.which("prometheus")
    if not prom_bin:
        print("FAIL: no `prometheus` binary on PATH (launch/setup installs Debian's prometheus package)")
        return 1
    tmp = tempfile.mkdtemp(prefix="tpserve_dash_")
    server = prom = None
    lines = []
    try:
        server = subprocess.Popen([TPSERVE, "serve", "--model", MODEL, "--port", "0", "--threads", "1",
                                   "--dtype", "f32"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  errors="replace")
        got = {}
        ready = threading.Event()

        def drain():
            for line in server.stdout:
                lines.append(line.rstrip("\n"))
                m = re.search(r"tpserve serving (\S+) at (http://[\d.]+:(\d+))", line)
                if m and not ready.is_set():
                    got.update(name=m.group(1), url=m.group(2), port=m.group(3))
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(120) or "url" not in got:
            print("FAIL: tpserve did not start:\n" + "\n".join(lines[-30:]))
            return 1
        url, name = got["url"], got["name"]
        print(f"tpserve serving {name} at {url}", flush=True)

        prom_port = free_port()
        with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
            f.write(f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
                    f"scrape_configs:\n  - job_name: tpserve\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{got['port']}']\n")
        prom_log = open(os.path.join(tmp, "prometheus.log"), "w")
        prom = subprocess.Popen([prom_bin, f"--config.file={tmp}/prometheus.yml",
                                 f"--storage.tsdb.path={tmp}/data", f"--web.listen-address=127.0.0.1:{prom_port}"],
                                stdout=prom_log, stderr=subprocess.STDOUT)
        prom_url = f"http://127.0.0.1:{prom_port}"

        def query(expr):
            r = json.loads(http(prom_url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10))
            if r.get("status") != "success":
                raise RuntimeError(f"{expr}: {r}")
            return r["data"]["result"]

        def target_up():
            return any(s["value"][1] == "1" for s in query('up{job="tpserve"}'))

        wait_until("Prometheus to scrape tpserve", target_up, 60)

        # Traffic over several scrapes: every counter and histogram moves between samples.
        for i in range(4):
            c = json.loads(http(url + "/v1/completions", {"model": name, "prompt": f"Count to ten: {i},",
                                                          "max_tokens": 12, "temperature": 0}))
            assert c["usage"]["completion_tokens"] >= 2, c
            ev = stream(url + "/v1/completions", {"model": name, "prompt": "The capital of France is",
                                                  "max_tokens": 8, "stream": True})
            assert ev and ev[-1] == "[DONE]" and len(ev) >= 3, ev
            c = json.loads(http(url + "/v1/chat/completions", {"model": name, "max_tokens": 6, "messages": [
                {"role": "user", "content": "Name a color."}]}))
            assert c["choices"][0]["message"]["content"], c
            c = json.loads(http(url + "/v1/completions", {"model": name, "prompt": "Once upon a time", "n": 2,
                                                          "max_tokens": 5, "temperature": 0.8}))
            assert len(c["choices"]) == 2, c
            time.sleep(1.5 * SCRAPE_S)

        # Until Prometheus holds a scrape taken after the last request (its counters at their final values).
        final = float(re.search(r'\nvllm:generation_tokens_total\{[^}]*\} (\S+)', "\n" + http(url + "/metrics"))
                      .group(1))
        wait_until("a scrape after the traffic",
                   lambda: any(float(s["value"][1]) >= final for s in query("vllm:generation_tokens_total")), 30)

        exprs = dashboard_exprs(DASHBOARD)
        if len(exprs) < 20:
            print(f"FAIL: only {len(exprs)} panel queries in {DASHBOARD}")
            return 1
        exprs += [("Time Per Output Token (TPOT) [newer dashboard]", e) for e in NEWER_PANEL_EXPRS]
        empty = []
        for title, raw in exprs:
            q = substitute(raw, name)
            result = query(q)
            values = [float(s["value"][1]) for s in result]
            ok = any(not math.isnan(v) for v in values)
            shown = " ".join(q.split())
            print(f"[{' OK ' if ok else 'FAIL'}] {title}: {shown} -> {len(result)} series {values[:4]}", flush=True)
            if not ok:
                empty.append(f"{title}: {shown} -> {result}")

        for le in ("0.005", "1.0", "+Inf"):  # bucket bounds as written, as Prometheus stored them
            r = query(f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="{name}"}}')
            print(f"[{' OK ' if r else 'FAIL'}] le=\"{le}\" -> {len(r)} series", flush=True)
            if not r:
                empty.append(f'vllm:time_to_first_token_seconds_bucket{{le="{le}"}} -> nothing')

        print(f"{len(exprs) + 3 - len(empty)} passed, {len(empty)} failed")
        if empty:
            print("Queries that returned no data:\n  " + "\n  ".join(empty))
            return 1
        return 0
    finally:
        stop(prom)
        stop(server)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - one readable line, non-zero exit
        print(f"FAIL: {type(e).__name__}: {e}")
        sys.exit(1)

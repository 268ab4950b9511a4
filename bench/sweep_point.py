"""One sweep server shape and the load runs against it (bench/sweep).

Servers: `dp` independent `tpserve serve` jobs of `tp` ranks each, started with launch/start (mpirun); with
hosts > 0 the emulated hosts come from launch/hosts (namespaces PREFIX1..N, own subnet) and each replica's
ranks spread over them (replica r's hostfile starts at host r mod N, whose address the server listens on).
Load: bench/load_gen.py's requests (its make_request / one_request), closed loop at C clients; request i goes to
replica i mod dp (round robin, as `tpserve simulate --dp` routes).

Metrics of one run (client wall clock, as load_gen):
  TTFT, ITL (per request: (last text - first text) / (n_out - 1)), e2e; percentiles nearest-rank over requests
  (ITL: over the per-request means);  out_tok_s = sum(n_out) / wall;  req_s = ok / wall.
  allreduce_share = delta(step_time_seconds_total{part="communication"}) / delta(sum over every part), summed
  over replicas, over the run (from /metrics before and after).
  kv_usage_mean / kv_usage_peak: vllm:kv_cache_usage_perc (0..1) polled every 0.25 s during the run, mean over
  the samples and replicas / max.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_gen  # noqa: E402

HOSTS_PREFIX = os.environ.get("TP_SWEEP_HOSTS_PREFIX", "tpsw")
HOSTS_NET = os.environ.get("TP_SWEEP_HOSTS_NET", "10.83.0")


class PointError(RuntimeError):
    """A point that could not run (server did not start, hosts could not be made): the message says which."""


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def _get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def scrape(url):
    """(step time by part {part: s}, kv usage 0..1) from one server's /metrics."""
    text = _get(url + "/metrics")
    parts, kv = {}, None
    for line in text.splitlines():
        m = re.match(r'^tpserve:step_time_seconds_total\{[^}]*part="([a-z_]+)"[^}]*\}\s+(\S+)', line)
        if m:
            parts[m.group(1)] = float(m.group(2))
            continue
        m = re.match(r"^[a-z]+:kv_cache_usage_perc(\{[^}]*\})?\s+(\S+)", line)
        if m and kv is None:
            kv = float(m.group(2))
    return parts, kv


class Servers:
    """dp replicas of one shape; a context manager that stops every process it started and removes its hosts."""

    def __init__(self, root, settings, shape, workdir, log):
        self.root, self.s, self.shape, self.dir, self.log = root, settings, shape, workdir, log
        self.procs, self.urls, self.hosts_up = [], [], False

    def _hosts(self, *args):
        env = dict(os.environ, TP_HOSTS_PREFIX=HOSTS_PREFIX, TP_HOSTS_NET=HOSTS_NET)
        r = subprocess.run([os.path.join(self.root, "launch/hosts"), *args], env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise PointError(f"launch/hosts {' '.join(args)} failed: {r.stderr.strip()[-400:]}")
        return r.stdout

    def __enter__(self):
        tp, dp, hosts, bw, kv = self.shape
        os.makedirs(self.dir, exist_ok=True)
        if hosts > 0:
            self._hosts("down")
            self._hosts("up", str(hosts), "--bandwidth", bw)
            self.hosts_up = True
        model = self.s["model"] if os.path.isabs(self.s["model"]) else os.path.join(self.root, self.s["model"])
        try:
            for r in range(dp):
                self._start(r, tp, hosts, kv, model)
            for r, (p, url) in enumerate(zip(self.procs, self.urls)):
                self._wait_ready(r, p, url)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self, r, tp, hosts, kv, model):
        cfg = os.path.join(self.dir, f"serve{r}.yaml")
        with open(cfg, "w") as f:
            f.write(f"""model:
  path: {model}
  dtype: {self.s['dtype']}
  quantized: {self.s['quantized']}
parallel:
  tp: {tp}
  threads: {self.s['threads']}
cache:
  memory_mb: {self.s['cache_memory_mb']}
  dtype: {kv}
  max_context: {self.s['max_context']}
scheduler:
  max_num_seqs: {self.s['max_num_seqs']}
  max_num_batched_tokens: {self.s['max_num_batched_tokens']}
""")
        cmd = [os.path.join(self.root, "launch/start")]
        host = "127.0.0.1"
        if hosts > 0:
            first = r % hosts
            hf = os.path.join(self.dir, f"hostfile{r}")
            slots = -(-tp // hosts)
            with open(hf, "w") as f:
                for i in range(hosts):
                    f.write(f"{HOSTS_PREFIX}{(first + i) % hosts + 1} slots={slots}\n")
            cmd += ["--hostfile", hf]
            host = f"{HOSTS_NET}.{first + 1}"
        port = free_port()
        cmd += ["serve", "--config", cfg, "--tp", str(tp), "--host", host, "--port", str(port)]
        logf = open(os.path.join(self.dir, f"serve{r}.log"), "w")
        self.log(f"  start replica {r}: {' '.join(cmd)}")
        self.procs.append(subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
                                           cwd=self.root))
        self.urls.append(f"http://{host}:{port}")

    def _wait_ready(self, r, p, url, timeout_s=300):
        t0 = time.time()
        while time.time() - t0 < timeout_s:
            if p.poll() is not None:
                tail = open(os.path.join(self.dir, f"serve{r}.log")).read()[-1500:]
                raise PointError(f"replica {r} exited with status {p.returncode} before serving:\n{tail}")
            try:
                if "data" in _get(url + "/v1/models", timeout=2):
                    return
            except OSError:
                pass
            time.sleep(0.3)
        raise PointError(f"replica {r} did not answer {url}/v1/models within {timeout_s} s")

    def __exit__(self, *exc):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # launch/start forwards it to rank 0, which drains and stops the rest
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []
        if self.hosts_up:
            try:
                self._hosts("down")
            except PointError as e:
                self.log(f"  warning: {e}")
            self.hosts_up = False
        return False


def _percentile(values, q):
    return load_gen.percentile(values, q) if values else float("nan")


def run_load(urls, point, n_requests, seed, timeout_s=600.0):
    """Runs one closed-loop load against the replicas; returns (summary dict, per-request list)."""
    c = point["concurrency"]
    # The seed differs per point (not only per C), so no two points share a prompt prefix.
    pseed = seed * 1_000_003 + (hash_key(point) % 1_000_003)
    reqs = [load_gen.make_request(pseed, c, i, point["prompt_min"], point["prompt_max"], point["out_min"],
                                  point["out_max"]) for i in range(n_requests)]
    results, errors = [None] * n_requests, []
    lock = threading.Lock()
    nxt = [0]

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= n_requests:
                return
            prompt, max_tokens = reqs[i]
            try:
                results[i] = load_gen.one_request(urls[i % len(urls)], "", prompt, max_tokens, timeout_s)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(f"request {i}: {e}")

    before = [scrape(u)[0] for u in urls]
    kv_samples, stop = [], threading.Event()

    def poll_kv():
        while not stop.is_set():
            for u in urls:
                try:
                    kv = scrape(u)[1]
                    if kv is not None:
                        kv_samples.append(kv)
                except OSError:
                    pass
            stop.wait(0.25)

    poller = threading.Thread(target=poll_kv, daemon=True)
    poller.start()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(c)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    stop.set()
    poller.join()
    after = [scrape(u)[0] for u in urls]
    comm = total = 0.0
    for b, a in zip(before, after):
        for part, v in a.items():
            d = v - b.get(part, 0.0)
            total += d
            if part == "communication":
                comm += d
    ok = [r for r in results if r is not None]
    itls = [r["itl"] for r in ok if r["itl"] is not None]
    ttfts = [r["ttft"] for r in ok]
    prompts = [r["n_prompt"] for r in ok if r["n_prompt"] is not None]
    n_out = sum(r["n_out"] for r in ok)
    summary = {
        "requests": n_requests, "ok": len(ok), "errors": len(errors), "first_error": errors[0] if errors else "",
        "prompt_tok_mean": sum(prompts) / len(prompts) if prompts else float("nan"),
        "out_tok_mean": n_out / len(ok) if ok else float("nan"),
        "ttft_p50_ms": 1e3 * _percentile(ttfts, 50), "ttft_p90_ms": 1e3 * _percentile(ttfts, 90),
        "ttft_p99_ms": 1e3 * _percentile(ttfts, 99),
        "itl_p50_ms": 1e3 * _percentile(itls, 50), "itl_p90_ms": 1e3 * _percentile(itls, 90),
        "itl_p99_ms": 1e3 * _percentile(itls, 99),
        "itl_mean_ms": 1e3 * sum(itls) / len(itls) if itls else float("nan"),
        "e2e_p50_s": _percentile([r["e2e"] for r in ok], 50),
        "out_tok_s": n_out / wall if wall > 0 else 0.0, "req_s": len(ok) / wall if wall > 0 else 0.0,
        "wall_s": wall, "allreduce_share": comm / total if total > 0 else 0.0,
        "step_time_s": total,
        "kv_usage_mean": sum(kv_samples) / len(kv_samples) if kv_samples else float("nan"),
        "kv_usage_peak": max(kv_samples) if kv_samples else float("nan"),
    }
    per_request = [{"index": i, "prompt_len": r["n_prompt"], "output_len": r["n_out"], "ttft_s": r["ttft"],
                    "itl_s": r["itl"], "e2e_s": r["e2e"]} for i, r in enumerate(results) if r is not None]
    return summary, per_request


def hash_key(point):
    import hashlib
    from sweep_grid import point_key
    return int.from_bytes(hashlib.sha256(point_key(point).encode()).digest()[:6], "little")


def warmup(urls):
    """One short request per replica (first-use costs out of the first point)."""
    for u in urls:
        prompt, _ = load_gen.make_request(7919, 0, 0, 20, 20, 4, 4)
        load_gen.one_request(u, "", prompt, 4, 120.0)


def write_requests(path, per_request):
    with open(path, "w") as f:
        for r in per_request:
            f.write(json.dumps(r) + "\n")

#!/usr/bin/env python3
"""The router -> KV fetch path in one run (issue 15, deliverables 2 + 3): `tpserve router --kv-fetch` in front of
two real SmolLM2 replicas (tp 1, one thread each, KV events over ZeroMQ, KV blocks over UCX).
  1. A long prompt P goes through the router to replica A (a tie goes to the first), then again: a prefix hit on A
     (the reference text). The router's index learns A's blocks from its KV events.
  2. A is loaded: a long request sharing P's prefix (routed to A, its holder) keeps it busy, so for P the stated
     cost (coordinator/router_policy.h: in-flight tokens + prompt - block_size x overlap + the prefix B would cache a
     second time) favours B: ~1000 tokens in flight on A vs ~2 x 300 for B.
  3. P again: the router sends it to B with kv_transfer_params.fetch_from = A; B fetches P's blocks from A over
     UCX and answers with A's greedy text. Asserted through /metrics: B ran one fetch of the prompt's whole blocks
     (but the last token's) with no failure and computed at most the rest; A exported once and released its pin;
     the router counted one fetch hint and routed P to B.
usage: router_kv_fetch_test.py TPSERVE_BINARY REPO_ROOT"""
import http.client, json, os, re, subprocess, sys, tempfile, threading, time

import server_procs  # tests/e2e/server_procs.py, beside this script

TPSERVE, ROOT = sys.argv[1], sys.argv[2]
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
MAX_TOKENS = 8
tmp = tempfile.mkdtemp(prefix="router_kv_fetch_")
cfg = os.path.join(tmp, "cfg.yaml")
with open(cfg, "w") as f:
    f.write(f"model: {{path: {MODEL}}}\nparallel: {{threads: 1}}\ncache: {{memory_mb: 64, max_context: 2048}}\n"
            "server: {step_timeout_s: 120, shutdown_deadline_s: 20}\nkv_events: {enable: true}\n"
            "router: {policy: prefix_aware, kv_fetch: true, health_interval_s: 0.5}\n")
procs, failures = [], []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else " " + str(detail)[:1500]), flush=True)
    if not ok:
        failures.append(name)


def start(args, log_name, marker):
    """Starts a tpserve process, waits for its 'marker ... http://host:port' stdout line; returns (proc, port)."""
    return server_procs.start([TPSERVE] + args, os.path.join(tmp, log_name), marker, procs)


def call(port, method, path, body=None, timeout=300):
    return server_procs.call(port, method, path, body, timeout)


def metrics(port):
    out = {}
    for line in call(port, "GET", "/metrics")[1].splitlines():
        m = re.match(r"^(([a-zA-Z_:]+)(\{[^}]*\})?) ([0-9.eE+-]+)$", line)
        if m:  # by the name with its labels, and by the bare name (its first series)
            out[m.group(1)] = float(m.group(4))
            out.setdefault(m.group(2), float(m.group(4)))
    return out


def long_prompt(topic, n_sentences):
    parts = [f"Note {i} about {topic}: the value of item {i * 7 % 101} is {i * 13 % 97}, and it follows item {i}."
             for i in range(n_sentences)]
    return " ".join(parts) + f" To summarise the notes about {topic},"


try:
    (ra, pa), (rb, pb) = [start(["serve", "--config", cfg, "--port", "0"], f"replica-{k}.log", "serving")
                          for k in "ab"]
    url = {pa: f"http://127.0.0.1:{pa}", pb: f"http://127.0.0.1:{pb}"}
    router, rp = start(["router", "--config", cfg, "--port", "0", "--replicas", f"{url[pa]},{url[pb]}"],
                       "router.log", "router at")
    time.sleep(0.3)  # the KV-event subscribers connect

    P = long_prompt("rivers", 12)
    body = {"prompt": P, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}
    s, d, h = call(rp, "POST", "/v1/completions", body)
    check("1. P through the router: 200 on A (the first replica)", s == 200 and h.get("X-Tpserve-Replica") == url[pa],
          (s, h.get("X-Tpserve-Replica"), d[:300]))
    n_prompt = json.loads(d)["usage"]["prompt_tokens"]
    fetchable = (n_prompt - 1) // 16
    deadline = time.time() + 10
    while time.time() < deadline:  # A's KV events reach the router
        reps = json.loads(call(rp, "GET", "/router/replicas")[1])["replicas"]
        if [r for r in reps if r["url"] == url[pa]][0]["prefix_blocks"] >= fetchable:
            break
        time.sleep(0.05)
    s, d, h = call(rp, "POST", "/v1/completions", body)
    ref = json.loads(d)["choices"][0]["text"] if s == 200 else None
    check(f"1. P again goes back to A, its holder ({n_prompt} tokens, {fetchable} whole blocks before the last token)",
          s == 200 and h.get("X-Tpserve-Replica") == url[pa] and fetchable >= 16, (s, h.get("X-Tpserve-Replica")))

    # 2. load A: a long request on P's prefix (its holder is the cheapest place for it)
    load_done = {}

    def load():
        load_done["r"] = call(rp, "POST", "/v1/completions",
                              {"prompt": P + " and then", "max_tokens": 1000, "temperature": 0, "ignore_eos": True})

    t = threading.Thread(target=load)
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline:
        reps = {r["url"]: r for r in json.loads(call(rp, "GET", "/router/replicas")[1])["replicas"]}
        if reps[url[pa]]["in_flight"] >= 1:
            break
        time.sleep(0.02)
    check("2. the load request runs on A", reps[url[pa]]["in_flight"] == 1 and reps[url[pb]]["in_flight"] == 0, reps)

    # 3. P once more: to B, which fetches A's blocks
    ma0, mb0, mr0 = metrics(pa), metrics(pb), metrics(rp)
    s, d, h = call(rp, "POST", "/v1/completions", body)
    ma1, mb1, mr1 = metrics(pa), metrics(pb), metrics(rp)
    da = {k: v - ma0.get(k, 0) for k, v in ma1.items()}
    db = {k: v - mb0.get(k, 0) for k, v in mb1.items()}
    dr = {k: v - mr0.get(k, 0) for k, v in mr1.items()}
    text = json.loads(d)["choices"][0]["text"] if s == 200 else None
    check("3. P with A loaded goes to B", s == 200 and h.get("X-Tpserve-Replica") == url[pb],
          (s, h.get("X-Tpserve-Replica"), d[:300]))
    check("3. B's greedy text == A's prefix-hit run's", text == ref, (ref, text))
    check("3. the router told B to fetch (one kv_fetch hint, routed to B)",
          dr.get("tpserve_router_kv_fetch_hints_total") == 1 and
          dr.get(f'tpserve_router_routed_total{{replica="{url[pb]}"}}') == 1,
          {k: v for k, v in dr.items() if v})
    check(f"3. B fetched {fetchable} blocks over UCX in one fetch, no failure, no recompute",
          db.get("tpserve:kv_fetches_total") == 1 and db.get("tpserve:kv_fetched_blocks_total") == fetchable and
          db.get("tpserve:kv_fetch_failures_total") == 0 and db.get("tpserve:kv_fetch_recompute_total") == 0,
          {k: v for k, v in db.items() if "kv_" in k})
    computed = db.get("tpserve:computed_tokens_total")
    bound = n_prompt - fetchable * 16 + MAX_TOKENS
    check(f"3. B computed {computed} tokens <= {bound}: the fetched blocks were not recomputed",
          computed is not None and computed <= bound, db)
    ok = False
    for _ in range(50):
        ma = metrics(pa)
        if ma.get("tpserve:kv_exports_total", 0) - ma0.get("tpserve:kv_exports_total", 0) == 1 and \
                ma.get("tpserve:kv_pinned_exports") == 0:
            ok = True
            break
        time.sleep(0.1)
    check("3. A exported once and its pin was released", ok, {k: v for k, v in ma.items() if "kv_" in k})
    t.join(600)
    check("2. the load request completes", load_done.get("r", (0,))[0] == 200, load_done)
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()

print(f"router_kv_fetch_test: {len(failures)} failed", flush=True)
if failures:
    for name in os.listdir(tmp):
        if name.endswith(".log"):
            print(f"--- {name}\n" + open(os.path.join(tmp, name)).read()[-3000:])
sys.exit(1 if failures else 0)

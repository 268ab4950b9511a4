#!/usr/bin/env python3
"""Multi-turn chat through `tpserve router` over 2 replicas (tp 1, 1 thread each), one policy at a time (issue 15,
deliverable 6). Workload: USERS users, each on one of SYSTEMS shared system prompts (long: a prefix several users
share), TURNS turns each; every turn pastes USER_WORDS words of the user's own notes and re-sends the whole
conversation so far (the history grows turn by turn, so which replica holds it matters more each turn), THINK
seconds between a user's turns, MAX_TOKENS greedy tokens a turn, streamed (TTFT measured at the first content
chunk). Users start spread over [0, 2 x THINK]. Each policy runs on fresh replicas (empty prefix caches) and a
fresh router. Rounds alternate the policy order.
Arrivals: closed loop by default (a user's next turn THINK seconds after the previous answer, so a slow policy
also gets fewer requests: its TTFT and its throughput move together). --arrival-rate R > 0 makes it open loop:
the USERS x TURNS requests arrive as a Poisson process of R requests/s (seeded; each arrival is the next turn of a
user drawn without replacement from TURNS copies of every user), whatever the policy; a turn whose user is still reading the previous answer is sent when that
answer ends (a user cannot ask before reading it), and its TTFT counts from its scheduled arrival, so a backlog
shows as latency instead of as fewer requests.
Policies: round_robin, least_load, prefix_aware, and prefix_aware+fetch (prefix_aware with router.kv_fetch: a
request the cost sends away from a loaded holder carries kv_transfer_params.fetch_from, and the receiving replica
fetches the blocks over UCX instead of recomputing them).
Per policy: TTFT p50/p99 (s), output tok/s (generated tokens / wall time of the whole workload), the router's prefix
hit rate (prompt blocks the chosen replica held / prompt blocks), the replicas' own prefix-cache hit rate and
recomputed prompt tokens (vllm:prefix_cache_queries_total - vllm:prefix_cache_hits_total, summed), and the KV
fetches the replicas ran (tpserve:kv_fetches_total, tpserve:kv_fetched_blocks_total, summed).
KV pressure: --kv-mb sets each replica's cache.memory_mb (run_router_bench.sh says why 109); the results give the
KV pool in tokens and the conversations' distinct tokens at the end (via the replicas' /tokenize). TTFT's parts on
the replicas: mean queue time (scheduled - arrival) and prefill time (first token - scheduled), and preemptions.
usage: router_bench.py TPSERVE REPO_ROOT [--users 16] [--turns 5] [--systems 4] [--user-words 60] [--max-tokens 16]
                       [--think 0.5] [--kv-mb 109] [--max-batched-tokens 256] [--rounds 1] [--arrival-rate 0]
                       [--policies prefix_aware,prefix_aware+fetch,least_load,round_robin] [--json OUT]"""
import argparse, http.client, json, os, random, statistics, subprocess, sys, tempfile, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("tpserve"); ap.add_argument("root")
ap.add_argument("--users", type=int, default=16); ap.add_argument("--turns", type=int, default=5)
ap.add_argument("--systems", type=int, default=4); ap.add_argument("--max-tokens", type=int, default=16)
ap.add_argument("--user-words", type=int, default=60)
ap.add_argument("--think", type=float, default=0.5); ap.add_argument("--rounds", type=int, default=1)
ap.add_argument("--kv-mb", type=int, default=109, help="cache.memory_mb of each replica (its KV pool)")
ap.add_argument("--max-batched-tokens", type=int, default=256, help="scheduler.max_num_batched_tokens (0: default)")
ap.add_argument("--policies", default="prefix_aware,prefix_aware+fetch,least_load,round_robin")
ap.add_argument("--arrival-rate", type=float, default=0,
                help="requests/s of an open-loop Poisson arrival process (0: closed loop with --think)")
ap.add_argument("--json")
ap.add_argument("--trace", help="folder: per-request lines (POLICY-ROUND.requests.jsonl: user, turn, send time, TTFT, "
                "prompt tokens) and the router's and replicas' stderr (POLICY-ROUND.router.log, .replica-N.log)")
a = ap.parse_args()
if a.trace:
    os.makedirs(a.trace, exist_ok=True)
MODEL = os.path.join(os.path.abspath(a.root), "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
tmp = tempfile.mkdtemp(prefix="router_bench_")
cfg = os.path.join(tmp, "cfg.yaml")
with open(cfg, "w") as f:
    f.write(f"model: {{path: {MODEL}}}\nparallel: {{threads: 1}}\ncache: {{memory_mb: {a.kv_mb}, max_context: 4096}}\n"
            "server: {step_timeout_s: 120}\nkv_events: {enable: true}\n"
            "router: {health_interval_s: 0.5}\n" +
            (f"scheduler: {{max_num_batched_tokens: {a.max_batched_tokens}}}\n" if a.max_batched_tokens else ""))
TOPICS = ["astronomy", "cooking", "sailing", "gardening", "chess", "history", "music", "geology"]
SYSTEMS = [(f"You are assistant number {s}, an expert in {TOPICS[s % len(TOPICS)]}. " +
            "Always answer in two short sentences, stay polite, never use lists, and mention one fact. " * 12)
           for s in range(a.systems)]
WORDS = ("river stone lantern orchard copper meadow harbor violet engine thunder pepper saddle quartz willow "
         "beacon canyon ember falcon glacier hollow ivory juniper kettle lagoon marble nectar oyster prism").split()


def notes(u, t):
    """USER_WORDS words of user u's own notes for turn t (distinct per user and turn: history nobody else has)."""
    rng = random.Random(u * 1000 + t)
    return " ".join(rng.choice(WORDS) for _ in range(a.user_words))


def start(args, marker, log=None):
    err = open(log, "w") if log else subprocess.DEVNULL
    p = subprocess.Popen([a.tpserve] + args, stdout=subprocess.PIPE, stderr=err, text=True)
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"{args[0]} did not start")
        if marker in line and "http://" in line:
            threading.Thread(target=p.stdout.read, daemon=True).start()
            return p, int(line.split("http://")[1].split(":")[1].split()[0].rstrip("/"))


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("GET", path)
    return c.getresponse().read().decode()


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.read().decode()
    if r.status != 200:
        raise SystemExit(f"POST {path}: HTTP {r.status}: {out[:300]}")
    return json.loads(out)


def n_tokens(port, messages):
    """Tokens of a conversation as the replica's chat template renders it (no generation prompt)."""
    return post(port, "/tokenize", {"messages": messages, "add_generation_prompt": False})["count"]


def metric(text, name):
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(name + "{") or l.startswith(name + " "))


def turn(port, messages):
    """(TTFT s, text, content chunks, prompt tokens: from the usage chunk with --trace, else None)"""
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    body = {"messages": messages, "max_tokens": a.max_tokens, "temperature": 0, "stream": True}
    if a.trace:
        body["stream_options"] = {"include_usage": True}
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    ttft, text, n, prompt = None, "", 0, None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line[6:] == "[DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("usage"):
            prompt = j["usage"].get("prompt_tokens")
        for ch in j.get("choices", []):
            piece = ch.get("delta", {}).get("content", "")
            if piece:
                ttft = ttft or time.time() - t0
                text += piece
                n += 1
    return ttft if ttft is not None else time.time() - t0, text, n, prompt


def run_policy(policy, seed, rnd):
    tr = os.path.join(a.trace, f"{policy}-{rnd}") if a.trace else None
    reps = [start(["serve", "--config", cfg, "--port", "0"], "serving", tr and f"{tr}.replica-{i}.log")
            for i in range(2)]
    urls = ",".join(f"http://127.0.0.1:{p}" for _, p in reps)
    fetch = policy.endswith("+fetch")
    router, rp = start(["router", "--config", cfg, "--port", "0", "--policy", policy.removesuffix("+fetch"),
                        "--replicas", urls] + (["--kv-fetch"] if fetch else []), "router at", tr and f"{tr}.router.log")
    time.sleep(0.5)
    ttfts, n_out, convs = [], [0], {}
    lock = threading.Lock()
    rng = random.Random(seed)
    delays = [rng.uniform(0, a.think * 2) for _ in range(a.users)]
    # Open loop: arrivals[u][t], seconds after t0. The k-th arrival goes to a user drawn without replacement from
    # TURNS copies of every user (seeded): a fixed interleaving (user k % USERS) would send each user to one replica
    # under round_robin (its cursor moves once per request), making round_robin sticky by accident.
    order = [u for u in range(a.users) for _ in range(a.turns)]
    rng.shuffle(order)
    arrivals, clock = [[] for _ in range(a.users)], 0.0
    for u in order:
        clock += rng.expovariate(a.arrival_rate) if a.arrival_rate > 0 else 0
        arrivals[u].append(clock)
    lateness, gens, trace = [], {}, []

    def user(u):
        if a.arrival_rate <= 0:
            time.sleep(delays[u])
        msgs = [{"role": "system", "content": SYSTEMS[u % a.systems]}]
        for t in range(a.turns):
            msgs.append({"role": "user", "content": f"User {u}, question {t}: my notes are: {notes(u, t)}. "
                                                    f"What do they say about {TOPICS[(u + t) % 8]}?"})
            late = 0.0
            if a.arrival_rate > 0:
                wait = t0 + arrivals[u][t] - time.time()
                if wait > 0:
                    time.sleep(wait)
                late = max(0.0, -wait)
            sent = time.time()
            ttft, text, n, prompt = turn(rp, msgs)
            msgs.append({"role": "assistant", "content": text})
            gens.setdefault(u, []).append(n)
            with lock:
                trace.append({"user": u, "turn": t, "sent_s": round(sent - t0, 3), "late_s": round(late, 3),
                              "ttft_s": round(ttft, 3), "prompt_tokens": prompt, "output_chunks": n})
                ttfts.append(ttft + late)
                lateness.append(late)
                n_out[0] += n
            if a.arrival_rate <= 0:
                time.sleep(a.think)
        with lock:
            convs[u] = msgs

    t0 = time.time()
    ts = [threading.Thread(target=user, args=(u,)) for u in range(a.users)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    wall = time.time() - t0
    rm = get(rp, "/metrics")
    routed = [r["routed"] for r in json.loads(get(rp, "/router/replicas"))["replicas"]]
    q = h = fetches = fetched = 0.0
    busy = []  # per replica: engine step seconds (all parts), computed tokens, steps
    sums = {k: 0.0 for k in ("queue_s", "queue_n", "prefill_s", "prefill_n", "ttft_s", "ttft_n", "preempt",
                                 "held_evicted")}
    for _, p in reps:
        m = get(p, "/metrics")
        q += metric(m, "vllm:prefix_cache_queries_total")
        h += metric(m, "vllm:prefix_cache_hits_total")
        fetches += metric(m, "tpserve:kv_fetches_total")
        fetched += metric(m, "tpserve:kv_fetched_blocks_total")
        for k, name in (("queue", "vllm:request_queue_time_seconds"), ("prefill", "vllm:request_prefill_time_seconds"),
                        ("ttft", "vllm:time_to_first_token_seconds")):
            sums[k + "_s"] += metric(m, name + "_sum")
            sums[k + "_n"] += metric(m, name + "_count")
        sums["preempt"] += metric(m, "vllm:num_preemptions_total")
        sums["held_evicted"] += metric(m, "tpserve:kv_held_blocks_evicted_total")
        busy.append([round(metric(m, "tpserve:step_time_seconds_total"), 2), metric(m, "tpserve:computed_tokens_total"),
                     metric(m, "tpserve:engine_steps_total")])
    kv_tokens = metric(get(reps[0][1], "/metrics"), "tpserve:kv_cache_blocks_total") * 16
    # Every user's whole conversation at the end, as tokens; the shared system prompts counted once.
    sys_tok = [n_tokens(reps[0][1], [{"role": "system", "content": SYSTEMS[s]}]) for s in range(a.systems)]
    histories = sum(n_tokens(reps[0][1], convs[u]) - sys_tok[u % a.systems] for u in convs) + sum(
        sys_tok[s] for s in range(min(a.systems, a.users)))
    # The least prefill this workload needs (one cache that never evicts, each system prompt computed once): a
    # turn recomputes its prompt less the whole blocks of the previous turn's prompt + output (all but the last
    # output token are computed), never its last token; a first turn reuses its system prompt if another user ran it.
    ideal, seen = 0, set()
    for u in convs:
        prev = None
        for t in range(a.turns):
            upto = convs[u][:2 + 2 * t]  # system, then user/assistant pairs, ending with turn t's user message
            n = post(reps[0][1], "/tokenize", {"messages": upto, "add_generation_prompt": True})["count"]
            if prev is None:
                cached = sys_tok[u % a.systems] // 16 * 16 if u % a.systems in seen else 0
                seen.add(u % a.systems)
            else:
                cached = (prev[0] + prev[1] - 1) // 16 * 16
            ideal += n - min(cached, (n - 1) // 16 * 16)
            prev = (n, gens[u][t])
    for p, _ in reps + [(router, 0)]:
        p.terminate()
    for p, _ in reps + [(router, 0)]:
        p.wait(30)
    if tr:
        with open(f"{tr}.requests.jsonl", "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in sorted(trace, key=lambda x: x["sent_s"]))
    ttfts.sort()
    blocks = metric(rm, "tpserve_router_prompt_blocks_total")
    return {"policy": policy, "requests": len(ttfts), "wall_s": wall, "output_tok_s": n_out[0] / wall,
            "ttft_p50_s": statistics.median(ttfts), "ttft_p99_s": ttfts[min(len(ttfts) - 1, int(0.99 * len(ttfts)))],
            "router_prefix_hit_rate": metric(rm, "tpserve_router_prefix_hit_blocks_total") / blocks if blocks else 0,
            "replica_prefix_hit_rate": h / q if q else 0, "recomputed_prompt_tokens": q - h,
            "prompt_tokens": q, "kv_fetch_hints": metric(rm, "tpserve_router_kv_fetch_hints_total"),
            "kv_fetches": fetches, "kv_fetched_blocks": fetched, "kv_tokens_per_replica": kv_tokens,
            "history_tokens": histories, "routed_per_replica": routed, "preemptions": sums["preempt"],
            "held_blocks_evicted": sums["held_evicted"], "least_recompute_tokens": ideal, "late_sends": sum(1 for x in lateness if x > 0), "late_mean_s": statistics.mean(lateness),
            "replica_busy_s": busy,
            "server_queue_mean_s": sums["queue_s"] / max(sums["queue_n"], 1),
            "server_prefill_mean_s": sums["prefill_s"] / max(sums["prefill_n"], 1),
            "server_ttft_mean_s": sums["ttft_s"] / max(sums["ttft_n"], 1)}


policies = a.policies.split(",")
results = []
for rnd in range(a.rounds):
    order = policies if rnd % 2 == 0 else policies[::-1]
    for p in order:
        r = run_policy(p, 1234, rnd)
        r["round"] = rnd
        results.append(r)
        print(json.dumps(r), flush=True)
if a.json:
    json.dump({"workload": {k: v for k, v in vars(a).items() if k not in ("tpserve", "root", "json")},
               "rows": results}, open(a.json, "w"), indent=1)

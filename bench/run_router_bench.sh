#!/usr/bin/env bash
# The router benchmark (issue 15, deliverable 6): bench/router_bench.py over prefix_aware, prefix_aware + fetch,
# least_load and round_robin in one run (fresh replicas per policy, the order alternating by round) at 2 replicas
# x tp 1 (1 thread each) on SmolLM2, written to bench/results/router-YYYYMMDD-HHMM.md with the command line, the
# CPU, `uptime` before and after, and the workload's parameters.
#   bench/run_router_bench.sh [router_bench.py options]     e.g. --users 16 --turns 5 --rounds 2 --kv-mb 109
#   (--arrival-rate R: the open-loop variant, Poisson arrivals at R requests/s; the default stays closed loop)
#
# The default workload is sized so that KV capacity, not compute alone, separates the policies, as in the
# deployments the cache-aware routers (SGLang, Dynamo, llm-d) are measured on: 16 users on 4 shared system prompts
# (246 tokens each with the chat template), 5 turns of ~88 prompt tokens (60 pasted words) + 16 output tokens, so
# the conversations end at 9,899 distinct tokens in all (~0.56k per user + the 4 system prompts; the results file
# gives the measured figure). Each replica's KV pool is --kv-mb 109 MiB = 310 blocks x 16 = 4960 tokens: 0.50 of
# all histories. round_robin sends every user to both replicas, so each must hold all of them in half the room and
# LRU evicts a history before its next turn comes back; prefix_aware partitions the users (about half each) and
# keeps each history resident (tight at the last turns: a replica's half plus its copies of the system prompts).
# The engines run scheduler.max_num_batched_tokens 256 (--max-batched-tokens; 0: the engine's 2048): with 1
# thread a 2048-token step takes seconds, and every request arriving meanwhile waits for it (see the results).
# After the policies, bench/kv_fetch_bench.py (two fresh replicas, prefixes CROSSOVER_LENGTHS) measures fetch vs
# recompute and the crossover prefix length; its section is appended (CROSSOVER_LENGTHS= skips it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TPSERVE=${TPSERVE:-$ROOT/build/launch/tpserve}
out=$ROOT/bench/results/router-$(date -u +%Y%m%d-%H%M).md
json=$(mktemp)
load_before=$(uptime)
python3 "$ROOT/bench/router_bench.py" "$TPSERVE" "$ROOT" --json "$json" "$@"
load_after=$(uptime)
CROSSOVER_LENGTHS=${CROSSOVER_LENGTHS-17,24,32,48,64,128,256,512}
xover=$(mktemp)
if [ -n "$CROSSOVER_LENGTHS" ]; then
  xload_before=$(uptime)
  python3 "$ROOT/bench/kv_fetch_bench.py" "$TPSERVE" "$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$xover" \
    "$CROSSOVER_LENGTHS" 2 >"$xover.log" 2>&1 || { echo; echo "kv_fetch_bench.py failed:"; tail -5 "$xover.log"; } >>"$xover"
  xload_after=$(uptime)
fi
{
  echo "# Router policies: multi-turn chat with shared system prompts, 2 replicas x tp 1"
  echo
  echo "Command: \`bench/run_router_bench.sh $*\`  "
  echo "Binary: \`$TPSERVE\` (checkout at $(git -C "$(dirname "$TPSERVE")" rev-parse --short HEAD 2>/dev/null || echo '?'), $(git -C "$(dirname "$TPSERVE")" rev-parse --abbrev-ref HEAD 2>/dev/null || echo '?'))  "
  echo "Date: $(date -u '+%Y-%m-%d %H:%M UTC')  "
  echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags: $(grep -o -w -E 'avx512f|avx512_bf16|avx512_vnni|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')  "
  echo "uptime before: \`$load_before\`  "
  echo "uptime after: \`$load_after\`  "
  echo "Model: SmolLM2-135M-Instruct Q4_1 (weights kept quantized), 1 thread per replica, greedy, streamed."
  echo
  python3 - "$json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = doc["rows"]
w = doc["workload"]
arrivals = (f"open loop: Poisson arrivals at {w['arrival_rate']} requests/s (TTFT from the scheduled arrival)"
            if w.get("arrival_rate") else f"closed loop: think time {w['think']} s")
print(f"Workload: {w['users']} users on {w['systems']} shared system prompts, {w['turns']} turns each, "
      f"{w['user_words']} pasted words a turn, {w['max_tokens']} output tokens a turn, {arrivals}; "
      f"{w['rounds']} round(s), policy order alternating by round.  ")
kv, hist = rows[0]["kv_tokens_per_replica"], rows[0]["history_tokens"]
print(f"KV pool per replica: cache.memory_mb {w['kv_mb']} = {kv:.0f} tokens; all conversations at their end: "
      f"{hist:.0f} distinct tokens (shared system prompts once), so one replica holds {kv / hist:.2f} of them."
      + (f" scheduler.max_num_batched_tokens {w['max_batched_tokens']}." if w.get("max_batched_tokens") else "")
      + (f" The least prefill the conversations need (one cache that never evicts, each system prompt once): "
         f"{rows[0]['least_recompute_tokens']:.0f} tokens." if "least_recompute_tokens" in rows[0] else ""))
print()
print("| round | policy | requests | output tok/s | TTFT p50 (s) | TTFT p99 (s) | router prefix hit | replica prefix-cache hit | prompt tokens | recomputed prompt tokens | fetch hints | KV fetches (blocks) | server queue / prefill / TTFT mean (s) | preemptions | held blocks evicted | routed A / B | engine busy s A / B | computed tokens A / B |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['round']} | {r['policy']} | {r['requests']} | {r['output_tok_s']:.1f} | {r['ttft_p50_s']:.3f} | "
          f"{r['ttft_p99_s']:.3f} | {r['router_prefix_hit_rate']:.2f} | {r['replica_prefix_hit_rate']:.2f} | "
          f"{r['prompt_tokens']:.0f} | {r['recomputed_prompt_tokens']:.0f} | {r['kv_fetch_hints']:.0f} | "
          f"{r['kv_fetches']:.0f} ({r['kv_fetched_blocks']:.0f}) | {r['server_queue_mean_s']:.2f} / "
          f"{r['server_prefill_mean_s']:.2f} / {r['server_ttft_mean_s']:.2f} | {r['preemptions']:.0f} | {r.get('held_blocks_evicted', 0):.0f} | "
          f"{' / '.join(str(x) for x in r.get('routed_per_replica', []))} | "
          f"{' / '.join(f'{b[0]:.1f}' for b in r.get('replica_busy_s', []))} | "
          f"{' / '.join(f'{b[1]:.0f}' for b in r.get('replica_busy_s', []))} |")
by = {}
for r in rows:
    by.setdefault(r["policy"], []).append(r)
if "round_robin" in by:
    rr_tps = sum(r["output_tok_s"] for r in by["round_robin"]) / len(by["round_robin"])
    rr_ttft = sum(r["ttft_p50_s"] for r in by["round_robin"]) / len(by["round_robin"])
    print()
    for p, rs in by.items():
        tps = sum(r["output_tok_s"] for r in rs) / len(rs)
        ttft = sum(r["ttft_p50_s"] for r in rs) / len(rs)
        print(f"- {p}: throughput {tps / rr_tps:.2f}x round_robin's, TTFT p50 {ttft / rr_ttft:.2f}x round_robin's")
PY
  if [ -s "$xover" ]; then
    echo
    echo "## Fetch vs recompute: the crossover prefix length"
    echo
    echo "\`bench/kv_fetch_bench.py $TPSERVE models/SmolLM2-135M-Instruct.Q4_1.gguf OUT $CROSSOVER_LENGTHS 2\`, run after"
    echo "the policies on two fresh replicas (1 thread each); uptime before: \`$xload_before\`, after: \`$xload_after\`."
    cat "$xover"
  fi
} >"$out"
rm -f "$json" "$xover" "$xover.log"
echo "wrote $out"
cat "$out"

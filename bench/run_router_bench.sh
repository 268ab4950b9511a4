#!/usr/bin/env bash
# The router benchmark (issue 15, deliverable 6): bench/router_bench.py over prefix_aware, prefix_aware + fetch,
# least_load and round_robin in one run (fresh replicas per policy, the order alternating by round) at 2 replicas
# x tp 1 (1 thread each) on SmolLM2, written to bench/results/router-YYYYMMDD-HHMM.md with the command line, the
# CPU, `uptime` before and after, and the workload's parameters.
#   bench/run_router_bench.sh [router_bench.py options]     e.g. --users 8 --turns 5 --rounds 2
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TPSERVE=${TPSERVE:-$ROOT/build/launch/tpserve}
out=$ROOT/bench/results/router-$(date -u +%Y%m%d-%H%M).md
json=$(mktemp)
load_before=$(uptime)
python3 "$ROOT/bench/router_bench.py" "$TPSERVE" "$ROOT" --json "$json" "$@"
load_after=$(uptime)
{
  echo "# Router policies: multi-turn chat with shared system prompts, 2 replicas x tp 1"
  echo
  echo "Command: \`bench/run_router_bench.sh $*\`  "
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
print(f"Workload: {w['users']} users on {w['systems']} shared system prompts, {w['turns']} turns each, "
      f"{w['user_words']} pasted words a turn, {w['max_tokens']} output tokens a turn, think time {w['think']} s; "
      f"{w['rounds']} round(s), policy order alternating by round.")
print()
print("| round | policy | requests | output tok/s | TTFT p50 (s) | TTFT p99 (s) | router prefix hit | replica prefix-cache hit | prompt tokens | recomputed prompt tokens | fetch hints | KV fetches (blocks) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['round']} | {r['policy']} | {r['requests']} | {r['output_tok_s']:.1f} | {r['ttft_p50_s']:.3f} | "
          f"{r['ttft_p99_s']:.3f} | {r['router_prefix_hit_rate']:.2f} | {r['replica_prefix_hit_rate']:.2f} | "
          f"{r['prompt_tokens']:.0f} | {r['recomputed_prompt_tokens']:.0f} | {r['kv_fetch_hints']:.0f} | "
          f"{r['kv_fetches']:.0f} ({r['kv_fetched_blocks']:.0f}) |")
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
} >"$out"
rm -f "$json"
echo "wrote $out"
cat "$out"

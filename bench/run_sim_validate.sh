#!/usr/bin/env bash
# Simulator validation on this CPU: serve SmolLM2-135M (Q4_1, quantized kept, 1 rank, 1 thread = one "device" of
# configs/hardware/cpu-epyc-2core.yaml) with `tpserve serve`, drive it with bench/load_gen.py at a few
# concurrencies (closed loop), run `tpserve simulate` with this CPU's card on the same workload shape (closed loop
# at C, prompts uniform in [42, 336] tokens ~ load_gen's 40-320 words at the
# ~1.05 tokens/word SmolLM2's tokenizer gave in the first run, outputs uniform in [32, 128], the same
# scheduler limits and KV pool), and write bench/results/sim-validate-*.md with measured vs predicted output
# tok/s and TTFT p50 and |error| = |predicted - measured| / measured.
#   bench/run_sim_validate.sh [C...]      (default: 1 2 4 8)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if (($#)); then CS=("$@"); else CS=(1 2 4 8); fi
TPSERVE=${TPSERVE:-build/launch/tpserve}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
CARD=cpu-epyc-2core
SEED=${SEED:-0}
for f in "$MODEL" "$TPSERVE"; do [ -e "$f" ] || { echo "run_sim_validate: missing $f" >&2; exit 1; }; done
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
requests_for() { local c=$1; echo $((c * 3 > 8 ? c * 3 : 8)); }

cat >"$tmp/serve.yaml" <<EOF
model:
  path: $ROOT/$MODEL
  dtype: bf16
  quantized: keep
parallel:
  threads: 1
cache:
  memory_mb: 256
  dtype: bf16
  max_context: 2048
scheduler:
  max_num_seqs: 64
  max_num_batched_tokens: 2048
EOF
port=$(free_port)
echo "server start: load $(loadavg)" >>"$tmp/load.txt"
"$TPSERVE" serve --config "$tmp/serve.yaml" --port "$port" >"$tmp/serve.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  kill -0 "$server_pid" 2>/dev/null || { echo "server exited:" >&2; tail -20 "$tmp/serve.log" >&2; exit 1; }
  python3 -c "import sys,urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:$port/v1/models',timeout=2).status==200 else 1)" 2>/dev/null && break
  sleep 0.2
done
first=1
for c in "${CS[@]}"; do
  n=$(requests_for "$c")
  args=(--url "http://127.0.0.1:$port" --concurrency "$c" --requests "$n" --seed "$SEED" --label tpserve
        --json-out "$tmp/measured.jsonl" --prompt-words 40 320 --max-tokens 32 128)
  ((first)) && args+=(--warmup 1)
  echo "  load $(loadavg) before C=$c" >>"$tmp/load.txt"
  python3 bench/load_gen.py "${args[@]}" >&2
  first=0
  cat >"$tmp/w$c.yaml" <<EOF
seed: $SEED
requests: $n
arrival: {concurrency: $c}
prompt_len: {dist: uniform, min: 42, max: 336}
output_len: {dist: uniform, min: 32, max: 128}
EOF
  "$TPSERVE" simulate --model SmolLM2-135M --gpu "$CARD" --tp 1 --weights int4 --kv-dtype bf16 --kv-mem 256MiB \
    --context 2048 --max-num-seqs 64 --max-num-batched-tokens 2048 --workload "$tmp/w$c.yaml" --json >"$tmp/sim$c.json"
done
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=""
echo "end: load $(loadavg)" >>"$tmp/load.txt"
mkdir -p bench/results
out=bench/results/sim-validate-$(date -u +%Y%m%d-%H%M).md
python3 - "$tmp" "$out" "${CS[@]}" <<'EOF'
import json, sys, subprocess, statistics
tmp, out, cs = sys.argv[1], sys.argv[2], sys.argv[3:]
meas = {}
for line in open(f"{tmp}/measured.jsonl"):
    j = json.loads(line); meas[str(j["concurrency"])] = j
rows, errs_tp, errs_ttft = [], [], []
for c in cs:
    m = meas[c]; s = json.load(open(f"{tmp}/sim{c}.json"))
    mt, st = m["out_tok_s"], s["output_tok_per_s"]
    mf, sf = m["ttft_p50_ms"], 1e3 * s["ttft_s"]["p50"]
    e1, e2 = abs(st - mt) / mt, abs(sf - mf) / mf
    errs_tp.append(e1); errs_ttft.append(e2)
    rows.append(f"| {c} | {m['ok']} | {m['prompt_tok_mean']:.0f} | {m['out_tok_mean']:.0f} | {mt:.1f} | {st:.1f} | {100*e1:.0f}% "
                f"| {mf:.0f} | {sf:.0f} | {100*e2:.0f}% | {m['itl_mean_ms']:.1f} | {1e3*s['itl_s']['mean']:.1f} |")
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
with open(out, "w") as f:
    f.write(f"""# Simulator validation: tpserve serve vs tpserve simulate on this CPU

- machine: {cpu}, 2 cores, shared with other helpers' builds (load below); card configs/hardware/cpu-epyc-2core.yaml
- server: `tpserve serve` on models/SmolLM2-135M-Instruct.Q4_1.gguf (quantized kept, bf16 KV, 1 rank, 1 thread,
  KV pool 256 MiB, max_num_seqs 64, max_num_batched_tokens 2048), client bench/load_gen.py closed loop on the same cores
- simulator: `tpserve simulate --model SmolLM2-135M --gpu cpu-epyc-2core --tp 1 --weights int4 --kv-dtype bf16
  --kv-mem 256MiB --context 2048 --max-num-seqs 64 --max-num-batched-tokens 2048 --workload W.yaml --json`,
  W = closed loop at C with the same request count, prompts uniform [42, 336] tokens, outputs uniform [32, 128]
  (load_gen's distributions; the token counts are not the exact same requests — see the prompt mean column)
- command: `bench/run_sim_validate.sh {' '.join(cs)}`
- |error| = |predicted - measured| / measured

| C | requests | prompt tok (measured mean) | out tok (mean) | measured out tok/s | predicted | abs error | measured TTFT p50 ms | predicted | abs error | measured mean ITL ms | predicted |
|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
""" + "\n".join(rows) + f"""

Median |error|: throughput {100*statistics.median(errs_tp):.0f}%, TTFT p50 {100*statistics.median(errs_ttft):.0f}% (goal of issue 16: <= 20%).

## Load during the run

```
{open(f"{tmp}/load.txt").read()}```
""")
print(open(out).read())
EOF

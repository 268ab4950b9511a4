#!/usr/bin/env bash
# Serving throughput/latency: tpserve serve beside llama.cpp's llama-server (-np slots, continuous batching) on the
# same model (SmolLM2-135M-Instruct BF16 GGUF made by our converter), the same dtype (BF16 weights) and the same
# threads, swept over client concurrency with bench/load_gen.py (streaming /v1/completions, temperature 0,
# ignore_eos, prompts ~50-400 tokens, max_tokens 32-128). The servers run ONE AT A TIME (llama-server's whole
# sweep, then tpserve's), each on a port the OS picked. Writes bench/results/serve-<UTC date>.md with the machine,
# its load, the exact commands, both tables and the tpserve / llama-server ratio at each C.
#   bench/run_serve_bench.sh [C...]        (default: 1 4 16 64)
# Env: THREADS (2), SEED (0), TPSERVE (build/launch/tpserve), REQUESTS_<C>
#      (requests at concurrency C; default max(2C,16) for C<=16 and C for larger C, to keep the run ~10 min).
# Needs the BF16 GGUF (launch/setup) and llama-server (tests/peers/build_llama_cpp.sh); neither is built here.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if (($#)); then CS=("$@"); else CS=(1 4 16 64); fi
THREADS=${THREADS:-2}
SEED=${SEED:-0}
MODEL=models/SmolLM2-135M-Instruct.BF16.gguf
LLAMA_SERVER=third_party/llama.cpp-build/bin/llama-server
TPSERVE=${TPSERVE:-build/launch/tpserve}
MAX_C=0
for c in "${CS[@]}"; do ((c > MAX_C)) && MAX_C=$c; done
SLOT_CTX=1024  # per-slot context for llama-server: 400-token prompt + 128 generated fits
for f in "$MODEL" "$LLAMA_SERVER" "$TPSERVE"; do
  [ -e "$f" ] || { echo "run_serve_bench: missing $f (run launch/setup and tests/peers/build_llama_cpp.sh)" >&2; exit 1; }
done

tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# wait_ready URL PATH LOG: poll until GET URL/PATH answers 200 (120 s at most; fail if the server died).
wait_ready() {
  local url=$1 path=$2 log=$3
  for _ in $(seq 1 600); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "run_serve_bench: server exited; its log:" >&2; tail -20 "$log" >&2; exit 1
    fi
    if python3 - "$url$path" <<'EOF' 2>/dev/null; then return 0; fi
import sys, urllib.request
sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
EOF
    sleep 0.2
  done
  echo "run_serve_bench: server not ready after 120 s; its log:" >&2; tail -20 "$log" >&2; exit 1
}

stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

requests_for() {
  local c=$1 var="REQUESTS_$1"
  if [ -n "${!var:-}" ]; then echo "${!var}"; elif ((c <= 16)); then echo $((2 * c > 16 ? 2 * c : 16)); else echo "$c"; fi
}

# sweep LABEL URL: one load_gen run per C (one warm-up request first), rows to $tmp/LABEL.md, JSON to $tmp/all.jsonl.
sweep() {
  local label=$1 url=$2 first=1
  for c in "${CS[@]}"; do
    local n; n=$(requests_for "$c")
    local args=(--url "$url" --concurrency "$c" --requests "$n" --seed "$SEED" --label "$label" --json-out "$tmp/all.jsonl")
    ((first)) && args+=(--warmup 2 --header)
    echo "  load $(loadavg) before C=$c" >>"$tmp/load.txt"
    echo "\$ bench/load_gen.py ${args[*]}" | sed "s|$tmp/all.jsonl|RESULTS.jsonl|" >>"$tmp/cmds.txt"
    python3 bench/load_gen.py "${args[@]}" | tee -a "$tmp/$label.md" >&2
    first=0
  done
}

# --- llama-server ------------------------------------------------------------------------------------------
port=$(free_port)
cmd_peer=("$LLAMA_SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" -t "$THREADS" -tb "$THREADS"
          -np "$MAX_C" -c $((MAX_C * SLOT_CTX)) --cont-batching)
echo "llama-server: load $(loadavg) before start" >>"$tmp/load.txt"
"${cmd_peer[@]}" >"$tmp/llama-server.log" 2>&1 &
server_pid=$!
wait_ready "http://127.0.0.1:$port" /health "$tmp/llama-server.log"
echo "llama-server ready on port $port" >&2
sweep llama-server "http://127.0.0.1:$port"
stop_server

# --- tpserve -----------------------------------------------------------------------------------------------
cat >"$tmp/tpserve.yaml" <<EOF
model:
  path: $ROOT/$MODEL
  dtype: bf16
cache:
  memory_mb: 1024
  max_context: 2048
scheduler:
  max_num_seqs: $((MAX_C > 64 ? MAX_C : 64))
  max_num_batched_tokens: 2048
EOF
port=$(free_port)
cmd_ours=("$TPSERVE" serve --config "$tmp/tpserve.yaml" --model "$MODEL" --dtype bf16 --threads "$THREADS"
          --port "$port")
echo "tpserve: load $(loadavg) before start" >>"$tmp/load.txt"
"${cmd_ours[@]}" >"$tmp/tpserve.log" 2>&1 &
server_pid=$!
wait_ready "http://127.0.0.1:$port" /v1/models "$tmp/tpserve.log"
echo "tpserve ready on port $port" >&2
sweep tpserve "http://127.0.0.1:$port"
stop_server
echo "end: load $(loadavg)" >>"$tmp/load.txt"

# --- results -----------------------------------------------------------------------------------------------
mkdir -p bench/results
out=bench/results/serve-$(date -u +%Y%m%d-%H%M).md
{
  echo "# Serving: tpserve vs llama.cpp llama-server"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- llama.cpp: $(cat third_party/llama_cpp_version.txt 2>/dev/null || echo unknown)"
  echo "- tpserve: $TPSERVE (git $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo ', dirty tree'))"
  echo "- model: $MODEL (BF16 weights; tpserve runs its BF16 runtime on the same file), $THREADS threads each"
  echo "- servers run one at a time; client: bench/load_gen.py (Python threads, streaming /v1/completions,"
  echo "  temperature 0, ignore_eos, stream_options.include_usage), seed $SEED, on the same cores as the server"
  echo "- requests per C: $(for c in "${CS[@]}"; do printf '%s->%s ' "$c" "$(requests_for "$c")"; done)(closed loop: each"
  echo "  client thread sends its next request when the last one ends; one wave only at C > 16 to keep the run short)"
  echo
  echo "## Commands"
  echo
  echo '```'
  echo "\$ ${cmd_peer[*]}" | sed "s|--port $port|--port PORT|; s|--port [0-9]*|--port PORT|"
  echo "\$ ${cmd_ours[*]}" | sed "s|$tmp/tpserve.yaml|serve.yaml|; s|--port [0-9]*|--port PORT|"
  echo "# serve.yaml:"
  sed 's/^/#   /' "$tmp/tpserve.yaml"
  awk '!seen[$0]++' "$tmp/cmds.txt" | sed 's|--url http://127.0.0.1:[0-9]*|--url URL|'
  echo '```'
  echo
  echo "## Results"
  echo
  python3 - "$tmp/all.jsonl" <<'EOF'
import json, sys
sys.path.insert(0, "bench")
from load_gen import HEADER, row
rows = [json.loads(l) for l in open(sys.argv[1])]
print(HEADER)
for s in sorted(rows, key=lambda s: (s["concurrency"], s["server"])):
    print(row(s))
print()
print("| C | output tok/s tpserve / llama-server | requests/s ratio | TTFT p50 ratio (lower is better) | mean ITL ratio (lower is better) |")
print("|--:|---|--:|--:|--:|")
by = {(s["server"], s["concurrency"]): s for s in rows}
for c in sorted({s["concurrency"] for s in rows}):
    a, b = by.get(("tpserve", c)), by.get(("llama-server", c))
    if not a or not b or not b["out_tok_s"]:
        continue
    r = lambda k: a[k] / b[k] if b[k] else float("nan")
    print(f"| {c} | {a['out_tok_s']:.1f} / {b['out_tok_s']:.1f} = {r('out_tok_s'):.2f}x | {r('req_s'):.2f}x "
          f"| {r('ttft_p50_ms'):.2f}x | {r('itl_mean_ms'):.2f}x |")
EOF
  echo
  echo "## Machine load (/proc/loadavg 1/5/15 min; the client shares the $(nproc) cores)"
  echo
  echo '```'
  cat "$tmp/load.txt"
  echo '```'
} >"$out"
cat "$out"
echo "wrote $out" >&2

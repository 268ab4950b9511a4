#!/usr/bin/env bash
# Fetch vs recompute of a prompt prefix between two replicas over UCX (issue 15, deliverable 3).
# Writes bench/results/kv-fetch-YYYYMMDD-HHMM.md with the command line, the machine and the load beside the figures.
# usage: bench/run_kv_fetch_bench.sh [LENGTHS comma list] [TRIALS]      (env: BUILD=build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
LENGTHS=${1:-64,128,256,512,1024,2048}
TRIALS=${2:-3}
OUT=$ROOT/bench/results/kv-fetch-$(date -u +%Y%m%d-%H%M).md
{
  echo "# KV fetch between replicas vs recompute"
  echo
  echo "Command: \`bench/run_kv_fetch_bench.sh $LENGTHS $TRIALS\` (bench/kv_fetch_bench.py; two \`tpserve serve\` replicas,"
  echo "tp 1, 1 thread each, SmolLM2-135M-Instruct Q4_1 weights kept quantized, KV bf16, block 16; UCX $(dpkg-query -W -f '${Version}' libucx0 2>/dev/null), transports chosen by UCX on loopback)."
  echo
  echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags: $(grep -o -w 'avx512f\|avx512_bf16\|avx512_vnni\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo
  echo "Load before: $(uptime | sed 's/.*load average/load average/')"
} >"$OUT"
python3 "$ROOT/bench/kv_fetch_bench.py" "$BUILD/launch/tpserve" "$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$OUT" "$LENGTHS" "$TRIALS"
echo "Load after: $(uptime | sed 's/.*load average/load average/')" >>"$OUT"
echo "$OUT"

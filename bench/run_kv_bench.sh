#!/usr/bin/env bash
# Static reservation vs paged KV for each KV dtype (the same budget in f32, bf16, fp8_e4m3, int8), prefix-caching
# TTFT, and n choices sharing a prompt's blocks, on the real model (bench/kv_bench.cpp says what is measured).
# Writes bench/results/kv-<UTC date>.md with the exact command and the machine.
# SKIP_SETUP=1: use the models/ already there (launch/setup rewrites models/).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SKIP_SETUP:-0}" = 1 ] || launch/setup >/dev/null
cmd="build/bench/kv_bench --model models/SmolLM2-135M-Instruct.Q4_1.gguf --dtype bf16 --kv-dtypes ${KV_DTYPES:-f32,bf16,fp8_e4m3,int8} --threads 2 --budget-mb ${BUDGET_MB:-96} --context 2048 --requests ${REQUESTS:-96} --prompt-median 120 --gen 32 --system 1000 --warm 4 --choices 8 --choice-prompt 500"
out=bench/results/kv-$(date -u +%Y%m%d-%H%M).md
{
  echo "# Paged vs static KV reservation per KV dtype, prefix caching, parallel sampling (tpserve engine, real model)"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- command: \`$cmd\`"
  echo
  $cmd 2>/dev/null
} | tee "$out"
echo "wrote $out" >&2

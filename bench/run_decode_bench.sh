#!/usr/bin/env bash
# Prefill (512-token prompt) and decode (batch 1, 128 tokens) tok/s of tpserve beside llama.cpp's llama-bench,
# on the same model (SmolLM2-135M-Instruct BF16 GGUF made by our converter) and the same threads, in one run.
# Writes bench/results/decode-<UTC date>.md with the exact commands and the machine.
#   bench/run_decode_bench.sh [THREADS...]   (default: 1 2)
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup
tests/peers/build_llama_cpp.sh >/dev/null
if (($#)); then THREADS=("$@"); else THREADS=(1 2); fi
MODEL=models/SmolLM2-135M-Instruct.BF16.gguf
LLAMA_BENCH=third_party/llama.cpp-build/bin/llama-bench
OURS=build/bench/decode_bench
out=bench/results/decode-$(date -u +%Y%m%d-%H%M).md
{
  echo "# Decode/prefill: tpserve vs llama.cpp llama-bench"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- llama.cpp: $(cat third_party/llama_cpp_version.txt)"
  echo "- model: $MODEL (BF16 weights; tpserve runs its BF16 runtime on the same file)"
  echo
  for t in "${THREADS[@]}"; do
    cmd_ours="$OURS --model $MODEL --dtype bf16 --threads $t --pp 512 --tg 128 --reps 3"
    cmd_peer="$LLAMA_BENCH -m $MODEL -p 512 -n 128 -t $t -r 3 -o md"
    echo "## $t thread(s)"
    echo
    echo '```'
    echo "\$ $cmd_ours"
    OMP_NUM_THREADS=$t $cmd_ours
    echo "\$ $cmd_peer"
    $cmd_peer 2>/dev/null
    echo '```'
    echo
  done
} | tee "$out"
echo "wrote $out" >&2

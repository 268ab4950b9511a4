#!/usr/bin/env bash
# Decode (batch 1 and batch B) and prefill tok/s of tpserve on SmolLM2-135M-Instruct in BF16 and with GGUF
# blocks kept quantized (Q8_0, Q4_0, Q4_1, Q4_K_M), beside llama.cpp's llama-bench on the same files and
# threads, in one run; the measured DRAM read bandwidth and each decode figure as a fraction of the roofline
# (roofline tok/s = GB/s ÷ weight bytes streamed per token; batch B: × B). Writes
# bench/results/decode-<UTC date>.md with the exact commands and the machine.
#   bench/run_decode_bench.sh [THREADS...]   (default: 1 2; env PP=256 TG=32 REPS=2 BATCH=16; SKIP_SETUP=1 to
#   skip launch/setup, SKIP_PEER_BUILD=1 to use an existing llama-bench)
# Files: the BF16 / Q8_0 / Q4_K_M GGUFs of launch/setup (made by `tpserve convert`), the original Q4_1, and a
# Q4_0 made here by `tpserve convert --to gguf-q4_0` into build/bench_models/. llama-bench runs Q8_0, Q4_0 and
# Q4_K_M (its default: repacked weights where it has them, as users run it); it has no batched-decode mode
# (llama-batched-bench is not built), so batch B has no llama.cpp column.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${SKIP_SETUP:-0}" == 1 ]] || launch/setup
[[ "${SKIP_PEER_BUILD:-0}" == 1 && -x third_party/llama.cpp-build/bin/llama-bench ]] || tests/peers/build_llama_cpp.sh >/dev/null
if (($#)); then THREADS=("$@"); else THREADS=(1 2); fi
PP=${PP:-256} TG=${TG:-32} REPS=${REPS:-2} BATCH=${BATCH:-16}
M=models/SmolLM2-135M-Instruct
Q40=build/bench_models/SmolLM2-135M-Instruct.Q4_0.gguf
mkdir -p build/bench_models
[[ -f $Q40 ]] || build/launch/tpserve convert --in $M.Q4_1.gguf --out $Q40 --to gguf-q4_0 >/dev/null
LLAMA_BENCH=third_party/llama.cpp-build/bin/llama-bench
OURS=build/bench/decode_bench
out=bench/results/decode-$(date -u +%Y%m%d-%H%M).md

# ours LABEL FILE THREADS BW_GBS: one decode_bench line, then the roofline fractions.
ours() {
  local label=$1 file=$2 t=$3 bw=$4
  local cmd="$OURS --model $file --dtype bf16 --quantized keep --threads $t --pp $PP --tg $TG --reps $REPS --batch $BATCH"
  echo "\$ $cmd"
  local line
  line=$(OMP_NUM_THREADS=$t $cmd 2>/dev/null)
  echo "$line"
  echo "$line" | awk -v bw="$bw" -v label="$label" -v b="$BATCH" -F'|' '{
    for (i = 1; i <= NF; ++i) {
      if ($i ~ / tg[0-9]+ [0-9.]+ ±/ && $i !~ / x b/) { split($i, a, " "); tg = a[2] }
      if ($i ~ / x b[0-9]+/) { split($i, a, " "); tgb = a[4] }
      if ($i ~ /bytes\/token/) { split($i, a, " "); mib = a[2] }
    }
    bytes = mib * 1048576; roof = bw * 1e9 / bytes
    printf("roofline %s: %.1f MiB/token streamed at %.1f GB/s -> %.1f tok/s; batch 1 at %.0f%%, batch %d at %.0f%% of %d x roofline\n",
           label, mib, bw, roof, 100 * tg / roof, b, 100 * tgb / (b * roof), b)
  }'
}

{
  echo "# Decode/prefill: tpserve (BF16 and GGUF blocks kept quantized) vs llama.cpp llama-bench"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB;" \
       "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: compare ratios within a row group)"
  echo "- llama.cpp: $(cat third_party/llama_cpp_version.txt)"
  echo "- tpserve activations: Q8_0 (Q8_0/Q4_0/Q5_0 weights), Q8_1 (Q4_1), Q8_K (Q4_K/Q6_K), as llama.cpp; kernel: $(
       grep -q avx512_vnni /proc/cpuinfo && echo 'AVX-512 VNNI' || echo 'AVX2 (no AVX-512 VNNI here)')"
  echo
  for t in "${THREADS[@]}"; do
    echo "## $t thread(s)"
    echo
    echo '```'
    echo "\$ build/bench/mem_bandwidth $t"
    bwline=$(build/bench/mem_bandwidth "$t")
    echo "$bwline"
    bw=$(echo "$bwline" | sed -n 's/.*read \([0-9.]*\) GB\/s.*/\1/p')
    ours BF16 $M.BF16.gguf "$t" "$bw"
    ours Q8_0 $M.Q8_0.gguf "$t" "$bw"
    ours Q4_0 $Q40 "$t" "$bw"
    ours Q4_1 $M.Q4_1.gguf "$t" "$bw"
    ours Q4_K_M $M.Q4_K_M.gguf "$t" "$bw"
    for f in $M.Q8_0.gguf $Q40 $M.Q4_K_M.gguf; do
      cmd_peer="$LLAMA_BENCH -m $f -p $PP -n $TG -t $t -r $REPS -o md"
      echo "\$ $cmd_peer"
      $cmd_peer 2>/dev/null
    done
    echo '```'
    echo
  done
} | tee "$out"
echo "wrote $out" >&2

#!/usr/bin/env bash
# Tensor parallelism on CPU: prefill (512-token prompt) and decode (128 tokens, batch 1) tok/s at tp 1 vs tp 2
# on a ≈1B-parameter synthetic Llama in BF16 (made by `tpserve synth`), with the share of each phase spent in
# all-reduce/all-gather. Same cores for both: tp 1 × 2 threads vs tp 2 × 1 thread (and tp 1 × 1 thread for
# reference). Writes bench/results/tp-<UTC date>.md with the exact commands.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup >/dev/null
MODEL=${MODEL:-models/synth-1b}
SHAPE="--layers 20 --hidden 2048 --heads 32 --kv-heads 8 --intermediate 5632 --vocab 32000 --seed 1 --dtype bf16"
[ -e "$MODEL/model.safetensors" ] || build/launch/tpserve synth --out "$MODEL" $SHAPE >&2
BENCH=build/bench/decode_bench
ARGS="--model $MODEL --dtype bf16 --pp ${PP:-512} --tg ${TG:-128} --reps ${REPS:-2}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=bench/results/tp-$(date -u +%Y%m%d-%H%M).md
{
  echo "# Tensor parallel on CPU: tp 1 vs tp 2, synthetic ≈1B Llama (BF16)"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- model: \`tpserve synth --out $MODEL $SHAPE\`"
  echo
  echo '```'
  for run in "mpirun -np 1 --bind-to none $BENCH $ARGS --threads 1" \
             "mpirun -np 1 --bind-to none $BENCH $ARGS --threads 2" \
             "mpirun -np 2 --bind-to none $BENCH $ARGS --threads 1"; do
    echo "\$ $run"
    $run 2>/dev/null
  done
  echo '```'
} | tee "$out"
echo "wrote $out" >&2

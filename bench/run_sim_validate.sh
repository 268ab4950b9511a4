#!/usr/bin/env bash
# Simulator validation on this CPU: bench/sweep runs the grid of configs/sweeps/validate-zen4.yaml (real
# `tpserve serve` runs of SmolLM2-135M Q4_1, 1 thread a rank, dp 1 and 2, closed loop at several C), then
# bench/sweep_validate.py replays each point's own requests (prompt and output tokens as served) through
# `tpserve simulate --gpu CARD --concurrency C` and writes bench/results/sim-validate-zen4-STAMP.md:
# measured vs predicted output tok/s, TTFT p50, mean ITL, and the ratios to each shape's lowest-C point.
#   bench/run_sim_validate.sh [SWEEP_YAML] [CARD]   (defaults: configs/sweeps/validate-zen4.yaml cpu-zen4-2core)
#   SWEEP_DIR=DIR reuses a finished sweep (no runs).
set -euo pipefail
cd "$(dirname "$0")/.."
CFG=${1:-configs/sweeps/validate-zen4.yaml}
CARD=${2:-cpu-zen4-2core}
stamp=$(date -u +%Y%m%d-%H%M)
dir=${SWEEP_DIR:-bench/results/sweep-validate-zen4-$stamp}
if [ -z "${SWEEP_DIR:-}" ]; then /usr/bin/python3 bench/sweep "$CFG" --out "$dir"; fi
out=bench/results/sim-validate-zen4-$stamp.md
/usr/bin/python3 bench/sweep_validate.py "$dir" --config "$CFG" --card "$CARD" --weights int4 --json "$dir/validate.json" \
  >"$dir/validate.md"
{
  echo "# Simulator validation on this machine: tpserve serve (bench/sweep) vs tpserve simulate"
  echo
  echo "- command: \`bench/run_sim_validate.sh $CFG $CARD\` (sweep: \`$dir\`, its report.md has the plots)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- card: configs/hardware/$CARD.yaml (fitted by bench/fit_cpu_card.py from bench programs, not from these points)"
  echo "- simulator: \`tpserve simulate --model SmolLM2-135M --gpu $CARD --tp 1 --dp D --weights int4 --kv-dtype bf16"
  echo "  --kv-mem 256MiB --context 2048 --max-num-seqs 64 --max-num-batched-tokens 2048 --concurrency C --workload"
  echo "  POINT.jsonl --json\`, POINT.jsonl = the point's requests as served (prompt tokens from the server's usage)"
  echo "- error = (predicted - measured) / measured; ratio columns: the point over its shape's C = 1 point (load"
  echo "  that slows both alike cancels); load1 = 1-minute load average when the point started"
  echo
  cat "$dir/validate.md"
} >"$out"
cat "$out"
echo "wrote $out"

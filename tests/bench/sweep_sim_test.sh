#!/usr/bin/env bash
# bench/sweep end to end on the real model, and the simulator kept honest against it:
#  1. a 2-point sweep (SmolLM2-135M Q4_1, tp 1, 1 thread; C = 1 and 4) writes sweep.csv (2 rows, no failed
#     request), the per-point request traces, 5 PNG plots and report.md;
#  2. the same command with --resume runs nothing more; without it, an existing sweep.csv is refused (exit 2);
#  3. `tpserve simulate` with a hardware card fitted on this machine a moment before (bench/fit_cpu_card.py, ~25 s
#     on a Zen 3: the card describes the CPU the test runs on, not the one a committed card was measured on),
#     replaying each point's own requests closed loop (bench/sweep_validate.py), predicts the measured C=4 / C=1
#     ratios of output tok/s and of mean TTFT within TOL (stated below). Ratios between two points measured
#     seconds apart cancel the machine load that slows both alike (absolute figures moved 2x with load on the
#     shared machines); 12 and 24 requests a point (the mean of 6 at C=1 moved 30% with one slow request, and
#     the 4 requests that start together at C=4 weighed a third of its mean). A miss is measured once more (below).
#   sweep_sim_test.sh TPSERVE REPO_ROOT
set -euo pipefail
TPSERVE=$1 ROOT=$2
export TPSERVE
# Tolerance on |predicted ratio / measured ratio - 1|. Measured on the Zen 3 2-core machine (AMD EPYC family 25
# model 1, load average ~0.6; 6 runs, 2026-12-05 19:10 UTC): throughput ratio |error| 0-4% with the card fitted
# here (7-11% with the Zen 4 card), mean-TTFT ratio 0-8% (measured 1.99-2.19, predicted 2.02). With 6 / 12
# requests a point and the Zen 4 card it was 6-40% (the failures: measured 2.28-2.29 against 3.19 predicted).
TOL=${SWEEP_SIM_TOL:-0.25}
MODEL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -e "$MODEL" ] || { echo "SKIP-FAIL: $MODEL missing (run launch/setup)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/s.yaml" <<YAML
name: test
model: $MODEL
threads: 1
cache_memory_mb: 64
max_context: 1024
requests: {per_client: 6, min: 12}
grid:
  concurrency: [1, 4]
  prompt_words: [[30, 90]]
  output_tokens: [[8, 16]]
YAML
out=$tmp/out
/usr/bin/python3 "$ROOT/bench/sweep" "$tmp/s.yaml" --out "$out" | tee "$tmp/log1"
rows=$(($(wc -l <"$out/sweep.csv") - 1))
[ "$rows" = 2 ] || { echo "FAIL: expected 2 rows in sweep.csv, got $rows"; exit 1; }
grep -c '^\[[0-9]/2\] ' "$tmp/log1" | grep -qx 2 || { echo "FAIL: expected one progress line per point"; exit 1; }
for f in throughput.png ttft.png itl.png allreduce.png kv_usage.png report.md; do
  [ -s "$out/$f" ] || { echo "FAIL: $f missing"; exit 1; }
done
[ "$(ls "$out/requests" | wc -l)" = 2 ] || { echo "FAIL: expected 2 request traces"; exit 1; }
/usr/bin/python3 "$ROOT/bench/sweep" "$tmp/s.yaml" --out "$out" --resume | tee "$tmp/log2"
grep -q "2 already in" "$tmp/log2" || { echo "FAIL: --resume did not skip the points done"; exit 1; }
[ "$(($(wc -l <"$out/sweep.csv") - 1))" = 2 ] || { echo "FAIL: --resume added rows"; exit 1; }
rc=0; /usr/bin/python3 "$ROOT/bench/sweep" "$tmp/s.yaml" --out "$out" >/dev/null 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] && grep -q "exists: pass --resume" "$tmp/err" || { echo "FAIL: an existing sweep.csv was not refused"; exit 1; }

/usr/bin/python3 "$ROOT/bench/fit_cpu_card.py" --threads 1 --name this-cpu --build "$(dirname "$(dirname "$TPSERVE")")" \
  --out "$tmp/card.yaml" | grep -E '^#   (mem_bandwidth|kv_attention|  fit on)|^(peak|m_half|mem_eff|step_|token_)'
# The ratios against the card; a miss is measured once more with a fresh sweep (a neighbour's load that starts or
# ends between the two points slows one alone: a CI run on the shared Zen 3 measured the TTFT ratio 1.42 where 6
# quiet runs gave 1.89-2.19, predicted 2.03); the test fails when both measurements miss.
check() {  # OUT: the ratios of that sweep within TOL (exit 0) or not (1)
  /usr/bin/python3 "$ROOT/bench/sweep_validate.py" "$1" --config "$tmp/s.yaml" --card "$tmp/card.yaml" --weights int4 \
    --json "$tmp/v.json"
  /usr/bin/python3 - "$tmp/v.json" "$TOL" <<'PY'
import json, sys
v = json.load(open(sys.argv[1])); tol = float(sys.argv[2])
pts = {p["c"]: p for p in v["points"]}
p = pts[4]
bad = []
for m in ("tps", "ttft_mean"):
    e = p[f"err_{m}_ratio"]
    print(f"C=4/C=1 {m} ratio: measured {p[f'meas_{m}_ratio']:.2f}, predicted {p[f'pred_{m}_ratio']:.2f}, "
          f"|error| {100 * abs(e):.0f}% (tolerance {100 * tol:.0f}%)")
    if abs(e) > tol:
        bad.append(m)
sys.exit(1 if bad else 0)
PY
}
if ! check "$out"; then
  echo "sweep_sim_test: outside the tolerance; measuring the two points again"
  /usr/bin/python3 "$ROOT/bench/sweep" "$tmp/s.yaml" --out "$tmp/again" >/dev/null
  check "$tmp/again" || { echo "FAIL: both measurements outside the tolerance"; exit 1; }
fi
echo "sweep_sim_test: OK"

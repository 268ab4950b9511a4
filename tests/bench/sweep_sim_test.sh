#!/usr/bin/env bash
# bench/sweep end to end on the real model, and the simulator kept honest against it:
#  1. a 2-point sweep (SmolLM2-135M Q4_1, tp 1, 1 thread; C = 1 and 4) writes sweep.csv (2 rows, no failed
#     request), the per-point request traces, 5 PNG plots and report.md;
#  2. the same command with --resume runs nothing more; without it, an existing sweep.csv is refused (exit 2);
#  3. `tpserve simulate` with this machine's card (configs/hardware/cpu-zen4-2core.yaml), replaying each point's
#     own requests closed loop (bench/sweep_validate.py), predicts the measured C=4 / C=1 ratios of output tok/s
#     and of mean TTFT (the mean: p50 of 6-12 requests jumps with one request's place in the queue) within TOL
#     (stated below). Ratios between two points measured seconds apart cancel the machine load that slows both
#     alike (absolute figures moved 2x with load on the shared machines).
#   sweep_sim_test.sh TPSERVE REPO_ROOT
set -euo pipefail
TPSERVE=$1 ROOT=$2
export TPSERVE
# Tolerance on |predicted ratio / measured ratio - 1|. Measured spread of the ratios over repeated runs of this
# test on the Zen 4 2-core machine at load average 15-16 (3 runs, 2026-12-02 00:08-00:10 UTC): throughput
# ratio |error| 6-19%, mean-TTFT ratio 6-19% (the simulator gives 1.14 and 3.19; measured 1.04-1.38, 2.68-3.39).
TOL=${SWEEP_SIM_TOL:-0.35}
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
requests: {per_client: 3, min: 6}
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

/usr/bin/python3 "$ROOT/bench/sweep_validate.py" "$out" --config "$tmp/s.yaml" --card cpu-zen4-2core --weights int4 \
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
echo "sweep_sim_test: OK"

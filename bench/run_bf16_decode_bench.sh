#!/usr/bin/env bash
# BF16 decode (tg) and prefill (pp) of tpserve's decode_bench beside llama.cpp's llama-bench on
# SmolLM2-135M-Instruct.BF16.gguf, alternating the two programs ROUNDS times per thread count (one repetition
# each a round, so load from other processes falls on both alike), plus the DRAM read roofline of this machine:
#   roofline tok/s = read GB/s (bench/mem_bandwidth, same thread count) / weight bytes a decode step streams
#   (decode_bench's bytes/token); % of roofline = tg tok/s / roofline tok/s.
# Writes bench/results/decode-<CPU family>-<UTC stamp>.md with the exact commands, the CPU model and the flags
# that choose our kernels (avx512_bf16, amx_bf16), and the load average before and after.
#   bench/run_bf16_decode_bench.sh [THREADS...]    (default: 1 2; env PP=512 TG=64 ROUNDS=3 FAMILY=<bench/cpu_family.sh>)
# Needs build/bench/{decode_bench,mem_bandwidth} and third_party/llama.cpp-build/bin/llama-bench (made by
# tests/peers/build_llama_cpp.sh; this script never builds it).
set -euo pipefail
cd "$(dirname "$0")/.."
if (($#)); then THREADS=("$@"); else THREADS=(1 2); fi
PP=${PP:-512} TG=${TG:-64} ROUNDS=${ROUNDS:-3} FAMILY=${FAMILY:-$(bench/cpu_family.sh)}
MODEL=models/SmolLM2-135M-Instruct.BF16.gguf
LLAMA_BENCH=third_party/llama.cpp-build/bin/llama-bench
OURS=build/bench/decode_bench
for f in "$MODEL" "$LLAMA_BENCH" "$OURS" build/bench/mem_bandwidth; do
  [[ -e $f ]] || { echo "run_bf16_decode_bench.sh: missing $f" >&2; exit 1; }
done
out=bench/results/decode-$FAMILY-$(date -u +%Y%m%d-%H%M).md
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT

{
  echo "# BF16 decode/prefill: tpserve decode_bench vs llama.cpp llama-bench, SmolLM2-135M-Instruct"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags that pick kernels:" \
       "$(grep -o -w -E 'avx512f|avx512_bf16|avx512_vnni|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: read the ratios, measured alternately)"
  echo "- llama.cpp: $(cat third_party/llama_cpp_version.txt 2>/dev/null || echo unknown)"
  echo "- model: $MODEL; pp$PP, tg$TG; $ROUNDS rounds, each: ours once, then llama-bench once"
  echo
  echo '```'
  for t in "${THREADS[@]}"; do
    for r in $(seq 1 "$ROUNDS"); do
      # The DRAM bandwidth, every round: on a shared machine it moves (a Zen 5 VM read 52.7 to 88 GB/s at 2 threads
      # within the hour), and a roofline from one reading misstates the rounds run at another.
      bwline=$(build/bench/mem_bandwidth "$t")
      echo "\$ build/bench/mem_bandwidth $t"
      echo "$bwline"
      bw=$(echo "$bwline" | sed -n 's/.*read \([0-9.]*\) GB\/s.*/\1/p')
      cmd="$OURS --model $MODEL --dtype bf16 --threads $t --pp $PP --tg $TG --reps 1"
      echo "\$ OMP_NUM_THREADS=$t $cmd"
      line=$(OMP_NUM_THREADS=$t $cmd 2>/dev/null)
      echo "$line"
      echo "$line" | awk -v t="$t" -v bw="$bw" -F'|' '{
        for (i = 1; i <= NF; ++i) {
          if ($i ~ / pp[0-9]+ [0-9.]+ ±/) { split($i, a, " "); pp = a[2] }
          if ($i ~ / tg[0-9]+ [0-9.]+ ±/) { split($i, a, " "); tg = a[2] }
          if ($i ~ /bytes\/token/) { split($i, a, " "); mib = a[2] }
        }
        printf("RAW ours %s %s %s %s %s\n", t, pp, tg, mib, bw) }' >>"$raw"
      peer="$LLAMA_BENCH -m $MODEL -p $PP -n $TG -t $t -r 1 -o csv"
      echo "\$ $peer"
      csv=$($peer 2>/dev/null)
      echo "$csv" | python3 -c '
import csv, sys
rows = list(csv.DictReader(sys.stdin))
t = sys.argv[1]
res = {}
for row in rows:
    kind = "pp" if int(row["n_prompt"]) > 0 else "tg"
    res[kind] = float(row["avg_ts"])
    print("llama-bench %s%s t=%s: %.2f tok/s" % (kind, row["n_prompt"] if kind == "pp" else row["n_gen"], t, res[kind]))
print("RAW peer %s %s %s" % (t, res.get("pp", 0), res.get("tg", 0)), file=sys.stderr)
' "$t" 2>>"$raw"
    done
  done
  echo '```'
  echo
  echo "- load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  python3 - "$raw" "$PP" "$TG" <<'EOF'
import statistics, sys
ours, peer = {}, {}
for line in open(sys.argv[1]):
    f = line.split()
    if f[:2] == ["RAW", "ours"]:
        ours.setdefault(f[2], []).append(tuple(map(float, f[3:7])))
    elif f[:2] == ["RAW", "peer"]:
        peer.setdefault(f[2], []).append(tuple(map(float, f[3:5])))
pp, tg = sys.argv[2], sys.argv[3]
print("| threads | ours pp%s | llama.cpp pp%s | pp ratio | ours tg%s | llama.cpp tg%s | tg ratio | read GB/s | roofline tok/s | ours %% of roofline | llama.cpp %% of roofline |" % (pp, pp, tg, tg))
print("|---|---|---|---|---|---|---|---|---|---|---|")
for t in sorted(ours):
    o, p = ours[t], peer.get(t, [])
    opp = statistics.mean(x[0] for x in o); otg = statistics.mean(x[1] for x in o)
    ppp = statistics.mean(x[0] for x in p) if p else float("nan"); ptg = statistics.mean(x[1] for x in p) if p else float("nan")
    mib = o[0][2]
    bws = [x[3] for x in o]
    bw = statistics.mean(bws)
    roof = bw * 1e9 / (mib * 1048576)
    # roofline fractions per round (each round's tg against the bandwidth read just before it), then their mean
    fo = statistics.mean(x[1] / (x[3] * 1e9 / (mib * 1048576)) for x in o)
    fp = statistics.mean(b[1] / (a[3] * 1e9 / (mib * 1048576)) for a, b in zip(o, p)) if p else float("nan")
    # per-round ratios (each round's ours / the peer right after it), then their mean
    rpp = statistics.mean(a[0] / b[0] for a, b in zip(o, p)) if p else float("nan")
    rtg = statistics.mean(a[1] / b[1] for a, b in zip(o, p)) if p else float("nan")
    print("| %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %.1f (%.1f-%.1f) | %.1f | %.0f%% | %.0f%% |" % (
        t, opp, ppp, rpp, otg, ptg, rtg, bw, min(bws), max(bws), roof, 100 * fo, 100 * fp))
print()
print("Ratios are the mean over rounds of (ours / llama.cpp in the same round). Roofline: read GB/s / %.1f MiB streamed a token;"
      " read GB/s is measured before every round (mean, and the range); the %% of roofline is the mean over rounds of"
      " each round's tg against that round's reading." % mib)
EOF
} | tee "$out"
echo "wrote $out" >&2

#!/usr/bin/env bash
# Decode (batch 1, optionally batch B) and prefill tok/s of tpserve on SmolLM2-135M-Instruct in BF16, with GGUF
# blocks kept quantized (Q8_0, Q4_0, Q4_1, Q4_K_M) and with compressed-tensors checkpoints made by
# `tpserve quantize --method rtn` (W8A16, W4A16 g64, W8A8-INT8, FP8 dynamic, FP8 128 x 128 blocks, NVFP4, MXFP4; and W4A16 g64 by GPTQ with
# act-order groups, `--method gptq --act-order-group`: every linear a g_idx; and W8A16 / W4A16 g64 / FP8 dynamic /
# NVFP4 / MXFP4 with the lm_head quantized too, `--ignore ''`, as llama.cpp's GGUF files quantize theirs: with a BF16
# lm_head, 56.6 of a token's MiB, no 8-bit scheme can stream 1.7x fewer bytes than BF16 nor a 4-bit one 2.5x),
# beside llama.cpp's llama-bench
# on the same GGUF files and threads, in one run: every configuration is run REPEATS times, alternating
# (ours and the peer in turn, thread counts interleaved), and the tables report the median of the runs.
# Also: the measured DRAM read bandwidth and each decode figure as a fraction of the roofline (roofline tok/s
# = GB/s ÷ weight bytes streamed per token, decode_bench's bytes/token), the load average beside each round.
#   bench/run_decode_bench.sh [THREADS...]   (default: 1 2; env PP=512 TG=32 REPS=2 REPEATS=3 BATCH=1 (> 1 adds
#   batched decode, ours only); SKIP_SETUP=1 skips launch/setup; SKIP_PEER_BUILD=1 uses an existing
#   llama-bench; NO_PEER=1 runs ours only; OUT=FILE names the result file; MODELS="BF16 Q8_0 ..." picks a subset)
# Files: the BF16 / Q8_0 / Q4_K_M GGUFs of launch/setup (made by `tpserve convert`), the original Q4_1, a Q4_0
# made here by `tpserve convert --to gguf-q4_0`, and the compressed-tensors directories made here by
# `tpserve quantize --in models/SmolLM2-135M-Instruct-hf --scheme S --method rtn`, all under build/bench_models/.
# Also llama.cpp's own mixes of the BF16 GGUF (`llama-quantize BF16 OUT TYPE`, made here when llama-quantize is built):
# Q2_K, Q3_K_M, Q5_K_M and IQ4_XS, whose IQ4_XS tensors we hold as IQ4_NL
# (rank/gguf_requantize.h), each beside llama-bench on the same file.
# The compressed-tensors rows have no llama.cpp peer (llama.cpp reads no such checkpoint): they are compared
# with our BF16 (same HF directory, --dtype bf16) and with llama.cpp's Q8_0 / Q4_0 (the same bits a weight).
# llama-bench runs with its defaults (repacked weights where it has them, as users run it).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${SKIP_SETUP:-0}" == 1 ]] || launch/setup
if [[ "${NO_PEER:-0}" == 1 ]]; then
  :  # ours only (NO_PEER=1): the llama-bench rows are skipped
elif [[ "${SKIP_PEER_BUILD:-0}" == 1 ]]; then
  [[ -x third_party/llama.cpp-build/bin/llama-bench ]] || { echo "run_decode_bench: SKIP_PEER_BUILD=1 but third_party/llama.cpp-build/bin/llama-bench is missing" >&2; exit 1; }
else
  tests/peers/build_llama_cpp.sh >/dev/null
fi
if (($#)); then THREADS=("$@"); else THREADS=(1 2); fi
PP=${PP:-512} TG=${TG:-32} REPS=${REPS:-2} REPEATS=${REPEATS:-3} BATCH=${BATCH:-1}
M=models/SmolLM2-135M-Instruct
B=build/bench_models
mkdir -p $B
Q40=$B/SmolLM2-135M-Instruct.Q4_0.gguf
[[ -f $Q40 ]] || build/launch/tpserve convert --in $M.Q4_1.gguf --out $Q40 --to gguf-q4_0 >/dev/null
for s in w8a16 w4a16 w8a8-int8 fp8-dynamic fp8-block nvfp4 mxfp4; do
  [[ -f $B/ct-$s/config.json ]] || build/launch/tpserve quantize --in $M-hf --out $B/ct-$s --scheme $s --method rtn $([[ $s == w4a16 ]] && echo --group-size 64) >/dev/null
done
for s in w8a16 w4a16 fp8-dynamic nvfp4 mxfp4; do
  [[ -f $B/ct-$s-head/config.json ]] || build/launch/tpserve quantize --in $M-hf --out $B/ct-$s-head --scheme $s --method rtn --ignore '' $([[ $s == w4a16 ]] && echo --group-size 64) >/dev/null
done
[[ -f $B/ct-w4a16-gidx/config.json ]] ||
  build/launch/tpserve quantize --in $M-hf --out $B/ct-w4a16-gidx --scheme w4a16 --group-size 64 --method gptq --act-order-group >/dev/null
LLAMA_QUANTIZE=third_party/llama.cpp-build/bin/llama-quantize
LCPP_MIXES=(Q2_K Q3_K_M Q5_K_M IQ4_XS)
for q in "${LCPP_MIXES[@]}"; do
  f=$B/SmolLM2-135M-Instruct.lcpp-$q.gguf
  [[ -f $f || ! -x $LLAMA_QUANTIZE ]] || $LLAMA_QUANTIZE $M.BF16.gguf $f $q >/dev/null 2>&1
done
LLAMA_BENCH=third_party/llama.cpp-build/bin/llama-bench
OURS=build/bench/decode_bench
stamp=$(date -u +%Y%m%d-%H%M)
out=${OUT:-bench/results/decode-quant-$(bench/cpu_family.sh)-$stamp.md}
log=$B/decode-quant-$stamp.log

# label file [peer-file]: the configurations, in the order they run.
CONFIGS=(
  "BF16 $M-hf -"
  "Q8_0 $M.Q8_0.gguf $M.Q8_0.gguf"
  "Q4_0 $Q40 $Q40"
  "Q4_1 $M.Q4_1.gguf $M.Q4_1.gguf"
  "Q4_K_M $M.Q4_K_M.gguf $M.Q4_K_M.gguf"
  "CT-W8A16 $B/ct-w8a16 -"
  "CT-W4A16-g64 $B/ct-w4a16 -"
  "CT-W4A16-g64-actorder $B/ct-w4a16-gidx -"
  "CT-W8A16+lm_head $B/ct-w8a16-head -"
  "CT-W4A16-g64+lm_head $B/ct-w4a16-head -"
  "CT-W8A8-INT8 $B/ct-w8a8-int8 -"
  "CT-FP8-dynamic $B/ct-fp8-dynamic -"
  "CT-FP8-block $B/ct-fp8-block -"
  "CT-FP8-dynamic+lm_head $B/ct-fp8-dynamic-head -"
  "CT-NVFP4 $B/ct-nvfp4 -"
  "CT-NVFP4+lm_head $B/ct-nvfp4-head -"
  "CT-MXFP4 $B/ct-mxfp4 -"
  "CT-MXFP4+lm_head $B/ct-mxfp4-head -"
)
for q in "${LCPP_MIXES[@]}"; do
  f=$B/SmolLM2-135M-Instruct.lcpp-$q.gguf
  [[ -f $f ]] && CONFIGS+=("lcpp-$q $f $f")
done
want() { [[ -z "${MODELS:-}" ]] || [[ " $MODELS " == *" $1 "* ]]; }

: >"$log"
declare -A BW  # thread count -> the DRAM read bandwidths measured, one a repeat (it moves on a shared machine)
for ((rep = 1; rep <= REPEATS; ++rep)); do
  for t in "${THREADS[@]}"; do
    BW[$t]="${BW[$t]:-}$(build/bench/mem_bandwidth "$t" | sed -n 's/.*read \([0-9.]*\) GB\/s.*/\1/p') "
  done
  for cfg in "${CONFIGS[@]}"; do
    read -r label file peer <<<"$cfg"
    want "$label" || continue
    for t in "${THREADS[@]}"; do
      cmd="$OURS --model $file --dtype bf16 --quantized keep --threads $t --pp $PP --tg $TG --reps $REPS --batch $BATCH"
      echo "## rep $rep ours $label t$t load $(cut -d' ' -f1 /proc/loadavg)" >>"$log"
      echo "\$ $cmd" >>"$log"
      OMP_NUM_THREADS=$t $cmd 2>/dev/null >>"$log"
      if [[ $peer != - && "${NO_PEER:-0}" != 1 ]]; then
        cmd="$LLAMA_BENCH -m $peer -p $PP -n $TG -t $t -r $REPS -o csv"
        echo "## rep $rep peer $label t$t load $(cut -d' ' -f1 /proc/loadavg)" >>"$log"
        echo "\$ $cmd" >>"$log"
        $cmd 2>/dev/null >>"$log"
      fi
    done
  done
done

{
  echo "# Decode/prefill on $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p')): tpserve (BF16, GGUF kept quantized, compressed-tensors) vs llama.cpp llama-bench"
  echo
  echo "- date: $(date -u +%FT%TZ); command: \`bench/run_decode_bench.sh ${THREADS[*]}\` with PP=$PP TG=$TG REPS=$REPS REPEATS=$REPEATS BATCH=$BATCH${MODELS:+ MODELS=\"$MODELS\"}"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB;" \
       "flags: $(grep -o -w 'avx2\|avx512f\|avx512bw\|avx512vl\|avx512_vnni\|avx512_bf16\|avx512vbmi\|avx_vnni\|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "- DRAM read (bench/mem_bandwidth, once before each repeat; the roofline takes their median): $(for t in "${THREADS[@]}"; do echo -n "t$t ${BW[$t]% } GB/s; "; done)"
  echo "- llama.cpp: $(cat third_party/llama_cpp_version.txt 2>/dev/null || echo '?'), llama-bench defaults (CPU repack of Q4_0 / Q4_K)"
  echo "- each figure: median of $REPEATS runs made in alternation (ours, the peer, next thread count, next file); the load average before each run is in the log"
  echo "- log with every command line and raw output: $log (copied below)"
  echo
  python3 - "$log" "$(for t in "${THREADS[@]}"; do echo -n "$t:${BW[$t]% },"; done)" <<'EOF'
import re, statistics, sys
log, bws = sys.argv[1], dict(kv.split(':') for kv in sys.argv[2].strip(',').split(','))
bws = {t: statistics.median(float(x) for x in v.split()) for t, v in bws.items()}
ours, peer, loads = {}, {}, []
head = None
for line in open(log):
    line = line.rstrip('\n')
    m = re.match(r'## rep \d+ (ours|peer) (\S+) t(\d+) load ([\d.]+)', line)
    if m:
        head = m.groups(); loads.append(float(head[3])); continue
    if head is None: continue
    kind, label, t = head[0], head[1], head[2]
    if kind == 'ours' and line.startswith('tpserve |'):
        pp = re.search(r'\| pp\d+ ([\d.]+) ±', line); tg = re.search(r'\| tg\d+ ([\d.]+) ±', line)
        bt = re.search(r'bytes/token ([\d.]+) MiB', line)
        d = ours.setdefault((label, t), {'pp': [], 'tg': [], 'mib': 0})
        if pp: d['pp'].append(float(pp.group(1)))
        if tg: d['tg'].append(float(tg.group(1)))
        if bt: d['mib'] = float(bt.group(1))
    elif kind == 'peer' and line.startswith('"'):
        f = next(__import__('csv').reader([line]))
        if f[0] == 'build_commit': continue
        # llama-bench csv: n_prompt, n_gen, avg_ts are named in the header line; find them by position
        peer.setdefault((label, t), []).append(f)
    elif kind == 'peer' and line.startswith('build_commit'):
        peer.setdefault('header', line.split(','))
hdr = peer.get('header')
def peer_rate(label, t, what):
    rows = peer.get((label, t), [])
    if not hdr or not rows: return None
    i_p, i_g, i_ts = hdr.index('n_prompt'), hdr.index('n_gen'), hdr.index('avg_ts')
    v = [float(r[i_ts]) for r in rows if (what == 'pp' and r[i_p] != '0' and r[i_g] == '0') or (what == 'tg' and r[i_g] != '0' and r[i_p] == '0')]
    return statistics.median(v) if v else None
med = lambda v: statistics.median(v) if v else float('nan')
print(f"load average before runs: min {min(loads):.2f}, median {statistics.median(loads):.2f}, max {max(loads):.2f}\n")
for t in sorted({k[1] for k in ours}, key=int):
    bw = float(bws[t])
    print(f"## {t} thread(s), DRAM {bw:.1f} GB/s (median of the readings)\n")
    print("| weights | MiB/token | tg ours | × our BF16 | tg llama.cpp | × llama.cpp | % roofline | pp ours | pp × our BF16 | pp llama.cpp |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = ours.get(('BF16', t))
    for (label, tt), d in ours.items():
        if tt != t: continue
        tg, pp = med(d['tg']), med(d['pp'])
        roof = bw * 1e9 / (d['mib'] * 1048576) if d['mib'] else float('nan')
        ptg, ppp = peer_rate(label, t, 'tg'), peer_rate(label, t, 'pp')
        cmp = ''
        if ptg is None and label.startswith('CT-'):  # the GGUF of the same bits a weight
            ref = 'Q8_0' if ('W8' in label or 'FP8' in label) else 'Q4_0'
            r = peer_rate(ref, t, 'tg')
            cmp = f"({ref}) {tg / r:.2f}" if r else ''
        print(f"| {label} | {d['mib']:.1f} | {tg:.1f} | {tg / med(base['tg']):.2f} | "
              f"{'%.1f' % ptg if ptg else '—'} | {'%.2f' % (tg / ptg) if ptg else cmp or '—'} | {100 * tg / roof:.0f}% | "
              f"{pp:.1f} | {pp / med(base['pp']):.2f} | {'%.1f' % ppp if ppp else '—'} |")
    print()
EOF
  echo
  echo '```'
  cat "$log"
  echo '```'
} >"$out"
echo "wrote $out" >&2

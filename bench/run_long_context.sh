#!/usr/bin/env bash
# Prefill and decode throughput against context depth, tpserve beside llama.cpp, on SmolLM2-135M-Instruct BF16:
#   tpserve:   build/bench/decode_bench --depth D: pp = PP prompt tokens at positions [D, D + PP), tg = TG
#              single-token steps at [D, D + TG) (the D context tokens prefilled once, untimed)
#   llama.cpp: llama-bench -p PP -n TG -d D (the same definition: pp512 @ dD, tg32 @ dD)
# plus the attention kernel alone (build/bench/kv_attention_bench, SmolLM2's attention shape, bf16 KV): the
# tiled kernel the model runs against the naive one it replaced, for decode (1 query token, 30 layer pools in
# turn) and for a PP-token prefill chunk at each depth. Writes bench/results/long-context-<CPU family (bench/cpu_family.sh)>-<UTC date>.md and a
# PNG curve beside it (python3 + matplotlib from a virtualenv the script makes under build/plot_venv; gnuplot
# when that fails and gnuplot is installed; else no PNG, said in the .md).
# plus, with LONG_PP=N (default 4096; 0: skip), one N-token prompt prefilled from depth 0 (pp4096 in llama-bench).
# The attention kernel alone runs on every SIMD path this CPU has (avx512, avx2); the model takes the widest.
#   bench/run_long_context.sh [DEPTH...]   (default: 512 1024 2048 4096 8192 16384)
# env: THREADS=1 PP=512 TG=32 REPS=2 LONG_PP=4096 KERNEL_REPS=5 (the attention kernel alone's best-of); LLAMA_BENCH=path (default third_party/llama.cpp-build/bin/llama-bench,
#      built by tests/peers/build_llama_cpp.sh when missing); SKIP_PEER=1 leaves llama.cpp out.
# Needs: cmake --build build --target decode_bench kv_attention_bench.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEPTHS=("$@")
[[ ${#DEPTHS[@]} -gt 0 ]] || DEPTHS=(512 1024 2048 4096 8192 16384)
THREADS=${THREADS:-1} PP=${PP:-512} TG=${TG:-32} REPS=${REPS:-2} LONG_PP=${LONG_PP:-4096} KERNEL_REPS=${KERNEL_REPS:-5}
M=models/SmolLM2-135M-Instruct.BF16.gguf
OURS=build/bench/decode_bench
KERNEL=build/bench/kv_attention_bench
LLAMA_BENCH=${LLAMA_BENCH:-third_party/llama.cpp-build/bin/llama-bench}
SKIP_PEER=${SKIP_PEER:-0}
[[ -x $OURS && -x $KERNEL ]] || { echo "build decode_bench and kv_attention_bench first" >&2; exit 1; }
if [[ $SKIP_PEER != 1 && ! -x $LLAMA_BENCH ]]; then tests/peers/build_llama_cpp.sh; fi

stamp=$(date -u +%Y%m%d-%H%M)
family=$(bench/cpu_family.sh)
out=bench/results/long-context-$family-$stamp.md
png=bench/results/long-context-$family-$stamp.png
tsv=build/long-context-$stamp.tsv
mkdir -p bench/results build
printf 'depth\tours_pp\tours_tg\tllama_pp\tllama_tg\n' > "$tsv"
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# The mean of "ppN M ± S tok/s" / "tgN M ± S tok/s" in a decode_bench line.
ours_rate() { echo "$1" | tr '|' '\n' | awk -v k="$2" '$1 ~ "^"k"[0-9]+$" {print $2; exit}'; }
# The mean t/s of the ppN / tgN row of llama-bench's markdown table.
peer_rate() {
  echo "$1" | awk -F'|' -v k="$2" '{ t = $(NF - 2); gsub(/ /, "", t) }
    t ~ "^"k"[0-9]+" { r = $(NF - 1); sub(/^ */, "", r); split(r, a, " "); print a[1]; exit }'
}

{
  echo "# Long context: prefill and decode tok/s against depth — tpserve vs llama.cpp (SmolLM2-135M-Instruct BF16)"
  echo
  echo "- date: $(date -u +%FT%TZ)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB;" \
       "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) — a shared machine (other jobs compile on it):" \
       "compare ratios within a row, not absolute numbers across runs"
  flags=$(grep -m1 '^flags' /proc/cpuinfo)
  simd=""
  for f in sse4_2 avx avx2 fma f16c avx512f avx512bw avx512_vnni avx512_bf16 amx_tile; do
    [[ " $flags " == *" $f "* ]] && simd+="$f " || simd+="(no $f) "
  done
  echo "- CPU flags (lscpu/cpuinfo, the SIMD ones): $simd"
  simd_paths=avx2
  [[ " $flags " == *" avx512f "* && " $flags " == *" avx512bw "* && " $flags " == *" avx512vl "* &&
     " $flags " == *" avx512dq "* ]] && simd_paths=avx512,avx2
  attn_rows="${simd_paths%%,*} rows"
  [[ $simd_paths == avx512* && " $flags " == *" amx_tile "* && " $flags " == *" amx_bf16 "* ]] &&
    attn_rows="AMX tiles (kernels/cpu/paged_attention_amx.cpp, AttentionTiling::amx; bf16 KV)"
  echo "- tpserve attention: the tiled flash-style kernel (kernels/cpu/paged_attention_tiled.cpp), $attn_rows" \
       "(runtime dispatch: the widest this CPU has); KV cache bf16 (cache.dtype default), blocks of 16;" \
       "weights BF16; $THREADS thread(s)"
  [[ $SKIP_PEER == 1 ]] || echo "- llama.cpp: $(cat "$(dirname "$LLAMA_BENCH")/../../llama_cpp_version.txt" 2>/dev/null || echo "$LLAMA_BENCH")"
  echo
  echo "## Commands and raw output"
  echo
  echo '```'
  for d in "${DEPTHS[@]}"; do
    cmd="$OURS --model $M --dtype bf16 --threads $THREADS --pp $PP --tg $TG --reps $REPS -d $d"
    echo "\$ OMP_NUM_THREADS=$THREADS $cmd"
    line=$(OMP_NUM_THREADS=$THREADS $cmd 2>/dev/null)
    echo "$line"
    opp=$(ours_rate "$line" pp) otg=$(ours_rate "$line" tg)
    lpp=nan ltg=nan
    if [[ $SKIP_PEER != 1 ]]; then
      cmd="$LLAMA_BENCH -m $M -p $PP -n $TG -d $d -t $THREADS -r $REPS -o md"
      echo "\$ $cmd"
      table=$($cmd 2>/dev/null)
      echo "$table"
      lpp=$(peer_rate "$table" pp) ltg=$(peer_rate "$table" tg)
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$d" "$opp" "$otg" "${lpp:-nan}" "${ltg:-nan}" >> "$tsv"
  done
  if ((LONG_PP > 0)); then
    cmd="$OURS --model $M --dtype bf16 --threads $THREADS --pp $LONG_PP --tg 1 --reps $REPS -d 0"
    echo "\$ OMP_NUM_THREADS=$THREADS $cmd"
    line=$(OMP_NUM_THREADS=$THREADS $cmd 2>/dev/null)
    echo "$line"
    long_ours=$(ours_rate "$line" pp) long_peer=nan
    if [[ $SKIP_PEER != 1 ]]; then
      cmd="$LLAMA_BENCH -m $M -p $LONG_PP -n 0 -t $THREADS -r $REPS -o md"
      echo "\$ $cmd"
      table=$($cmd 2>/dev/null)
      echo "$table"
      long_peer=$(peer_rate "$table" pp)
    fi
  fi
  echo '```'
  echo
  if ((LONG_PP > 0)); then
    echo "## One $LONG_PP-token prompt from depth 0 (pp$LONG_PP, tok/s)"
    echo
    echo "| tpserve | llama.cpp | ratio |"
    echo "|---:|---:|---:|"
    awk -v o="$long_ours" -v l="${long_peer:-nan}" 'BEGIN { r = (l == "nan" || l == "") ? "–" : sprintf("%.2f", o / l);
      printf("| %s | %s | %s |\n", o, l, r) }'
    echo
  fi
  echo "## Summary (tok/s, mean of $REPS repetitions)"
  echo
  echo "| depth | tpserve pp$PP | llama.cpp pp$PP | ratio | tpserve tg$TG | llama.cpp tg$TG | ratio |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  tail -n +2 "$tsv" | awk -F'\t' '{
    rp = ($4 == "nan" || $4 == "") ? "–" : sprintf("%.2f", $2 / $4); rt = ($5 == "nan" || $5 == "") ? "–" : sprintf("%.2f", $3 / $5)
    printf("| %d | %s | %s | %s | %s | %s | %s |\n", $1, $2, $4, rp, $3, $5, rt) }'
  echo
  echo "ratio = tpserve / llama.cpp."
  echo
  echo "## The attention kernel alone: tiled vs naive, one layer, bf16 KV, paths $simd_paths"
  echo
  ctx_dec=$(printf '%s,' "${DEPTHS[@]}"); ctx_dec=${ctx_dec%,}
  ctx_pre=""
  for d in "${DEPTHS[@]}"; do ctx_pre+="$((d + PP)),"; done
  ctx_pre=${ctx_pre%,}
  # decode: 30 layer pools in turn (SmolLM2's layers; their KV is far larger than the caches, as in the model);
  # prefill chunk: one pool.
  for spec in "1 $ctx_dec 30" "$PP $ctx_pre 1"; do
    set -- $spec
    cmd="$KERNEL --threads $THREADS --tokens $1 --contexts $2 --layers $3 --dtypes bf16 --paths $simd_paths --reps $KERNEL_REPS"
    echo '```'
    echo "\$ OMP_NUM_THREADS=$THREADS $cmd"
    echo '```'
    echo
    OMP_NUM_THREADS=$THREADS $cmd
    echo
  done
} | tee "$out"

# The curve.
plot_note=""
venv=build/plot_venv
if { [[ -x $venv/bin/python ]] || python3 -m venv "$venv" >/dev/null 2>&1; } &&
   { $venv/bin/python -c 'import matplotlib' 2>/dev/null || $venv/bin/pip install -q matplotlib >/dev/null 2>&1; }; then
  $venv/bin/python - "$tsv" "$png" "$PP" "$TG" "$THREADS" <<'EOF'
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
tsv, png, pp, tg, threads = sys.argv[1:]
rows = list(csv.DictReader(open(tsv), delimiter="\t"))
f = lambda k: [float(r[k]) if r[k] not in ("", "nan") else float("nan") for r in rows]
d = [int(r["depth"]) for r in rows]
fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
for a, k, title in ((ax[0], "pp", f"prefill pp{pp} @ depth"), (ax[1], "tg", f"decode tg{tg} @ depth")):
    a.plot(d, f("ours_" + k), "o-", label="tpserve (tiled attention)")
    a.plot(d, f("llama_" + k), "s--", label="llama.cpp llama-bench")
    a.set_xscale("log", base=2); a.set_xlabel("context depth (tokens)"); a.set_ylabel("tok/s")
    a.set_title(title); a.grid(True, alpha=0.3); a.legend(); a.set_ylim(bottom=0)
fig.suptitle(f"SmolLM2-135M-Instruct BF16, {threads} thread(s)")
fig.tight_layout(); fig.savefig(png, dpi=110)
EOF
  plot_note="Curve: $(basename "$png") (python3 + matplotlib $($venv/bin/python -c 'import matplotlib; print(matplotlib.__version__)'), virtualenv $venv)."
elif command -v gnuplot >/dev/null; then
  gnuplot <<EOF
set terminal png size 1100,420
set output "$png"
set multiplot layout 1,2 title "SmolLM2-135M-Instruct BF16, $THREADS thread(s)"
set logscale x 2; set xlabel "context depth (tokens)"; set ylabel "tok/s"; set yrange [0:*]; set key top right
set title "prefill pp$PP @ depth"
plot "$tsv" every ::1 using 1:2 with linespoints title "tpserve", "" every ::1 using 1:4 with linespoints title "llama.cpp"
set title "decode tg$TG @ depth"
plot "$tsv" every ::1 using 1:3 with linespoints title "tpserve", "" every ::1 using 1:5 with linespoints title "llama.cpp"
EOF
  plot_note="Curve: $(basename "$png") (gnuplot)."
else
  plot_note="No curve: neither matplotlib (virtualenv) nor gnuplot was available."
fi
printf '\n%s\n\n![tok/s vs depth](%s)\n' "$plot_note" "$(basename "$png")" >> "$out"
echo "wrote $out" >&2

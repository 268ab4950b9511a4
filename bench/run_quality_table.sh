#!/usr/bin/env bash
# The quality table of issue 14: what each quantization costs SmolLM2-135M-Instruct, measured by `tpserve eval`
# against the unquantized base over the held-out text (launch/heldout-text: Python 3.11's Language Reference from
# Debian's python3.11-doc — never the calibration text).
#   rows 1..: the base alone (its perplexity), then the GGUF copies that exist (Q4_1, Q8_0, Q4_K_M, BF16), then
#   every scheme × method of `tpserve quantize` (made from BASE with CALIB; a scheme or method quantize refuses,
#   or a build without `tpserve quantize`, is a row saying so, and the table goes on).
# Columns: weight bytes (the GGUF file, or the *.safetensors of a quantized directory), perplexity, KL(base ||
# model) mean and max in nats, top-1 agreement with the base, seconds to quantize, seconds to evaluate
# (formulas: `tpserve eval --help`). Writes bench/results/quality-<date>.md with the command line and CPU model.
#
#   bench/run_quality_table.sh [--skip-quantize]
# Environment: BASE (models/SmolLM2-135M-Instruct.F32.gguf), CHUNKS (40 windows), CONTEXT (512), THREADS (2),
#   GROUP (64: group size of the grouped int schemes; 128 does not divide SmolLM2's 576 input columns, 64 divides
#   576 and 1536), CALIB (/usr/share/common-licenses/GPL-3), CALIB_TOKENS (4096),
#   TPSERVE (build/launch/tpserve), OUT (bench/results/quality-<date>.md), WORK (a temporary directory),
#   SCHEMES (the quantize schemes to run, space-separated; default every one), GGUF_ROWS (1: the GGUF copies'
#   rows; 0: none), QUANT_FLAGS (extra `tpserve quantize` flags for every row, e.g. "--percdamp 0.1"),
#   PAIRS (instead of SCHEMES x their methods: space-separated SCHEME:METHOD rows, e.g. "w4a16:gptq w3a16:rtn"),
#   PEER_DIRS (directories another tool quantized from the same base, e.g. llm-compressor's from
#   tests/peers/llmcompressor_quality.sh, each with a `.row` file "name|scheme|method|wall s|cpu s": scored by
#   the same `tpserve eval` as extra rows), BASE_ROW (1: the base's own row; 0: none), QUANTIZE_ONLY (1: the
#   quantize rows give bytes and seconds only, no eval — the time-to-produce column alone).
# "quantize s" is wall seconds (CPU seconds, user + sys, in brackets): on a shared machine only the CPU seconds
# compare.
set -euo pipefail
cd "$(dirname "$0")/.."
CMDLINE="$0 $*"
SKIP_QUANTIZE=0
for a in "$@"; do
  case "$a" in
    --skip-quantize) SKIP_QUANTIZE=1 ;;
    *) echo "run_quality_table.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
TPSERVE=${TPSERVE:-build/launch/tpserve}
BASE=${BASE:-models/SmolLM2-135M-Instruct.F32.gguf}
CHUNKS=${CHUNKS:-40}
CONTEXT=${CONTEXT:-512}
THREADS=${THREADS:-2}
GROUP=${GROUP:-64}
CALIB=${CALIB:-/usr/share/common-licenses/GPL-3}
CALIB_TOKENS=${CALIB_TOKENS:-4096}
SCHEMES=${SCHEMES:-w8a16 w4a16 w4a16-asym w3a16 w8a8-int8 fp8-dynamic fp8-weight mxfp4 nvfp4}
GGUF_ROWS=${GGUF_ROWS:-1}
QUANT_FLAGS=${QUANT_FLAGS:-}
PAIRS=${PAIRS:-}
PAIRS_ARG=$PAIRS
PEER_DIRS=${PEER_DIRS:-}
BASE_ROW=${BASE_ROW:-1}
QUANTIZE_ONLY=${QUANTIZE_ONLY:-0}
STAMP=$(date -u +%Y%m%d-%H%M)
OUT=${OUT:-bench/results/quality-$STAMP.md}
WORK=${WORK:-$(mktemp -d)}
TEXT=$WORK/heldout.txt
launch/heldout-text > "$TEXT"
[ -x "$TPSERVE" ] || { echo "run_quality_table.sh: $TPSERVE is not built" >&2; exit 1; }
[ -e "$BASE" ] || { echo "run_quality_table.sh: base model $BASE is missing (launch/setup makes it)" >&2; exit 1; }

EVAL_FLAGS=(--text "$TEXT" --context "$CONTEXT" --max-chunks "$CHUNKS" --threads "$THREADS" --dtype f32
            --kv-cache-dtype f32 --json)
ROWS=()

bytes_of() {  # weight bytes of a GGUF file or of a directory's safetensors
  if [ -d "$1" ]; then find "$1" -name '*.safetensors' -printf '%s\n' | awk '{s += $1} END {print s + 0}'
  else stat -c %s "$1"; fi
}
field() { python3 -c 'import json,sys; j=json.loads(sys.argv[1]); v=j.get(sys.argv[2]); print("" if v is None else (f"{v:.6g}" if isinstance(v, float) else v))' "$1" "$2"; }

write_out() {  # the table so far (rewritten after every row, so a run cut short leaves its rows)
  local state=${1:-"in progress: rows so far"}
  mkdir -p "$(dirname "$OUT")"
  {
  echo "# Quality of quantized SmolLM2-135M-Instruct against its unquantized base"
  echo
  echo "- command: \`CHUNKS=$CHUNKS CONTEXT=$CONTEXT THREADS=$THREADS BASE=$BASE${PAIRS_ARG:+ PAIRS=\"$PAIRS_ARG\"}${PEER_DIRS:+ PEER_DIRS=...} $CMDLINE\`"
  echo "- CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores visible (shared with other jobs)"
  echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M')"
  echo "- build: $("$TPSERVE" version | head -1)"
  echo "- held-out text: Python 3.11 Language Reference, reStructuredText sources from Debian python3.11-doc"
  echo "  (launch/heldout-text), $(wc -c < "$TEXT") bytes; $CHUNKS windows of $CONTEXT tokens, every token after the"
  echo "  first of a window scored ($((CHUNKS * (CONTEXT - 1))) tokens)"
  echo "- eval: \`tpserve eval --model M --ref $BASE ${EVAL_FLAGS[*]}\` (text path aside); GGUF blocks run as they"
  echo "  are served (--quantized keep: quantized kernels, activations rounded to 8 bits per block)"
  echo "- calibration (quantize rows): $CALIB, $CALIB_TOKENS tokens; quantize flags: --threads $THREADS $QUANT_FLAGS"
  [ -z "$PEER_DIRS" ] || echo "- peer rows (made elsewhere, scored here): $PEER_DIRS"
  echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- KL = mean over scored positions of KL(p_base || p_model) in nats; top-1 = fraction of positions whose"
  echo "  argmax equals the base's; perplexity = exp(mean NLL)"
  echo
  echo "| model | scheme | method | weight bytes | perplexity | KL mean | KL max | top-1 | quantize s (CPU s) | eval s |"
  echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${ROWS[@]}"
  echo "- state: $state"
  } > "$OUT"
}

# eval_row NAME SCHEME METHOD MODEL QUANTIZE_S [--no-ref]
eval_row() {
  local name=$1 scheme=$2 method=$3 model=$4 qs=$5 ref=(--ref "$BASE")
  [ "${6:-}" = --no-ref ] && ref=()
  echo "[quality] eval $name" >&2
  local t0 t1 json
  t0=$(date +%s.%N)
  if ! json=$("$TPSERVE" eval --model "$model" "${ref[@]}" "${EVAL_FLAGS[@]}" 2>"$WORK/eval.err" | grep '^{'); then
    ROWS+=("| $name | $scheme | $method | $(bytes_of "$model") | eval failed: $(tail -1 "$WORK/eval.err") | | | | $qs | |")
    write_out
    return
  fi
  t1=$(date +%s.%N)
  local es; es=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}')
  ROWS+=("| $name | $scheme | $method | $(bytes_of "$model") | $(field "$json" perplexity) | $(field "$json" kl_mean) | $(field "$json" kl_max) | $(field "$json" top1_agreement) | $qs | $es |")
  write_out
}

[ "$BASE_ROW" = 1 ] && eval_row base "(f32)" - "$BASE" - --no-ref
for q in Q4_1 Q8_0 Q4_K_M BF16; do
  [ "$GGUF_ROWS" = 1 ] || break
  f=models/SmolLM2-135M-Instruct.$q.gguf
  if [ -e "$f" ] && ! [ "$f" -ef "$BASE" ]; then eval_row "$(basename "$f")" "gguf $q" "llama.cpp blocks" "$f" -; fi
done

# scheme × method of deliverable 4; extra flags per scheme.
declare -A EXTRA=([w4a16]="--group-size $GROUP" [w4a16-asym]="--group-size $GROUP" [w3a16]="--group-size $GROUP")
METHODS_w8a16="rtn gptq"; METHODS_w4a16="rtn gptq awq"; METHODS_w4a16_asym="rtn gptq awq"; METHODS_w3a16="rtn gptq awq"
METHODS_w8a8_int8="rtn gptq smoothquant+gptq"; METHODS_fp8_dynamic="rtn"; METHODS_fp8_weight="rtn"
METHODS_mxfp4="rtn"; METHODS_nvfp4="rtn"
if [ "$SKIP_QUANTIZE" = 1 ]; then
  ROWS+=("| (tpserve quantize rows skipped: --skip-quantize) | | | | | | | | | |")
elif ! "$TPSERVE" quantize --help >/dev/null 2>&1; then
  ROWS+=("| (tpserve quantize rows skipped: this build has no \`tpserve quantize\`) | | | | | | | | | |")
else
  if [ -z "$PAIRS" ]; then
    for scheme in $SCHEMES; do
      var=METHODS_${scheme//-/_}
      for method in ${!var}; do PAIRS+=" $scheme:$method"; done
    done
  fi
  for pair in $PAIRS; do
    scheme=${pair%%:*} method=${pair#*:}
    dir=$WORK/$scheme-${method//+/-}
    echo "[quality] quantize $scheme $method" >&2
    # shellcheck disable=SC2086
    if ! /usr/bin/time -f '%e %U %S' -o "$WORK/q.time" \
         "$TPSERVE" quantize --in "$BASE" --out "$dir" --scheme "$scheme" --method "$method" ${EXTRA[$scheme]:-} \
         --calib "$CALIB" --calib-tokens "$CALIB_TOKENS" --threads "$THREADS" $QUANT_FLAGS >"$WORK/q.out" 2>"$WORK/q.err"; then
      ROWS+=("| $scheme $method | $scheme | $method | | refused: $(grep -v '^Command exited' "$WORK/q.err" | tail -1 | tr '|' '/') | | | | | |")
      write_out
      continue
    fi
    qs=$(awk '{printf "%.0f (%.0f)", $1, $2 + $3}' "$WORK/q.time")
    if [ "$QUANTIZE_ONLY" = 1 ]; then
      ROWS+=("| $scheme $method | $scheme | $method | $(bytes_of "$dir") | (not evaluated: QUANTIZE_ONLY) | | | | $qs | |")
      write_out
    else
      eval_row "$scheme $method" "$scheme" "$method" "$dir" "$qs"
    fi
    rm -rf "$dir"
  done
fi
for d in $PEER_DIRS; do
  IFS='|' read -r pname pscheme pmethod pwall pcpu < "$d/.row"
  eval_row "$pname" "$pscheme" "$pmethod" "$d" "$pwall ($pcpu)"
done

write_out "complete"
echo "wrote $OUT" >&2

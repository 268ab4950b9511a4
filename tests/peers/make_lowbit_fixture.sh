#!/usr/bin/env bash
# Regenerate tests/peers/fixtures/gguf/synth_lowbit.gguf and tests/peers/fixtures/quant_lowbit.json: a synthetic
# model quantized by llama.cpp's llama-quantize as a Q3_K_M mix with one ffn_down each in Q2_K, Q3_K and IQ4_XS and
# the attn_q in IQ4_NL (the types of Q2_K / Q3_K_M / IQ4_XS files no kernel of ours keeps: rank/gguf_requantize.h);
# the 320-column linears fall back to Q4_0 / Q5_0 / Q5_1, the lm_head is Q8_0. The JSON (make_q5_fixture.py, with
# llama.cpp's gguf-py) holds every tensor's type and the block bytes and gguf-py's dequantized values of the first
# rows of one tensor of each of the four types. tests/common/dtype_test.cpp and tests/rank/weight_loader_test.cpp
# read them. CI never runs this script.
# Usage: tests/peers/make_lowbit_fixture.sh   (after tests/peers/build_llama_cpp.sh and make_ct_fixtures.sh's venv)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TPSERVE=${TPSERVE:-build/launch/tpserve}
QUANTIZE=third_party/llama.cpp-build/bin/llama-quantize
GGUF_PY=$(ls -d third_party/llama_cpp_python-*/vendor/llama.cpp/gguf-py | head -1)
PY=third_party/ct_venv/bin/python
OUT=tests/peers/fixtures/gguf/synth_lowbit.gguf
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$TPSERVE" synth --out "$W/S" --layers 3 --hidden 320 --heads 8 --kv-heads 4 --intermediate 768 --vocab 512 --seed 7 \
  >/dev/null
"$TPSERVE" convert --in "$W/S" --out "$W/S.f32.gguf" --to gguf-f32 >/dev/null
types=(--tensor-type blk.0.ffn_down=q2_k --tensor-type blk.1.ffn_down=q3_k --tensor-type blk.2.ffn_down=iq4_xs
       --tensor-type attn_q=iq4_nl)
cmd="tpserve synth --out S --layers 3 --hidden 320 --heads 8 --kv-heads 4 --intermediate 768 --vocab 512 --seed 7;"
cmd+=" tpserve convert --in S --out S.f32.gguf --to gguf-f32; llama-quantize ${types[*]} S.f32.gguf \$OUT Q3_K_M"
"$QUANTIZE" "${types[@]}" "$W/S.f32.gguf" "$OUT" Q3_K_M >/dev/null 2>&1
PYTHONPATH="$GGUF_PY" "$PY" tests/peers/make_q5_fixture.py "$OUT" "$cmd" "$(cat third_party/llama_cpp_version.txt)" \
  Q2_K Q3_K IQ4_NL IQ4_XS > tests/peers/fixtures/quant_lowbit.json
ls -l "$OUT" tests/peers/fixtures/quant_lowbit.json

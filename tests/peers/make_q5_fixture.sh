#!/usr/bin/env bash
# Regenerate tests/peers/fixtures/quant_q5_k_m.json: llama.cpp's own Q5_K_M of SmolLM2 (the BF16 GGUF of
# launch/setup, `llama-quantize BF16 OUT Q5_K_M`: its 576-column linears fall back to Q5_1, the 1536-column
# ffn_down of some layers are Q5_K) summarized by make_q5_fixture.py with llama.cpp's gguf-py (the sdist's
# vendor/llama.cpp/gguf-py, numpy from third_party/ct_venv): every tensor's type, and the block bytes and gguf-py's
# dequantized values of the first rows of one Q5_1 and one Q5_K tensor. tests/common/dtype_test.cpp
# (Dequantize.Q5TypesEqualGgufPy) decodes the same bytes. CI never runs this script.
# Usage: tests/peers/make_q5_fixture.sh   (after tests/peers/build_llama_cpp.sh and tests/peers/make_ct_fixtures.sh's venv)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
QUANTIZE=third_party/llama.cpp-build/bin/llama-quantize
GGUF_PY=$(ls -d third_party/llama_cpp_python-*/vendor/llama.cpp/gguf-py | head -1)
PY=third_party/ct_venv/bin/python
BF16=models/SmolLM2-135M-Instruct.BF16.gguf
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
cmd="$QUANTIZE $BF16 \$OUT Q5_K_M"
"$QUANTIZE" "$BF16" "$W/q5_k_m.gguf" Q5_K_M >/dev/null 2>&1
PYTHONPATH="$GGUF_PY" "$PY" tests/peers/make_q5_fixture.py "$W/q5_k_m.gguf" "$cmd" "$(cat third_party/llama_cpp_version.txt)" \
  > tests/peers/fixtures/quant_q5_k_m.json
ls -l tests/peers/fixtures/quant_q5_k_m.json

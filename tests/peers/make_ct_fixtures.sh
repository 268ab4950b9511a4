#!/usr/bin/env bash
# Regenerate the compressed-tensors fixtures in tests/peers/fixtures/compressed_tensors/: a synthetic Llama
# (2 layers, hidden 256, 8 heads, 4 KV heads, intermediate 512, vocab 512, BF16) quantized by llm-compressor
# into every scheme tpserve loads (one directory each, as llm-compressor saves it), and reference.json:
# transformers + compressed-tensors logits and greedy tokens on each directory (make_ct_fixtures.py says how).
# The virtualenv (~6 GB: torch with its CUDA wheels) lives in third_party/ct_venv (git-ignored) and is made
# once with the pinned versions below; CI never runs this script: it uses the committed fixtures.
# Usage: tests/peers/make_ct_fixtures.sh [SCHEME...]     (no argument: every scheme)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
VENV=third_party/ct_venv
# llmcompressor 0.14.0.1 pulls these; pinned so the fixtures can be made again as they are.
REQS=(llmcompressor==0.14.0.1 compressed-tensors==0.19.0 transformers==5.17.0 torch==2.14.0 datasets==5.2.0
      safetensors==0.8.0 tokenizers==0.23.3)
tests/e2e/venv.sh "$VENV" "${REQS[@]}"

OUT=tests/peers/fixtures/compressed_tensors
mkdir -p "$OUT"
"$VENV/bin/python" tests/peers/make_ct_fixtures.py "$OUT" "$@"
# Keep only what a checkpoint is: config.json and the safetensors (llm-compressor also writes its recipe and
# generation_config.json, which tpserve does not read).
find "$OUT" -name recipe.yaml -delete -o -name generation_config.json -delete
du -sh "$OUT"

#!/usr/bin/env bash
# Regenerate tests/peers/fixtures/gguf/synth_kquants.gguf: a synthetic model (3 layers, hidden 256, 8 heads, 4 KV heads,
# intermediate 1024, vocab 512) quantized by llama.cpp's llama-quantize with its linears in the K-quants tpserve keeps
# since their AVX2 kernels (kernels/cpu/gemm_rows16_kquant_avx2.cpp): attn_q, attn_k Q5_K, attn_v Q3_K, ffn_gate Q2_K,
# ffn_up Q2_K / Q3_K / Q5_K in layers 0 / 1 / 2 (256 columns, whole on every rank); ffn_down (1024 columns: 2
# super-blocks a rank at tp 2, 1 at tp 4) Q5_K / Q2_K / Q3_K in layers 0 / 1 / 2; attn_output (256 columns, cut below a
# super-block at tp 2) Q5_1. tests/rank/CMakeLists.txt runs tp_equivalence on it at tp 2 and 4. CI never runs this
# script.
# Usage: tests/peers/make_kquants_fixture.sh   (after tests/peers/build_llama_cpp.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TPSERVE=${TPSERVE:-build/launch/tpserve}
QUANTIZE=third_party/llama.cpp-build/bin/llama-quantize
OUT=tests/peers/fixtures/gguf/synth_kquants.gguf
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$TPSERVE" synth --out "$W/S" --layers 3 --hidden 256 --heads 8 --kv-heads 4 --intermediate 1024 --vocab 512 --seed 13 \
  >/dev/null
"$TPSERVE" convert --in "$W/S" --out "$W/S.f32.gguf" --to gguf-f32 >/dev/null
"$QUANTIZE" --tensor-type attn_q=q5_k --tensor-type attn_k=q5_k --tensor-type attn_v=q3_k --tensor-type ffn_gate=q2_k \
  --tensor-type 'blk\.0\.ffn_up=q2_k' --tensor-type 'blk\.1\.ffn_up=q3_k' --tensor-type 'blk\.2\.ffn_up=q5_k' \
  --tensor-type 'blk\.0\.ffn_down=q5_k' --tensor-type 'blk\.1\.ffn_down=q2_k' --tensor-type 'blk\.2\.ffn_down=q3_k' \
  --tensor-type attn_output=q5_1 "$W/S.f32.gguf" "$OUT" Q8_0 >/dev/null 2>&1
ls -l "$OUT"

#!/usr/bin/env bash
# Regenerate tests/peers/fixtures/gguf/synth_iq4_q5_1.gguf: a synthetic model (2 layers, hidden 256, 8 heads, 4 KV
# heads, intermediate 512, vocab 512) quantized by llama.cpp's llama-quantize with every linear in a type tpserve
# keeps only since its IQ4_NL / Q5_1 kernels (kernels/cpu/gemm_rows16_avx2.cpp): attn_q, attn_k, ffn_gate IQ4_NL,
# attn_v, attn_output, ffn_up Q5_1, ffn_down IQ4_XS (held as IQ4_NL); 256 and 512 columns cut on whole blocks at tp 2
# and 4. tests/rank/CMakeLists.txt runs tp_equivalence on it at tp 2 and 4. CI never runs this script.
# Usage: tests/peers/make_iq4_q5_1_fixture.sh   (after tests/peers/build_llama_cpp.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TPSERVE=${TPSERVE:-build/launch/tpserve}
QUANTIZE=third_party/llama.cpp-build/bin/llama-quantize
OUT=tests/peers/fixtures/gguf/synth_iq4_q5_1.gguf
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$TPSERVE" synth --out "$W/S" --layers 2 --hidden 256 --heads 8 --kv-heads 4 --intermediate 512 --vocab 512 --seed 11 \
  >/dev/null
"$TPSERVE" convert --in "$W/S" --out "$W/S.f32.gguf" --to gguf-f32 >/dev/null
"$QUANTIZE" --tensor-type attn_q=iq4_nl --tensor-type attn_k=iq4_nl --tensor-type ffn_gate=iq4_nl \
  --tensor-type attn_v=q5_1 --tensor-type attn_output=q5_1 --tensor-type ffn_up=q5_1 --tensor-type ffn_down=iq4_xs \
  "$W/S.f32.gguf" "$OUT" Q8_0 >/dev/null 2>&1
ls -l "$OUT"

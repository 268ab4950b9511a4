#!/usr/bin/env bash
# llm-compressor's rows of the quality table (issue 14, deliverable 4): llm-compressor quantizes OUR base weights
# with OUR calibration tokens and the same scheme; bench/run_quality_table.sh then scores its output with
# `tpserve eval` beside ours (PEER_DIRS=OUT_ROOT/lc-*). Exact commands:
#   tpserve convert --in $BASE --out $OUT_ROOT/base-hf --to hf-f32
#   python: tokenizers on $OUT_ROOT/base-hf/tokenizer.json, encode($CALIB, add_special_tokens=False)[:$CALIB_TOKENS]
#           -> $OUT_ROOT/calib_ids.json (checked against llama.cpp's llama-tokenize on the base GGUF when
#           third_party/llama.cpp-build has it: tests/peers/README.md shows its tokenization equals ours)
#   third_party/ct_venv/bin/python tests/peers/llmcompressor_quality.py $OUT_ROOT/base-hf $OUT_ROOT/calib_ids.json \
#           $SEQ_LEN $OUT_ROOT CASE...
# Environment (defaults = bench/run_quality_table.sh's): TPSERVE (build/launch/tpserve), BASE
# (models/SmolLM2-135M-Instruct.F32.gguf), CALIB (/usr/share/common-licenses/GPL-3), CALIB_TOKENS (4096), SEQ_LEN
# (512, tpserve quantize's --calib-seq-len default), THREADS (2), OUT_ROOT
# (/tmp/tpserve-peer-llmcompressor), CASES (lc-w4a16-g64-gptq lc-w4a16-g64-rtn lc-w8a16-rtn lc-w8a8-sq-gptq; every
# case is listed in llmcompressor_quality.py: RTN and GPTQ for every scheme, SmoothQuant+GPTQ for W8A8,
# AWQ for w4a16 / w4a16-asym / w8a16 / w3a16).
# The virtualenv is tests/peers/make_ct_fixtures.sh's (third_party/ct_venv); CI never runs this.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
TPSERVE=${TPSERVE:-build/launch/tpserve}
BASE=${BASE:-models/SmolLM2-135M-Instruct.F32.gguf}
CALIB=${CALIB:-/usr/share/common-licenses/GPL-3}
CALIB_TOKENS=${CALIB_TOKENS:-4096}
SEQ_LEN=${SEQ_LEN:-512}
export THREADS=${THREADS:-2}
OUT_ROOT=${OUT_ROOT:-/tmp/tpserve-peer-llmcompressor}
CASES=${CASES:-lc-w4a16-g64-gptq lc-w4a16-g64-rtn lc-w8a16-rtn lc-w8a8-sq-gptq}
VENV=third_party/ct_venv
REQS=(llmcompressor==0.14.0.1 compressed-tensors==0.19.0 transformers==5.17.0 torch==2.14.0 datasets==5.2.0
      safetensors==0.8.0 tokenizers==0.23.3)
tests/e2e/venv.sh "$VENV" "${REQS[@]}"
mkdir -p "$OUT_ROOT"
if [ ! -e "$OUT_ROOT/base-hf/model.safetensors" ]; then
  "$TPSERVE" convert --in "$BASE" --out "$OUT_ROOT/base-hf" --to hf-f32
fi
"$VENV/bin/python" - "$OUT_ROOT/base-hf/tokenizer.json" "$CALIB" "$CALIB_TOKENS" "$OUT_ROOT/calib_ids.json" <<'EOF'
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
ids = tok.encode(open(sys.argv[2], encoding="utf-8").read(), add_special_tokens=False).ids
n = int(sys.argv[3])
assert len(ids) >= n, f"{sys.argv[2]} has {len(ids)} tokens, fewer than {n}"
json.dump(ids[:n], open(sys.argv[4], "w"))
print(f"calibration: {n} of {len(ids)} tokens of {sys.argv[2]}")
EOF
LT=third_party/llama.cpp-build/bin/llama-tokenize
if [ -x "$LT" ]; then
  "$LT" -m "$BASE" -f "$CALIB" --ids --log-disable --no-bos 2>/dev/null | tail -1 > "$OUT_ROOT/calib_ids_llama.txt"
  python3 - "$OUT_ROOT/calib_ids.json" "$OUT_ROOT/calib_ids_llama.txt" <<'EOF'
import ast, json, sys
ours = json.load(open(sys.argv[1]))
theirs = ast.literal_eval(open(sys.argv[2]).read().strip())[:len(ours)]
assert ours == theirs, "HF tokenizers and llama.cpp tokenize the calibration text differently"
print(f"calibration ids equal llama.cpp's ({len(ours)} tokens)")
EOF
else
  echo "($LT not built: calibration ids not cross-checked)"
fi
# shellcheck disable=SC2086
"$VENV/bin/python" tests/peers/llmcompressor_quality.py "$OUT_ROOT/base-hf" "$OUT_ROOT/calib_ids.json" "$SEQ_LEN" \
  "$OUT_ROOT" $CASES

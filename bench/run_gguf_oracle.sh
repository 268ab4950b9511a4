#!/usr/bin/env bash
# llama.cpp as the oracle on llama.cpp's own GGUF mixes of SmolLM2 (files CI cannot make: it builds no llama.cpp):
# for each TYPE, `llama-quantize models/SmolLM2-135M-Instruct.BF16.gguf FILE TYPE` (build/bench_models/, shared with
# bench/run_decode_bench.sh), llama.cpp's greedy continuations of tests/peers/greedy_prompts.json on it
# (`tpserve-oracle generate`), then tests/e2e/oracle_test on the same file with its blocks kept
# (TPSERVE_ORACLE_EXTRA): greedy tokens equal up to near-ties, first-position logits within the quantized
# tolerance; and the same file dequantized at load (its exact values, dense F32: no held types, no activation
# rounding of ours), to tell what holding its types in others and our kernels' activation rounding add. Writes bench/results/gguf-oracle-<cpu family>-<stamp>.md with each case's line.
#   bench/run_gguf_oracle.sh [TYPE...]   (default: Q2_K Q3_K_M Q5_K_M IQ4_XS; needs tests/peers/build_llama_cpp.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
QUANTIZE=third_party/llama.cpp-build/bin/llama-quantize
ORACLE=third_party/oracle-build/tpserve-oracle
TEST=build/tests/e2e/oracle_test
for x in $QUANTIZE $ORACLE $TEST; do [[ -x $x ]] || { echo "run_gguf_oracle: $x is missing" >&2; exit 1; }; done
if (($#)); then TYPES=("$@"); else TYPES=(Q2_K Q3_K_M Q5_K_M IQ4_XS); fi
M=models/SmolLM2-135M-Instruct
B=build/bench_models
mkdir -p $B
extra=""
for q in "${TYPES[@]}"; do
  f=$B/SmolLM2-135M-Instruct.lcpp-$q.gguf
  [[ -f $f ]] || $QUANTIZE $M.BF16.gguf $f $q >/dev/null 2>&1
  $ORACLE generate $f tests/peers/greedy_prompts.json $B/lcpp-$q.greedy.json --threads 2 \
    --command "tpserve-oracle generate $f tests/peers/greedy_prompts.json OUT" >/dev/null 2>&1
  extra+="${extra:+;}$f=$PWD/$B/lcpp-$q.greedy.json;$f=$PWD/$B/lcpp-$q.greedy.json=dense"
done
n_base=$($TEST --gtest_list_tests | grep -c '^  ')
filter=$(for ((i = 0; i < 2 * ${#TYPES[@]}; ++i)); do echo -n "*/$((n_base + i)):"; done)
stamp=$(date -u +%Y%m%d-%H%M)
out=bench/results/gguf-oracle-$(bench/cpu_family.sh)-$stamp.md
log=$B/gguf-oracle-$stamp.log
status=0
TPSERVE_ORACLE_EXTRA="$extra" $TEST --gtest_filter="$filter" >"$log" 2>&1 || status=$?
{
  echo "# llama.cpp as the oracle on its own GGUF mixes of SmolLM2 — tpserve with the blocks kept (F32 runtime)"
  echo
  echo "- date: $(date -u +%FT%TZ); command: \`bench/run_gguf_oracle.sh ${TYPES[*]}\`"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p')), $(nproc) cores; code: $(git rev-parse --short HEAD)"
  echo "- llama.cpp: $(cat third_party/llama_cpp_version.txt 2>/dev/null || echo '?')"
  echo "- files: \`$QUANTIZE $M.BF16.gguf FILE TYPE\`; their linears' types, as held (\`tpserve plan\`'s stored_format):"
  for q in "${TYPES[@]}"; do
    echo "  - $q: $(build/launch/tpserve plan --model $B/SmolLM2-135M-Instruct.lcpp-$q.gguf --gpu-mem 80GiB --json |
                    python3 -c 'import json, sys; print(json.load(sys.stdin)["weights"]["stored_format"])')"
  done
  echo "- oracle_test exit status: $status (0: every case within the tolerances); \"kept quantized\" lines: blocks kept"
  echo "  (held as the stored_format says), the others: dequantized at load to F32"
  echo
  echo '```'
  grep -E '^\[oracle\]|Failure|divergence at|FAILED|PASSED' "$log" || true
  echo '```'
} >"$out"
cat "$out"
exit $status

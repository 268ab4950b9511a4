#!/usr/bin/env bash
# A load error on some ranks of a TP group only must end the job with the error, never hang it. The case: an
# FP8 checkpoint with 128 x 128 block scales (`tpserve quantize --scheme fp8-block`) of a synthetic model of
# hidden 576 at tp 3: o_proj's 576 input columns split in slices of 192, ranks 0 and 1 cut a 128-column block and
# refuse the file, while rank 2's slice [384, 576) starts on a block and ends on the file's last (partial) one —
# it loads, and once waited in the next collective for ranks that had gone (and they in MPI_Finalize for it).
# Checks: the job exits non-zero (not by the timeout) within 30 s; rank 2 names rank 0 and its error; a rank
# that failed names the slice and the valid TP degrees; the same checkpoint at tp 1 generates.
#   rank_load_failure_test.sh TPSERVE
set -uo pipefail
TPSERVE=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
"$TPSERVE" synth --out "$tmp/m" --layers 1 --hidden 576 --heads 9 --kv-heads 3 --intermediate 384 --vocab 300 \
  >/dev/null || fail "synth"
"$TPSERVE" quantize --in "$tmp/m" --out "$tmp/q" --scheme fp8-block >/dev/null 2>&1 || fail "quantize fp8-block"
gen() { "$@" --model "$tmp/q" --threads 1 --prompt "hello" --max-tokens 4; }

start=$(date +%s)
gen timeout 60 mpirun --oversubscribe -np 3 "$TPSERVE" generate --tp 3 >"$tmp/log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
echo "tp 3: exit $rc in ${elapsed} s"
grep "tpserve generate" "$tmp/log"
[ $rc != 0 ] && [ $rc != 124 ] && ((elapsed < 30)) || fail "tp 3 did not end with an error in 30 s (exit $rc)"
grep -q "rank 0 of the TP group failed: .*o_proj.weight: column slice \[0, 192) of 576" "$tmp/log" ||
  fail "rank 2 does not name rank 0 and its error"
want="column slice \[192, 384) of 576 does not fall on the 128-column scale blocks: this weight splits by input"
grep -q "$want columns only at tp 1" "$tmp/log" || fail "rank 1's own error is missing"
out=$(gen "$TPSERVE" generate 2>&1) || { echo "$out" | tail -3; fail "tp 1 of the same checkpoint"; }
grep -q "decode:" <<<"$out" || fail "tp 1 generated nothing"
echo "ok: the group's load error ended the job; tp 1 runs"

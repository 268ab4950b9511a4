#!/usr/bin/env bash
# Runs abort_probe on 2 ranks and asserts that mpirun exits non-zero within limit_ms when rank 1 dies
# mid-collective (no hang). Usage: check_no_hang.sh MPIRUN PROBE MODE
set -u
mpirun=$1 probe=$2 mode=$3
limit_ms=15000  # milliseconds; the hard stop below is larger so a hang is reported as such
start=$(date +%s%N)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout -k 5 45 "$mpirun" --oversubscribe -np 2 "$probe" "$mode" >"$log" 2>&1
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$log"
echo "check_no_hang: mode=$mode rc=$rc elapsed=${elapsed_ms}ms"
if ! grep -q "abort_probe: rank 1 dies" "$log"; then echo "FAIL: rank 1 never reached its failure point"; exit 1; fi
if [ "$rc" -eq 0 ]; then echo "FAIL: mpirun exited 0 although rank 1 died"; exit 1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "FAIL: mpirun hung (killed by timeout)"; exit 1; fi
if [ "$elapsed_ms" -gt "$limit_ms" ]; then echo "FAIL: took ${elapsed_ms}ms > ${limit_ms}ms"; exit 1; fi
echo "PASS"

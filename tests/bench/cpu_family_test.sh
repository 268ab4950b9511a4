#!/usr/bin/env bash
# bench/cpu_family.sh names the CPU families the result files are kept by, from /proc/cpuinfo-shaped files.
#   tests/bench/cpu_family_test.sh SOURCE_DIR
set -euo pipefail
SRC=${1:?usage: cpu_family_test.sh SOURCE_DIR}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fail=0
expect() {  # expect WANT VENDOR FAMILY MODEL FLAGS
  printf 'processor\t: 0\nvendor_id\t: %s\ncpu family\t: %s\nmodel\t\t: %s\nmodel name\t: X\nflags\t\t: %s\n\nprocessor\t: 1\nvendor_id\t: %s\ncpu family\t: 99\n' \
    "$2" "$3" "$4" "$5" "$2" > "$tmp/cpuinfo"
  got=$("$SRC/bench/cpu_family.sh" "$tmp/cpuinfo")
  if [[ $got != "$1" ]]; then echo "FAIL: $2 family $3 model $4: got '$got', want '$1'"; fail=1; fi
}
expect zen4 AuthenticAMD 25 17 "fpu avx512f avx512_bf16"      # EPYC 9004 (Genoa)
expect zen4 AuthenticAMD 25 160 "fpu avx512f avx512_bf16"     # 0xa0 (Bergamo)
expect zen3 AuthenticAMD 25 1 "fpu avx2"                      # EPYC 7003 (Milan)
expect zen5 AuthenticAMD 26 2 "fpu avx512f avx512_vp2intersect"  # EPYC 9005 (Turin)
expect zen2 AuthenticAMD 23 49 "fpu avx2"
expect xeon-amx GenuineIntel 6 143 "fpu avx512f amx_bf16 amx_tile"
expect intel GenuineIntel 6 106 "fpu avx512f"                 # Ice Lake: no AMX
expect amd-family24 AuthenticAMD 24 0 "fpu"
# This machine's own: one word, never empty.
own=$("$SRC/bench/cpu_family.sh")
[[ $own =~ ^[a-z0-9-]+$ ]] || { echo "FAIL: this CPU's family '$own' is not one word"; fail=1; }
((fail == 0)) && echo "cpu_family: all cases pass (this CPU: $own)"
exit $fail

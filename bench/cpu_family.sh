#!/usr/bin/env bash
# Prints this CPU's family as the benchmark result files name it (bench/results/<bench>-<family>-<stamp>.md), from
# /proc/cpuinfo's vendor, family and model: AMD family 25 models 0x10-0x1f and 0x60-0xaf zen4, other family 25
# zen3, family 26 zen5, family 23 zen2; Intel with amx_bf16 xeon-amx, other Intel intel; else the vendor id.
#   bench/cpu_family.sh [CPUINFO]   (default /proc/cpuinfo; a file, for the test)
set -euo pipefail
info=${1:-/proc/cpuinfo}
field() { awk -F': *' -v k="$1" '$1 ~ "^"k"[ \t]*$" {print $2; exit}' "$info"; }
vendor=$(field vendor_id) family=$(field "cpu family") model=$(field model)
case "$vendor" in
  AuthenticAMD)
    case "$family" in
      23) echo zen2 ;;
      25) if (( (model >= 0x10 && model <= 0x1f) || (model >= 0x60 && model <= 0xaf) )); then echo zen4; else echo zen3; fi ;;
      26) echo zen5 ;;
      *) echo "amd-family$family" ;;
    esac ;;
  GenuineIntel)
    if grep -m1 '^flags' "$info" | grep -qw amx_bf16; then echo xeon-amx; else echo intel; fi ;;
  *) echo "${vendor:-unknown}" | tr 'A-Z' 'a-z' ;;
esac

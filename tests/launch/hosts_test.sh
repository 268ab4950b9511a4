#!/usr/bin/env bash
# Emulated hosts (launch/hosts, launch/netns-rsh, launch/start --hostfile): a synthetic model at tp 2 across 2
# emulated hosts (network namespaces, TCP between them) produces the tp 1 tokens, and the all-reduce-bound
# prefill of a long prompt slows as the hosts' link bandwidth falls (1gbit vs 5mbit: the 4 all-reduces of
# 630 tokens x 256 x 4 B = 645 KB each (a 2-rank ring sends it once) need >= 4.1 s at 5 Mbit/s, ~21 ms at
# 1 Gbit/s; the test asks for 2x, leaving room for compute slowed by a loaded machine).
# Skips (exit 77) where namespaces cannot be created (not root, no iproute2, no CAP_NET_ADMIN).
#   hosts_test.sh TPSERVE ROOT
set -euo pipefail
TPSERVE=$1 ROOT=$2
export TPSERVE TP_HOSTS_PREFIX=tpht TP_HOSTS_NET=10.78.0
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root: network namespaces need root"
command -v ip >/dev/null && command -v tc >/dev/null || skip "ip/tc (iproute2) missing: run launch/setup"
ip netns add tpht-probe 2>/dev/null || skip "cannot create a network namespace here"
ip netns del tpht-probe
tmp=$(mktemp -d)
cleanup() { "$ROOT/launch/hosts" down >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
"$TPSERVE" synth --out "$tmp/m" --layers 2 --hidden 256 --heads 8 --kv-heads 4 --dtype f32 >/dev/null
gen() { "$@" --model "$tmp/m" --dtype f32 --threads 1 --max-tokens 8 --show-ids; }
ids() { sed -n 's/^output ids: //p'; }
prefill_s() { sed -n 's/^prefill: .* in \([0-9.]*\) s.*/\1/p'; }

one=$(gen "$TPSERVE" generate --prompt "hello world" 2>&1) || { echo "$one"; exit 1; }
"$ROOT/launch/hosts" up 2 --bandwidth 1gbit
"$ROOT/launch/hosts" hostfile >"$tmp/hostfile"
two=$(gen "$ROOT/launch/start" --hostfile "$tmp/hostfile" generate --tp 2 --prompt "hello world" 2>&1) || { echo "$two"; exit 1; }
a=$(ids <<<"$one") b=$(ids <<<"$two")
echo "tp 1:                  $a"
echo "tp 2 across 2 hosts:   $b"
[ -n "$a" ] && [ "$a" = "$b" ] || { echo "FAIL: tp 2 across 2 emulated hosts differs from tp 1"; echo "$two" | tail -20; exit 1; }

long=$(printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 1 14))  # 630 bytes = 630 tokens
fast=$(gen "$ROOT/launch/start" --hostfile "$tmp/hostfile" generate --tp 2 --prompt "$long" 2>&1 | prefill_s)
"$ROOT/launch/hosts" up 2 --bandwidth 5mbit
slow=$(gen "$ROOT/launch/start" --hostfile "$tmp/hostfile" generate --tp 2 --prompt "$long" 2>&1 | prefill_s)
echo "prefill of 630 tokens at tp 2 across 2 hosts: 1gbit ${fast} s, 5mbit ${slow} s"
[ -n "$fast" ] && [ -n "$slow" ] || { echo "FAIL: no prefill time printed"; exit 1; }
python3 -c "import sys; f, s = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if s > 2 * f else 1)" "$fast" "$slow" ||
  { echo "FAIL: prefill at 5mbit (${slow} s) is not > 2 x prefill at 1gbit (${fast} s)"; exit 1; }
echo PASS

#!/usr/bin/env bash
# parallel.rank_memory (issue 16, "too large for one card, shown"): a synthetic model of 62 MiB of f32 weights with
# an 8 MiB KV pool per rank under a 48 MiB per-rank limit is refused at tp 1 with the numbers (weights, KV, what
# is missing, naming parallel.rank_memory), and serves at tp 4 across 4 emulated hosts (launch/hosts), every rank's
# weights + KV pool (its start-up report) under the limit, with the tokens of tp 1 run without the limit.
# Skips (exit 77) where network namespaces cannot be created.
#   rank_memory_test.sh TPSERVE ROOT
set -euo pipefail
TPSERVE=$1 ROOT=$2
export TPSERVE TP_HOSTS_PREFIX=tprm TP_HOSTS_NET=10.79.0
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root: network namespaces need root"
command -v ip >/dev/null && command -v tc >/dev/null || skip "ip/tc (iproute2) missing: run launch/setup"
ip netns add tprm-probe 2>/dev/null || skip "cannot create a network namespace here"
ip netns del tprm-probe
tmp=$(mktemp -d)
cleanup() { "$ROOT/launch/hosts" down >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT
"$TPSERVE" synth --out "$tmp/m" --layers 4 --hidden 512 --heads 8 --kv-heads 4 --intermediate 2048 --dtype f32 >/dev/null
printf 'parallel:\n  rank_memory: 48MiB\ncache:\n  memory_mb: 8\n' >"$tmp/limit.yaml"
printf 'cache:\n  memory_mb: 8\n' >"$tmp/free.yaml"
gen() { "$@" --model "$tmp/m" --dtype f32 --threads 1 --prompt "hello" --max-tokens 6 --show-ids; }

if out=$(gen "$TPSERVE" generate --config "$tmp/limit.yaml" 2>&1); then
  echo "FAIL: tp 1 under a 48 MiB rank limit was not refused"; echo "$out" | tail -5; exit 1
fi
msg=$(grep "parallel.rank_memory" <<<"$out" || true)
echo "tp 1 refused: $msg"
for want in "weights 62" "KV pool 8.00 MiB" "missing"; do
  grep -q "$want" <<<"$msg" || { echo "FAIL: the refusal lacks '$want'"; echo "$out" | tail -5; exit 1; }
done

ref=$(gen "$TPSERVE" generate --config "$tmp/free.yaml" 2>&1 | sed -n 's/^output ids: //p')
"$ROOT/launch/hosts" up 4 --bandwidth 1gbit >/dev/null
"$ROOT/launch/hosts" hostfile >"$tmp/hostfile"
out=$(gen "$ROOT/launch/start" --hostfile "$tmp/hostfile" generate --config "$tmp/limit.yaml" --tp 4 2>&1) ||
  { echo "FAIL: tp 4 across 4 hosts did not run"; echo "$out" | tail -20; exit 1; }
got=$(sed -n 's/^output ids: //p' <<<"$out")
echo "tp 1 (no limit):            $ref"
echo "tp 4 across 4 hosts (48MiB): $got"
[ -n "$ref" ] && [ "$ref" = "$got" ] || { echo "FAIL: tokens differ"; exit 1; }
# "rank r (tp r/4): weights W MiB, KV pool ... (K MiB), ..." from every rank
lines=$(grep -E '^rank [0-9]+ \(tp [0-9]+/4\): weights' <<<"$out" || true)
echo "$lines"
[ "$(wc -l <<<"$lines")" = 4 ] || { echo "FAIL: expected 4 rank reports"; exit 1; }
python3 - "$lines" <<'EOF'
import re, sys
for line in sys.argv[1].splitlines():
    w = float(re.search(r"weights ([0-9.]+) MiB", line).group(1))
    k = float(re.search(r"\(([0-9.]+) MiB\)", line).group(1))
    if not w + k < 48:
        sys.exit(f"FAIL: {line}: {w + k} MiB >= 48 MiB")
print("every rank: weights + KV pool < 48 MiB")
EOF
echo PASS

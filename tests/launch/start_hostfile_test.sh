#!/usr/bin/env bash
# launch/start --hostfile: a bad path (missing, a folder, no host in it) is refused with one clear line and exit 2
# before anything starts, for one job and for serve --dp 2; a good hostfile reaches mpirun (--dry-run), and with
# --dp 2 every replica's launch/start (--dry-run prints their commands).
#   start_hostfile_test.sh TPSERVE REPO_ROOT
set -uo pipefail
export TPSERVE=$1
ROOT=$2
# launch/start runs launch/setup when TPSERVE is missing: never from a test.
[ -x "$TPSERVE" ] || { echo "no tpserve at '$TPSERVE'"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
check() {  # check NAME WANT_RC WANT_STDERR_REGEX ("": none) WANT_STDERR_LINES CMD...
  local name=$1 want_rc=$2 want=$3 want_lines=$4
  shift 4
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" != "$want_rc" ] || { [ -n "$want" ] && ! grep -Eq -- "$want" "$tmp/err"; } || [ "$lines" != "$want_lines" ]; then
    echo "FAIL $name: rc $rc (want $want_rc), $lines stderr line(s) (want $want_lines):"; cat "$tmp/err"
    fails=$((fails + 1))
  else
    echo "ok   $name: $(head -1 "$tmp/err")"
  fi
}
printf '# comment only\n\n' >"$tmp/empty-hosts"
printf 'localhost slots=4\n' >"$tmp/hosts"
missing="$tmp/no such hostfile"
check missing_path 2 "--hostfile '$missing': no such readable file" 1 \
  "$ROOT/launch/start" --hostfile "$missing" generate --prompt hi
check missing_path_dp2 2 "--hostfile '$missing': no such readable file" 1 \
  "$ROOT/launch/start" --hostfile "$missing" serve --dp 2 --tp 1
check folder 2 "--hostfile '$tmp': no such readable file" 1 "$ROOT/launch/start" --hostfile "$tmp" serve --dp 2
check no_host 2 "--hostfile '$tmp/empty-hosts' lists no host" 1 \
  "$ROOT/launch/start" --hostfile="$tmp/empty-hosts" serve --dp 2
check good_single 0 "" 0 "$ROOT/launch/start" --hostfile "$tmp/hosts" --dry-run generate --tp 2 --prompt hi
grep -q -- "mpirun .*--hostfile $tmp/hosts" "$tmp/out" || { echo "FAIL good_single: no --hostfile in: $(cat "$tmp/out")"; fails=$((fails + 1)); }
check good_dp2 0 "" 0 "$ROOT/launch/start" --hostfile "$tmp/hosts" --dry-run serve --dp 2 --tp 1 --port 8123
n=$(grep -c -- "launch/start --hostfile $tmp/hosts serve .*--port 0 --kv-events" "$tmp/out")
[ "$n" = 2 ] && grep -q -- "router .*--port 8123" "$tmp/out" ||
  { echo "FAIL good_dp2: want 2 replica commands with the hostfile and a router on 8123, got:"; cat "$tmp/out"; fails=$((fails + 1)); }
check help 0 "" 0 "$ROOT/launch/start" --help
grep -q -- "--hostfile" "$tmp/out" || { echo "FAIL help: no --hostfile in launch/start --help"; fails=$((fails + 1)); }
((fails == 0)) && echo "all passed"
exit $((fails > 0))

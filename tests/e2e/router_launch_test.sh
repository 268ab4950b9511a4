#!/usr/bin/env bash
# `launch/start serve --dp 2 --tp 1 --restart-replicas` (issue 15, deliverable 1): two replicas, each its own mpirun
# job, and the router in front: /health 2 of 2; a completion through the router; a replica's rank SIGKILLed ->
# the router says 1 of 2 within 5 s, the launcher restarts it on its port and the router takes it back (2 of 2);
# SIGTERM to launch/start -> exit 0 and no replica process left.
# usage: router_launch_test.sh TPSERVE_BINARY REPO_ROOT
set -uo pipefail
export TPSERVE=$1
ROOT=$2
MODEL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LOG_DIR=$(mktemp -d)
pass=0 fail=0
check() { if [ "$2" = 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1 ${3:-}"; fi; }
cfg=$LOG_DIR/cfg.yaml log=$LOG_DIR/launch.log
printf 'model: {path: %s}\nparallel: {threads: 1}\ncache: {memory_mb: 64, max_context: 2048}\nrouter: {health_interval_s: 0.5}\n' "$MODEL" >"$cfg"
"$ROOT/launch/start" serve --dp 2 --tp 1 --restart-replicas --port 0 --config "$cfg" >"$log" 2>&1 &
job=$!
port=""
for _ in $(seq 1 600); do
  port=$(sed -n 's|.*tpserve router at http://[^:]*:\([0-9]*\).*|\1|p' "$log" | head -1)
  [ -n "$port" ] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.2
done
up() { curl -s "http://127.0.0.1:$port/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["replicas_up"])' 2>/dev/null; }
wait_up() {  # wait_up N SECONDS: until N replicas are up (at most SECONDS); prints the seconds it took
  local t0=$(date +%s.%N) end=$(($(date +%s) + $2))
  while [ "$(up)" != "$1" ] && (($(date +%s) < end)); do sleep 0.05; done
  python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$(date +%s.%N)"
}
[ -n "$port" ] && [ "$(up)" = 2 ]
check "launch/start serve --dp 2: the router says 2 of 2 replicas up" $? "$(tail -20 "$log")"
out=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}')
echo "$out" | grep -q '"finish_reason"'
check "a completion through the router" $? "$out"
# a replica's only rank (tp 1): a tpserve serve process of this config (not its mpirun)
victim=$(pgrep -f "^$TPSERVE serve .*$cfg" | head -1)
kill -9 "$victim"
t=$(wait_up 1 10)
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 5 else 1)" "$t"
check "a replica SIGKILLed: the router says 1 of 2 up within 5 s ($t s)" $? "$(up)"
t=$(wait_up 2 60)
[ "$(up)" = 2 ]
check "the launcher restarted it and the router took it back ($t s)" $? "$(tail -20 "$log")"
grep -q "restarting it on port" "$log"
check "  the launcher says it restarted the replica" $? "$(tail -5 "$log")"
kill -TERM $job
( sleep 60; kill -9 $job 2>/dev/null ) & guard=$!
wait $job; rc=$?
kill $guard 2>/dev/null
[ "$rc" = 0 ]
check "SIGTERM to launch/start: exit 0" $? "rc=$rc $(tail -10 "$log")"
sleep 1
left=$(pgrep -f "^$TPSERVE (serve|router) .*$cfg" | wc -l)
[ "$left" = 0 ]
check "no replica or router process left" $? "$left left"
echo "router_launch_test: $pass passed, $fail failed"
((fail == 0))

#!/usr/bin/env bash
# A replica's own death ends its requests (issue 15, deliverable 4, inside one replica), through launch/start:
#  1-2. `launch/start serve` at tp 2 (synthetic model) and tp 3 (SmolLM2): rank 1 SIGKILLed while 3 streamed and
#       2 non-streamed requests run -> every stream ends with an OpenAI error event then `data: [DONE]`, every
#       non-streamed client gets a 503 JSON error, no client is cut or left without a response, and the job
#       exits non-zero within 30 s;
#  3.   SIGTERM to launch/start under load drains like SIGTERM to rank 0: every request completes (finish_reason
#       "length", [DONE] / 200) and launch/start exits 0.
# usage: replica_death_test.sh TPSERVE_BINARY REPO_ROOT SYNTH_DIR
set -uo pipefail
export TPSERVE=$1
ROOT=$2
SYNTH=$3
MODEL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
pass=0 fail=0
check() {  # check NAME CONDITION-EXIT-CODE [detail]
  if [ "$2" = 0 ]; then pass=$((pass + 1)); echo "ok   $1"; else fail=$((fail + 1)); echo "FAIL $1 ${3:-}"; fi
}
cfg=$(mktemp --suffix .yaml) log=$(mktemp) res=$(mktemp)
printf 'model: {chat_template: chatml}\nserver: {step_timeout_s: 60, shutdown_deadline_s: 60}\n' >"$cfg"
port() { sed -n 's|.*serving .* at http://[^:]*:\([0-9]*\).*|\1|p' "$log" | head -1; }
# start_serve MODEL TP: launch/start serve in the background ($job), waits for the port ($p).
start_serve() {
  "$ROOT/launch/start" serve --model "$1" --tp "$2" --port 0 --config "$cfg" >"$log" 2>&1 &
  job=$!
  p=""
  for _ in $(seq 1 600); do p=$(port); [ -n "$p" ] && break; sleep 0.2; done
}
rank_pid() {  # rank_pid MODEL RANK
  local q
  for q in $(pgrep -f "$TPSERVE serve --model $1"); do
    tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$q"; return; }
  done
}
# summary of the clients' ends: "stream:error_done plain:503 ..."
ends() { [ -s "$res" ] || { echo "no results"; return; }; python3 -c 'import json,sys; print(" ".join(r["kind"]+":"+(str(r.get("status")) if r["kind"]=="plain" else r["end"]) for r in json.load(open(sys.argv[1]))))' "$res"; }

kill_test() {  # kill_test MODEL TP NAME
  start_serve "$1" "$2"
  rm -f "$res"
  python3 "$ROOT/tests/e2e/load_clients.py" "$p" 3 2 4000 "$res" &
  clients=$!
  sleep 3
  victim=$(rank_pid "$1" 1)
  t0=$(date +%s)
  [ -n "$victim" ] && kill -9 "$victim"
  ( sleep 60; kill -9 $clients 2>/dev/null ) & guard=$!
  wait $clients
  kill $guard 2>/dev/null
  ( sleep 40; pkill -9 -P $job 2>/dev/null; kill -9 $job 2>/dev/null ) & guard=$!
  wait $job; rc=$?
  kill $guard 2>/dev/null
  elapsed=$(($(date +%s) - t0))
  e=$(ends)
  [ -n "$victim" ] && [ "$e" = "stream:error_done stream:error_done stream:error_done plain:503 plain:503" ]
  check "$3, rank 1 SIGKILLed under load: every stream gets error + [DONE], every plain request 503" $? \
    "($e) $(tail -5 "$log")"
  grep -q '"type": "service_unavailable"' "$res" && grep -q "rank 1" "$res"
  check "$3: the error names rank 1 and is service_unavailable" $? "$(head -c 600 "$res")"
  [ $rc != 0 ] && ((elapsed < 30))
  check "$3: the job exits non-zero (rc $rc) within 30 s (${elapsed} s)" $? "victim '$victim' $(grep -v ' POST \| GET ' "$log" | tail -8)"
}

kill_test "$SYNTH" 2 "tp 2 (synthetic)"
kill_test "$MODEL" 3 "tp 3 (SmolLM2)"

# 3. SIGTERM to launch/start drains
start_serve "$MODEL" 3
rm -f "$res"
python3 "$ROOT/tests/e2e/load_clients.py" "$p" 4 2 48 "$res" &
clients=$!
sleep 2
kill -TERM $job
( sleep 90; kill -9 $clients 2>/dev/null ) & guard=$!
wait $clients
kill $guard 2>/dev/null
( sleep 60; pkill -9 -P $job 2>/dev/null; kill -9 $job 2>/dev/null ) & guard=$!
wait $job; rc=$?
kill $guard 2>/dev/null
e=$(ends)
[ "$e" = "stream:done stream:done stream:done stream:done plain:200 plain:200" ] && [ $rc = 0 ]
check "tp 3: SIGTERM to launch/start under load drains: every request completes, exit 0 (rc $rc)" $? \
  "($e) $(tail -5 "$log")"

rm -f "$cfg" "$log" "$res"
echo "$pass passed, $fail failed"
((fail == 0))

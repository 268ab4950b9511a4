#!/usr/bin/env bash
# launch/start and mpirun as a user meets them:
#  1. the mpirun line launch/start builds (ranks, oversubscribe only when ranks > cores, threads per rank);
#  2. `launch/start generate --tp 3` on the real model prints exactly what tp 1 prints (greedy);
#  3. a rank killed mid-generation makes the job exit non-zero within 30 s, naming the rank — never a hang;
#  4. `tpserve serve` with a rank alive but stopped (SIGSTOP): /health turns 503 once a step makes no progress
#     for server.step_timeout_s, then the job aborts (non-zero, naming the timeout) — never a hang;
#  5. a healthy step much longer than server.step_timeout_s (a long prefill at tp 3, every rank finishing its
#     layers) is not killed: the request is answered and the server stays up.
# usage: launch_test.sh TPSERVE_BINARY REPO_ROOT SYNTH_DIR
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

# 1. flags
cores=$(nproc)
line=$("$ROOT/launch/start" --dry-run generate --tp 3 --model "$MODEL" --prompt hi)
grep -q -- "-np 3 " <<<"$line"; check "dry run: -np 3" $? "$line"
if ((3 > cores)); then grep -q -- "--oversubscribe" <<<"$line"; else ! grep -q -- "--oversubscribe" <<<"$line"; fi
check "dry run: --oversubscribe only when ranks > cores ($cores)" $? "$line"
expect_threads=$((cores >= 3 ? cores / 3 : 1))
grep -q -- "--threads $expect_threads" <<<"$line"; check "dry run: --threads $expect_threads per rank" $? "$line"
line=$("$ROOT/launch/start" --dry-run generate --model "$MODEL" --prompt hi)
! grep -q -- "--oversubscribe" <<<"$line" && grep -q -- "-np 1 " <<<"$line" && grep -q -- "--threads $cores" <<<"$line"
check "dry run: tp 1 from the default config, all cores" $? "$line"
"$ROOT/launch/start" --dry-run generate --tp two --prompt hi >/dev/null 2>&1
[ $? = 2 ]; check "dry run: a bad --tp is refused" $?

# 2. tp 3 == tp 1 through launch/start, exactly: F32 weights (the Q4_1 blocks dequantized) and F32 KV. With the
# blocks kept, each rank rounds its own slice of the activations to int8, and in a BF16 KV pool the summation-
# order differences of tp 3 round to different BF16 values: either flips a near-tie within 24 tokens
# (tp_equivalence covers those paths at their tolerances).
text() { sed '/^prefill:/,$d' | sed '/^$/d'; }
one=$("$TPSERVE" generate --model "$MODEL" --prompt "The three primary colors are" --max-tokens 24 --threads 1 --dtype f32 --kv-cache-dtype f32 --quantized dequantize 2>/dev/null | text)
three=$("$ROOT/launch/start" generate --tp 3 --model "$MODEL" --prompt "The three primary colors are" --max-tokens 24 --dtype f32 --kv-cache-dtype f32 --quantized dequantize 2>/dev/null | text)
[ -n "$one" ] && [ "$one" = "$three" ]; check "launch/start generate --tp 3 prints what tp 1 prints" $? "$(printf '\ntp1: %s\ntp3: %s' "$one" "$three")"

# 3. a dying rank
log=$(mktemp)
start=$(date +%s)
mpirun --oversubscribe -np 2 "$TPSERVE" generate --model "$SYNTH" --tp 2 --prompt "x" --max-tokens 100000 \
  --ignore-eos --threads 1 --dtype f32 >"$log" 2>&1 &
job=$!
victim=""
for _ in $(seq 1 200); do
  for p in $(pgrep -f "$TPSERVE generate --model $SYNTH"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
  done
  [ -n "$victim" ] && grep -q "rank 1 (tp 1/2)" "$log" && break
  sleep 0.1
done
sleep 1
[ -n "$victim" ] && kill -9 "$victim"
( sleep 45; kill -9 $job 2>/dev/null ) & guard=$!
wait $job; rc=$?
kill $guard 2>/dev/null
elapsed=$(($(date +%s) - start))
[ -n "$victim" ] && [ $rc != 0 ] && ((elapsed < 40)) && grep -qiE "rank 1|process rank 1" "$log"
check "killed rank 1: job exits non-zero (rc $rc) in ${elapsed}s naming rank 1" $? "$(tail -5 "$log")"
rm -f "$log"

# 4. a rank that stops responding while alive, under `tpserve serve`
cfg=$(mktemp --suffix=.yaml)
printf 'model: {chat_template: chatml}\nserver: {step_timeout_s: 3}\n' >"$cfg"
log=$(mktemp)
mpirun --oversubscribe -np 2 "$TPSERVE" serve --model "$SYNTH" --tp 2 --port 0 --threads 1 --config "$cfg" >"$log" 2>&1 &
job=$!
port=""
for _ in $(seq 1 300); do
  port=$(grep -o 'serving .* at http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$')
  [ -n "$port" ] && break
  sleep 0.1
done
victim=""
for p in $(pgrep -f "$TPSERVE serve --model $SYNTH"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$p
done
health() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$port/health"; }
# /health 200 while every rank is up: a few tries, so a loaded machine's slow first answer (curl's 2 s) is not
# taken for an unhealthy server.
for _ in 1 2 3 4 5; do
  h0=$(health)
  [ "$h0" = 200 ] && break
  sleep 1
done
[ -n "$victim" ] && kill -STOP "$victim"
curl -s -m 30 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "hi", "max_tokens": 8}' >/dev/null 2>&1 &
saw503=1
for _ in $(seq 1 40); do
  [ "$(health)" = 503 ] && { saw503=0; break; }
  sleep 0.25
done
( sleep 45; kill -9 $job 2>/dev/null ) & guard=$!
start=$(date +%s)
wait $job; rc=$?
kill $guard 2>/dev/null
elapsed=$(($(date +%s) - start))
[ -n "$victim" ] && kill -CONT "$victim" 2>/dev/null
# (On a miss, the server's own words: a fresh-clone CI on a loaded machine once saw 000 here from a single try.)
[ "$h0" = 200 ]; check "serve tp 2: /health 200 while every rank is up" $? \
  "$h0 (port '$port'; log: $(grep -m4 -iE 'error|tpserve|serving|abort' "$log" | tr '\n' ' '))"
check "serve tp 2, rank 1 stopped: /health 503 after server.step_timeout_s" $saw503 "$(tail -3 "$log")"
[ $rc != 0 ] && ((elapsed < 30)) && grep -q "server.step_timeout_s" "$log"
check "serve tp 2, rank 1 stopped: job aborted (rc $rc) in ${elapsed}s naming the timeout" $? "$(tail -5 "$log")"
rm -f "$log"

# 5. a long but healthy step (tp 3 on SmolLM2: collectives every layer) with server.step_timeout_s = 2 (short, so
#    that a fast machine's prefill still outlives it): one step of ~3,600 prompt tokens (a 1,600-token one took
#    2.7 s on a 2-core Xeon once prefill got faster, under the 3 s this check needs)
printf 'model: {chat_template: chatml}\nserver: {step_timeout_s: 2}\nscheduler: {max_num_batched_tokens: 4096}\n' >"$cfg"
log=$(mktemp)
mpirun --oversubscribe -np 3 "$TPSERVE" serve --model "$MODEL" --tp 3 --port 0 --threads 1 --config "$cfg" >"$log" 2>&1 &
job=$!
port=""
for _ in $(seq 1 600); do
  port=$(grep -o 'serving .* at http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$')
  [ -n "$port" ] && break
  sleep 0.1
done
prompt=$(python3 -c 'print(" ".join(["The quick brown fox jumps over the lazy dog."] * 360))')  # ~3,600 tokens
t0=$(date +%s.%N)
code=$(curl -s -o /dev/null -m 300 -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
  -H 'Content-Type: application/json' -d "{\"prompt\": \"$prompt\", \"max_tokens\": 2}")
took=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
h=$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:$port/health")
kill $job 2>/dev/null
wait $job 2>/dev/null
[ "$code" = 200 ] && [ "$h" = 200 ] && ! grep -q "no progress" "$log"
check "serve tp 3, step_timeout_s 2: a ${took} s prefill is answered (200) and /health stays 200" $? \
  "code $code health $h $(tail -3 "$log")"
python3 -c "import sys; sys.exit(0 if $took > 3 else 1)"
check "serve tp 3: that prefill outlived step_timeout_s + 1 s (what a wall-clock watchdog would have killed)" $? \
  "took $took s: too fast here to show it"
rm -f "$log" "$cfg"

echo "$pass passed, $fail failed"
[ $fail = 0 ]

#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-14, -fsanitize=fuzzer,address,undefined) in a separate build dir and
# runs each for FUZZ_SECONDS (default 60) on a copy of the seed corpus. Exits non-zero on any crash.
#   FUZZ_SECONDS=300 tests/fuzz/run_fuzz.sh        BUILD_DIR=/tmp/fz tests/fuzz/run_fuzz.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
jobs="${JOBS:-2}"

CC=clang-14 CXX=clang++-14 cmake -S "$here" -B "$build" -DTPSERVE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$jobs" --target gguf_fuzz safetensors_fuzz

work="$(mktemp -d /tmp/tp_fuzz_XXXXXX)"
trap 'rm -rf "$work"' EXIT
status=0
for target in gguf safetensors; do
  mkdir -p "$work/$target"
  cp "$here/corpus/$target/"* "$work/$target/"
  echo "== ${target}_fuzz for ${seconds}s"
  if ! (cd "$work" && "$build/${target}_fuzz" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
          -timeout=10 -print_final_stats=1 "$work/$target" 2>&1 | tail -n 40); then
    status=1
  fi
  # libFuzzer writes crash-*/leak-*/timeout-*/oom-* reproducers into the working directory.
  if ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* >/dev/null 2>&1; then
    mkdir -p "$build/artifacts"
    cp "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* "$build/artifacts/" 2>/dev/null || true
    echo "${target}_fuzz found a failure; reproducers in $build/artifacts" >&2
    rm -f "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*
    status=1
  fi
done
exit $status

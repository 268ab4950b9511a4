#!/usr/bin/env bash
# Builds the libFuzzer targets (clang-14, -fsanitize=fuzzer,address,undefined) in a separate build dir and
# runs each for FUZZ_SECONDS (default 60) on a copy of its seed corpus (corpus/<target>/ for <target>_fuzz).
# Exits non-zero on any crash.
#   FUZZ_SECONDS=300 tests/fuzz/run_fuzz.sh        BUILD_DIR=/tmp/fz tests/fuzz/run_fuzz.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${BUILD_DIR:-$root/build-fuzz}"
seconds="${FUZZ_SECONDS:-60}"
jobs="${JOBS:-2}"

CC=clang-14 CXX=clang++-14 cmake -S "$here" -B "$build" -DTPSERVE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
targets="gguf safetensors openai_request step_plan config ct_config hf_config"
# shellcheck disable=SC2046  # one --target per word
cmake --build "$build" -j"$jobs" --target $(for t in $targets; do echo "${t}_fuzz"; done)

work="$(mktemp -d /tmp/tp_fuzz_XXXXXX)"
trap 'rm -rf "$work"' EXIT
shopt -s nullglob
status=0
for target in $targets; do
  mkdir -p "$work/$target"
  cp "$here/corpus/$target/"* "$work/$target/"
  echo "== ${target}_fuzz for ${seconds}s"
  if ! (cd "$work" && "$build/${target}_fuzz" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
          -timeout=10 -print_final_stats=1 -artifact_prefix="$work/${target}_fuzz-" "$work/$target" 2>&1 |
          sed '/^###### Recommended dictionary/,/^###### End of recommended dictionary/d' | tail -n 40); then
    status=1
  fi
  # libFuzzer writes <target>_fuzz-{crash,leak,timeout,oom}-<sha1> reproducers under the artifact prefix.
  found=("$work/${target}_fuzz-"{crash,leak,timeout,oom}-*)
  if ((${#found[@]})); then
    mkdir -p "$build/artifacts"
    cp "${found[@]}" "$build/artifacts/"
    echo "${target}_fuzz found a failure; reproducers in $build/artifacts" >&2
    rm -f "${found[@]}"
    status=1
  fi
done
exit $status

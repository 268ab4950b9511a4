#!/usr/bin/env bash
# Build the llama.cpp oracle (peer) from the PyPI sdist of llama-cpp-python (pinned), plus our
# oracle tool (tests/peers/oracle/) linked against that build's libllama.
# Idempotent: skips the download/extract/build steps that are already done.
# Usage: tests/peers/build_llama_cpp.sh            (from anywhere)
#        JOBS=4 tests/peers/build_llama_cpp.sh     (default -j2)
set -euo pipefail

LCP_VERSION=0.3.36
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TP="$ROOT/third_party"
DL="$TP/dl"
SRC_PARENT="$TP/llama_cpp_python-$LCP_VERSION"
SRC="$SRC_PARENT/vendor/llama.cpp"
BUILD="$TP/llama.cpp-build"
ORACLE_BUILD="$TP/oracle-build"
JOBS="${JOBS:-2}"
TARGETS=(llama-tokenize llama-bench llama-server llama-cli llama-simple llama-quantize)

mkdir -p "$TP" "$DL"

# 1. Download the sdist (source only, no deps).
SDIST="$DL/llama_cpp_python-$LCP_VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
  echo "[build_llama_cpp] downloading llama-cpp-python==$LCP_VERSION sdist"
  python3 -m pip download --no-deps --no-binary :all: "llama-cpp-python==$LCP_VERSION" -d "$DL"
fi

# 2. Extract.
if [[ ! -f "$SRC/CMakeLists.txt" ]]; then
  echo "[build_llama_cpp] extracting $SDIST"
  tar -xzf "$SDIST" -C "$TP"
fi

# 3. Version record. The sdist has no git metadata (BUILD_NUMBER=0, BUILD_COMMIT=unknown), so the
#    upstream commit comes from llama-cpp-python's CHANGELOG entry for this release.
LLAMA_VER_BASE="$(sed -n 's/^set(LLAMA_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' "$SRC/CMakeLists.txt" | paste -sd. -)"
GGML_VER_BASE="$(sed -n 's/^set(GGML_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))/\2/p' "$SRC/ggml/CMakeLists.txt" | paste -sd. -)"
UPSTREAM_COMMIT="$(awk -v v="## [$LCP_VERSION]" '$0==v{f=1;next} f&&/^## \[/{exit} f' "$SRC_PARENT/CHANGELOG.md" \
  | grep -o 'ggml-org/llama.cpp@[0-9a-f]*' | head -1 | sed 's/.*@//')"
VERSION_STR="llama-cpp-python $LCP_VERSION vendor/llama.cpp (upstream ggml-org/llama.cpp@${UPSTREAM_COMMIT:-unknown}, llama $LLAMA_VER_BASE, ggml $GGML_VER_BASE)"
echo "$VERSION_STR" > "$TP/llama_cpp_version.txt"

# 4. Build llama.cpp (CPU only, static, offline).
#    AMX is masked out of -march=native: on our build hosts /proc/cpuinfo lists amx_* but AMX tile instructions
#    raise SIGILL (tilezero in ggml's AMX q4_1 kernel). AMX only accelerates quantized matmuls; the F32/BF16
#    fixtures never use it. Explicit -mno-* flags win over -march=native in GCC/Clang regardless of order.
EXTRA_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CONFIG_ID="$LCP_VERSION native noamx"
stamp="$BUILD/.tpserve_built"
all_built() {
  [[ -f "$stamp" && "$(cat "$stamp")" == "$CONFIG_ID" ]] || return 1
  local t
  for t in "${TARGETS[@]}"; do [[ -x "$BUILD/bin/$t" ]] || return 1; done
}
if all_built; then
  echo "[build_llama_cpp] llama.cpp already built in $BUILD (skip)"
else
  t0=$(date +%s)
  cmake -S "$SRC" -B "$BUILD" \
    -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF \
    -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$EXTRA_FLAGS" -DCMAKE_CXX_FLAGS="$EXTRA_FLAGS" \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_NUMBER=0 -DLLAMA_BUILD_COMMIT="${UPSTREAM_COMMIT:-unknown}" \
    -Wno-dev
  cmake --build "$BUILD" -j"$JOBS" --target "${TARGETS[@]}"
  echo "$CONFIG_ID" > "$stamp"
  echo "[build_llama_cpp] llama.cpp build took $(( $(date +%s) - t0 ))s"
fi

# 5. Our oracle tool, a tiny CMake project linking the static libs of the build above.
if [[ -x "$ORACLE_BUILD/tpserve-oracle" && "$ORACLE_BUILD/tpserve-oracle" -nt "$ROOT/tests/peers/oracle/oracle.cpp" \
      && "$ORACLE_BUILD/tpserve-oracle" -nt "$stamp" ]]; then
  echo "[build_llama_cpp] oracle already built (skip)"
else
  cmake -S "$ROOT/tests/peers/oracle" -B "$ORACLE_BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_SRC="$SRC" -DLLAMA_BUILD_DIR="$BUILD"
  cmake --build "$ORACLE_BUILD" -j"$JOBS"
  touch "$ORACLE_BUILD/tpserve-oracle"  # up-to-date relinks keep the old mtime; mark it newer than the stamp
fi

echo "[build_llama_cpp] binaries: $BUILD/bin/{$(IFS=,; echo "${TARGETS[*]}")} $ORACLE_BUILD/tpserve-oracle"
echo "[build_llama_cpp] version: $VERSION_STR"

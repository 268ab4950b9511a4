#!/usr/bin/env bash
# launch/bundle's folder: under 64 MiB; tpserve, mpirun, env.sh and gpu-check in it; no CUDA, NCCL or C runtime
# library carried (the GPU host has them); every other library the programs need resolved from the bundle's
# lib/; the programs run from it, and the bundled mpirun starts ranks through OPAL_PREFIX.
#   bundle_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1 BUILD=$2
OUT=$(mktemp -d)/bundle
trap 'rm -rf "$(dirname "$OUT")"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$SRC/launch/bundle" "$OUT" "$BUILD"
for f in bin/tpserve bin/mpirun env.sh launch/gpu-check launch/gpu_check.py configs/default.yaml MANIFEST; do
  [ -e "$OUT/$f" ] || fail "$f missing"
done
size=$(du -sb "$OUT" | awk '{print $1}')
[ "$size" -lt $((64 * 1024 * 1024)) ] || fail "$size bytes, over 64 MiB"
ls "$OUT/lib" | grep -E '^(libcuda|libcudart|libcublas|libnccl|libc\.so|libm\.so|ld-linux)' && fail "a host-provided library was bundled"
grep -q libdnnl "$OUT/MANIFEST" || fail "oneDNN (libdnnl) not bundled"
grep -q 'libmpi\.so' "$OUT/MANIFEST" || fail "Open MPI's libmpi not bundled"
find "$OUT/openmpi" -name 'mca_btl_vader.so' | grep -q . || fail "Open MPI's shared-memory transport not bundled"
find "$OUT/openmpi" -name '*.so' \( -name '*ucx*' -o -name '*ofi*' \) | grep -q . && fail "a network transport plugin was bundled"

# env.sh unpacks the libraries carried compressed (oneDNN) before anything runs.
( source "$OUT/env.sh" )
[ -e "$OUT/lib/libdnnl.so.3" ] || ls "$OUT"/lib/libdnnl.so.? >/dev/null 2>&1 || fail "env.sh did not unpack oneDNN"

# Every library of every program: host-provided, or from the bundle.
for exe in "$OUT"/bin/*; do
  LD_LIBRARY_PATH="$OUT/lib" ldd "$exe" | awk '/=>/ {print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libutil.so*|libresolv.so*) continue ;;
      libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*) continue ;;
    esac
    [[ "$path" == "$OUT/lib/"* ]] || fail "$(basename "$exe"): $name resolves to $path, not the bundle"
  done
done

# It runs from the bundle, alone and under the bundled mpirun.
(
  source "$OUT/env.sh"
  [ "$OPAL_PREFIX" = "$OUT/openmpi" ] || fail "env.sh: OPAL_PREFIX=$OPAL_PREFIX"
  "$OUT/bin/tpserve" --version | grep -q tpserve || fail "tpserve --version"
  n=$("$OUT/bin/mpirun" --oversubscribe -np 2 "$OUT/bin/tpserve" --version | grep -c tpserve)
  [ "$n" = 2 ] || fail "bundled mpirun started $n ranks, not 2"
)
echo "bundle OK: $size bytes"

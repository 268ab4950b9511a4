#!/usr/bin/env bash
# A virtualenv with pinned packages, created once and reused while its requirement list is unchanged.
# One creation at a time (parallel ctest runs share the build dir).
# usage: venv.sh VENV_DIR REQUIREMENT...       e.g. venv.sh build/tests/e2e/openai_venv openai==1.109.1
set -euo pipefail
VENV=${1:?usage: $0 VENV_DIR REQUIREMENT...}
shift
(($# > 0)) || { echo "usage: $0 VENV_DIR REQUIREMENT..." >&2; exit 2; }
want="$*"
ready() { [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.requirements" 2>/dev/null)" = "$want" ]; }
if ready; then echo "reusing $VENV ($want)"; exit 0; fi
exec 9>"$VENV.lock"
flock 9
if ready; then exit 0; fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"
echo "$want" >"$VENV/.requirements"
echo "created $VENV ($want)"

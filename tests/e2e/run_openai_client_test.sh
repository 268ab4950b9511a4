#!/usr/bin/env bash
# The `openai` Python client against `tpserve serve` (tests/e2e/openai_client_test.py, structured_output_test.py).
# usage: run_openai_client_test.sh setup VENV_DIR                    create VENV_DIR with openai==$OPENAI_VERSION
#                                                                    and jsonschema==$JSONSCHEMA_VERSION (reused
#                                                                    when it already has those versions)
#        run_openai_client_test.sh run VENV_DIR TPSERVE_BIN REPO_ROOT  run the test with the venv's python
#        run_openai_client_test.sh run-structured VENV_DIR TPSERVE_BIN REPO_ROOT   structured_output_test.py
set -euo pipefail
OPENAI_VERSION=1.109.1
JSONSCHEMA_VERSION=4.23.0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mode=${1:?usage: $0 setup|run VENV_DIR [TPSERVE_BIN REPO_ROOT]}
VENV=${2:?missing VENV_DIR}

have_venv() {
  [ -x "$VENV/bin/python" ] &&
    "$VENV/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null &&
    "$VENV/bin/python" -c "import jsonschema" 2>/dev/null
}

case "$mode" in
  setup)
    exec "$HERE/venv.sh" "$VENV" "openai==$OPENAI_VERSION" "jsonschema==$JSONSCHEMA_VERSION"
    ;;
  run | run-structured)
    TPSERVE=${3:?missing TPSERVE_BIN}
    ROOT=${4:?missing REPO_ROOT}
    MODEL=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
    [ -f "$MODEL" ] || { echo "missing $MODEL (run launch/setup)" >&2; exit 1; }
    have_venv || { echo "no openai $OPENAI_VERSION in $VENV: run '$0 setup $VENV' first" >&2; exit 1; }
    script=openai_client_test.py
    [ "$mode" = run-structured ] && script=structured_output_test.py
    exec "$VENV/bin/python" -u "$HERE/$script" "$TPSERVE" "$MODEL"
    ;;
  *)
    echo "usage: $0 setup|run|run-structured VENV_DIR [TPSERVE_BIN REPO_ROOT]" >&2
    exit 2
    ;;
esac

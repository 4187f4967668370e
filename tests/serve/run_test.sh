#!/usr/bin/env bash
# ctest serve.e2e: the venv (tests/serve/venv, cached), then serve_e2e_test.py.
# Usage: run_test.sh TRAINER_BINARY SERVE_BINARY
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$("${here}/venv")"
exec "${python}" "${here}/serve_e2e_test.py" "$@"

#!/usr/bin/env bash
# ctest tensorboard.events: the venv (tests/tensorboard/venv, cached), then
# tensorboard_test.py. Usage: run_test.sh TRAINER_BINARY
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$("${here}/venv")"
exec "${python}" "${here}/tensorboard_test.py" "$@"

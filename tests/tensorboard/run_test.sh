#!/usr/bin/env bash
# ctest tensorboard.events / tensorboard.page: the venv (tests/tensorboard/venv, cached),
# then tensorboard_test.py (or $KT_TENSORBOARD_TEST: page_test.py).
# Usage: run_test.sh TRAINER_BINARY [ARGS...]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$("${here}/venv")"
exec "${python}" "${here}/${KT_TENSORBOARD_TEST:-tensorboard_test.py}" "$@"

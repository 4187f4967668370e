#!/usr/bin/env bash
# ctest onnx.export: the venv (tests/onnx/venv, cached), then onnx_export_test.py.
# Usage: run_test.sh TRAINER_BINARY
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="$("${here}/venv")"
exec "${python}" "${here}/onnx_export_test.py" "$@"

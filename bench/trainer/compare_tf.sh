#!/usr/bin/env bash
# Wide & Deep, kubetrain-trainer vs TensorFlow CPU, same data, model, batch size, optimizer
# and thread count, side by side in one run. Needs `pip install tensorflow-cpu`.
# Usage: compare_tf.sh <path to kubetrain-trainer> [threads] [steps]
set -euo pipefail
trainer="$1"
threads="${2:-1}"
steps="${3:-200}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
common=(--batch-size 512 --layers 1024,512,256 --embedding-dim 16 --optimizer adagrad --lr 0.05)

"${trainer}" --data-dir "${work}/data" --generate-data 200000 --generate-eval 20000 --steps 0 \
  --no-eval --termination-log /dev/null --threads "${threads}" "${common[@]}" >/dev/null 2>&1
"${trainer}" --data-dir "${work}/data" --steps "${steps}" --threads "${threads}" \
  --log-every 0 --termination-log "${work}/kt.json" "${common[@]}" >"${work}/kt.log" 2>&1
python3 "${here}/tf_wide_deep.py" --train "${work}/data/train.tsv" --eval "${work}/data/eval.tsv" \
  --steps "${steps}" --threads "${threads}" --lr 0.05 >"${work}/tf.json" 2>"${work}/tf.log" || {
  cat "${work}/tf.log" >&2
  exit 1
}
python3 - "${work}/kt.json" "${work}/tf.json" "${threads}" "${steps}" <<'PY'
import json, sys
kt, tf = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
print(f"threads {sys.argv[3]}, {sys.argv[4]} steps of batch 512, layers 1024,512,256, embedding dim 16, Adagrad 0.05")
print(f"kubetrain-trainer: {kt['samples_per_second']:.0f} samples/s, eval AUC {kt['eval']['auc']:.4f}")
print(f"TensorFlow {tf['tensorflow']}: {tf['samples_per_second']:.0f} samples/s, eval AUC {tf['auc']:.4f}")
print(f"kubetrain / TensorFlow: {kt['samples_per_second'] / tf['samples_per_second']:.2f}x samples/s")
PY

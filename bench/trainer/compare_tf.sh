#!/usr/bin/env bash
# Wide & Deep, kubetrain-trainer vs TensorFlow CPU, same data, model, batch size, optimizer
# and thread count, side by side in one run. The two alternate for `reps` rounds and the
# medians are compared, so load drifting on a shared machine hits both alike.
# Needs `pip install tensorflow-cpu`.
# Usage: compare_tf.sh <path to kubetrain-trainer> [threads] [steps] [reps]
set -euo pipefail
trainer="$1"
threads="${2:-1}"
steps="${3:-200}"
reps="${4:-3}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
common=(--batch-size 512 --layers 1024,512,256 --embedding-dim 16 --optimizer adagrad --lr 0.05)

"${trainer}" --data-dir "${work}/data" --generate-data 200000 --generate-eval 20000 --steps 0 \
  --no-eval --termination-log /dev/null --threads "${threads}" "${common[@]}" >/dev/null 2>&1
for r in $(seq 1 "${reps}"); do
  "${trainer}" --data-dir "${work}/data" --steps "${steps}" --threads "${threads}" \
    --log-every 0 --termination-log "${work}/kt.${r}.json" "${common[@]}" >"${work}/kt.log" 2>&1
  python3 "${here}/tf_wide_deep.py" --train "${work}/data/train.tsv" --eval "${work}/data/eval.tsv" \
    --steps "${steps}" --threads "${threads}" --lr 0.05 >"${work}/tf.${r}.json" 2>"${work}/tf.log" || {
    cat "${work}/tf.log" >&2
    exit 1
  }
done
python3 - "${work}" "${reps}" "${threads}" "${steps}" <<'PY'
import json, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
kt = [json.load(open(f"{work}/kt.{r}.json")) for r in range(1, reps + 1)]
tf = [json.load(open(f"{work}/tf.{r}.json")) for r in range(1, reps + 1)]
kt_sps = statistics.median(k["samples_per_second"] for k in kt)
tf_sps = statistics.median(t["samples_per_second"] for t in tf)
print(f"threads {sys.argv[3]}, {sys.argv[4]} steps of batch 512, layers 1024,512,256, "
      f"embedding dim 16, Adagrad 0.05, median of {reps} alternating runs")
print(f"kubetrain-trainer: {kt_sps:.0f} samples/s, eval AUC {kt[0]['eval']['auc']:.4f}")
print(f"TensorFlow {tf[0]['tensorflow']}: {tf_sps:.0f} samples/s, eval AUC {tf[0]['auc']:.4f}")
print(f"kubetrain / TensorFlow: {kt_sps / tf_sps:.2f}x samples/s")
PY

#!/usr/bin/env bash
# Wide & Deep, kubetrain-trainer vs TensorFlow CPU, same data, model, batch size, optimizer
# and thread count, side by side in one run. The runs alternate for `reps` rounds (each
# kubetrain precision, then TensorFlow) and the medians are compared, so load drifting on a
# shared machine hits all alike; the ratio is the median of the per-round ratios.
# TensorFlow: PYTHON names the interpreter; by default the pinned venv of bench/trainer/tf_venv
# (tensorflow-cpu 2.21.0, made once and cached).
# PROFILE=criteo-kaggle (environment) trains on LINES (default 1000000) lines of
# --generate-profile criteo-kaggle, TensorFlow hashing each field into its Kaggle cardinality
# (33.8M embedding rows in all, as a Keras model must allocate them), and prints both sides'
# peak RSS (/usr/bin/time) and its ratio.
# Usage: compare_tf.sh <path to kubetrain-trainer> [threads] [steps] [reps] [precisions]
#   precisions: kubetrain's --precision values to run, e.g. "fp32 bf16" (default fp32)
set -euo pipefail
trainer="$1"
threads="${2:-1}"
steps="${3:-200}"
reps="${4:-3}"
precisions="${5:-fp32}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-$("${here}/tf_venv")}"
profile="${PROFILE:-small}"
lines="${LINES:-200000}"
[[ "${profile}" == criteo-kaggle ]] && lines="${LINES:-1000000}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
common=(--batch-size 512 --layers 1024,512,256 --embedding-dim 16 --optimizer adagrad --lr 0.05)

"${trainer}" --data-dir "${work}/data" --generate-data "${lines}" --generate-eval 20000 --steps 0 \
  --generate-profile "${profile}" \
  --no-eval --termination-log /dev/null --threads "${threads}" --metrics-port 0 "${common[@]}" \
  >/dev/null 2>&1
for r in $(seq 1 "${reps}"); do
  for p in ${precisions}; do
    /usr/bin/time -f %M -o "${work}/kt.${p}.${r}.rss" \
      "${trainer}" --data-dir "${work}/data" --steps "${steps}" --threads "${threads}" \
      --precision "${p}" --metrics-port 0 --log-every 0 --termination-log "${work}/kt.${p}.${r}.json" \
      "${common[@]}" >"${work}/kt.log" 2>&1 || {
      cat "${work}/kt.log" >&2
      exit 1
    }
  done
  /usr/bin/time -f %M -o "${work}/tf.${r}.rss" \
    "${python}" "${here}/tf_wide_deep.py" --train "${work}/data/train.tsv" --eval "${work}/data/eval.tsv" \
    --steps "${steps}" --threads "${threads}" --lr 0.05 --profile "${profile}" \
    >"${work}/tf.${r}.json" 2>"${work}/tf.log" || {
    cat "${work}/tf.log" >&2
    exit 1
  }
done
"${python}" - "${work}" "${reps}" "${threads}" "${steps}" "${precisions}" "${profile}" "${lines}" <<'PY'
import json, statistics, sys
work, reps, precisions = sys.argv[1], int(sys.argv[2]), sys.argv[5].split()
rss = lambda path: int(open(path).read().split()[-1]) * 1024  # /usr/bin/time's KiB
tf_rss = [rss(f"{work}/tf.{r}.rss") for r in range(1, reps + 1)]
med = statistics.median
tf = [json.load(open(f"{work}/tf.{r}.json")) for r in range(1, reps + 1)]
print(f"{sys.argv[6]} profile, {sys.argv[7]} lines; threads {sys.argv[3]}, {sys.argv[4]} steps of "
      f"batch 512, layers 1024,512,256, embedding dim 16, Adagrad 0.05, median of {reps} "
      f"alternating rounds")
# Samples per CPU-second (all threads, the training steps only) next to samples/s: on a
# machine shared with other work the wall-clock rate mostly says how much CPU the
# scheduler gave each run; the CPU rate is what the work cost.
cpu = lambda j: j.get("samples_per_cpu_second", float("nan"))
print(f"TensorFlow {tf[0]['tensorflow']}: {med(t['samples_per_second'] for t in tf):.0f} samples/s "
      f"({med(cpu(t) for t in tf):.0f} per CPU-second), eval AUC {med(t['auc'] for t in tf):.4f}, "
      f"peak RSS {med(tf_rss) / 1e6:.0f} MB")
lines = []
for p in precisions:
    kt = [json.load(open(f"{work}/kt.{p}.{r}.json")) for r in range(1, reps + 1)]
    ratio = med(k["samples_per_second"] / t["samples_per_second"] for k, t in zip(kt, tf))
    cpu_ratio = med(cpu(k) / cpu(t) for k, t in zip(kt, tf))
    auc = med(k["eval"]["auc"] for k in kt)
    kt_rss = [rss(f"{work}/kt.{p}.{r}.rss") for r in range(1, reps + 1)]
    print(f"kubetrain-trainer --precision {p}: {med(k['samples_per_second'] for k in kt):.0f} "
          f"samples/s ({med(cpu(k) for k in kt):.0f} per CPU-second), eval AUC {auc:.4f} "
          f"({auc - med(t['auc'] for t in tf):+.4f} vs TensorFlow), peak RSS {med(kt_rss) / 1e6:.0f} MB")
    lines.append(f"kubetrain --precision {p} / TensorFlow: {ratio:.2f}x samples/s, "
                 f"{cpu_ratio:.2f}x samples per CPU-second, {med(kt_rss) / med(tf_rss):.2f}x peak RSS")
print("\n".join(lines))
PY

#!/usr/bin/env bash
# Wide & Deep, kubetrain-trainer vs TensorFlow CPU, same data, model, batch size, optimizer,
# precision and thread count, side by side in one run. The runs alternate for `reps` rounds (per
# precision, kubetrain then TensorFlow; TensorFlow's bf16 is Keras' mixed_bfloat16) and the
# medians are compared, so load drifting on a shared machine hits all alike; the ratio is the
# median of the per-round ratios.
# TensorFlow: PYTHON names the interpreter; by default the pinned venv of bench/trainer/tf_venv
# (tensorflow-cpu 2.21.0, made once and cached).
# PROFILE=criteo-kaggle (environment) trains on LINES (default 1000000) lines of
# --generate-profile criteo-kaggle, TensorFlow hashing each field into its Kaggle cardinality
# (33.8M embedding rows in all, as a Keras model must allocate them), and prints both sides'
# peak RSS (/usr/bin/time) and its ratio.
# DATA=DIR (environment) trains on DIR/train.tsv and evaluates on DIR/eval.tsv instead of
# generating (e.g. the data directory criteo_kaggle_bench.sh kept), so a 10M-line file is not
# made twice; LINES then only labels the output.
# TABLES=sparse|keras (default sparse): how TensorFlow updates its embedding tables
# (tf_wide_deep.py's --tables: its sparse Adagrad kernel, or Keras 3's Adagrad, which reads the
# whole table each step).
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
tables="${TABLES:-sparse}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
data="${DATA:-${work}/data}"
common=(--batch-size 512 --layers 1024,512,256 --embedding-dim 16 --optimizer adagrad --lr 0.05)

if [[ -z "${DATA:-}" ]]; then
  "${trainer}" --data-dir "${data}" --generate-data "${lines}" --generate-eval 20000 --steps 0 \
    --generate-profile "${profile}" \
    --no-eval --termination-log /dev/null --threads "${threads}" --metrics-port 0 "${common[@]}" \
    >/dev/null 2>&1
fi
[[ -f "${data}/train.tsv" && -f "${data}/eval.tsv" ]] || {
  echo "compare_tf.sh: no ${data}/train.tsv and eval.tsv" >&2
  exit 2
}
for r in $(seq 1 "${reps}"); do
  for p in ${precisions}; do
    /usr/bin/time -f %M -o "${work}/kt.${p}.${r}.rss" \
      "${trainer}" --data-dir "${data}" --steps "${steps}" --threads "${threads}" \
      --precision "${p}" --metrics-port 0 --log-every 0 --termination-log "${work}/kt.${p}.${r}.json" \
      "${common[@]}" >"${work}/kt.log" 2>&1 || {
      cat "${work}/kt.log" >&2
      exit 1
    }
    /usr/bin/time -f %M -o "${work}/tf.${p}.${r}.rss" \
      "${python}" "${here}/tf_wide_deep.py" --train "${data}/train.tsv" --eval "${data}/eval.tsv" \
      --steps "${steps}" --threads "${threads}" --lr 0.05 --profile "${profile}" --tables "${tables}" \
      --precision "${p}" --parsed "${work}" >"${work}/tf.${p}.${r}.json" 2>"${work}/tf.log" || {
      cat "${work}/tf.log" >&2
      exit 1
    }
  done
done
"${python}" - "${work}" "${reps}" "${threads}" "${steps}" "${precisions}" "${profile}" "${lines}" <<'PY'
import json, statistics, sys
work, reps, precisions = sys.argv[1], int(sys.argv[2]), sys.argv[5].split()
rounds = range(1, reps + 1)
rss = lambda path: int(open(path).read().split()[-1]) * 1024  # /usr/bin/time's KiB
med = statistics.median
print(f"{sys.argv[6]} profile, {sys.argv[7]} lines; threads {sys.argv[3]}, {sys.argv[4]} steps of "
      f"batch 512, layers 1024,512,256, embedding dim 16, Adagrad 0.05, median of {reps} "
      f"alternating rounds")
# Samples per CPU-second (all threads, the training steps only) next to samples/s: on a
# machine shared with other work the wall-clock rate mostly says how much CPU the
# scheduler gave each run; the CPU rate is what the work cost.
cpu = lambda j: j.get("samples_per_cpu_second", float("nan"))
kt = {p: [json.load(open(f"{work}/kt.{p}.{r}.json")) for r in rounds] for p in precisions}
tf = {p: [json.load(open(f"{work}/tf.{p}.{r}.json")) for r in rounds] for p in precisions}
kt_rss = {p: med(rss(f"{work}/kt.{p}.{r}.rss") for r in rounds) for p in precisions}
tf_rss = {p: med(rss(f"{work}/tf.{p}.{r}.rss") for r in rounds) for p in precisions}
lines = []
for p in precisions:
    t, k = tf[p], kt[p]
    tf_auc, kt_auc = med(x["auc"] for x in t), med(x["eval"]["auc"] for x in k)
    print(f"TensorFlow {t[0]['tensorflow']} {p}: {med(x['samples_per_second'] for x in t):.0f} samples/s "
          f"({med(cpu(x) for x in t):.0f} per CPU-second), eval AUC {tf_auc:.4f}, peak RSS "
          f"{tf_rss[p] / 1e6:.0f} MB ({med(x['rss_after_training_bytes'] for x in t) / 1e6:.0f} MB after "
          f"training), tables {t[0]['tables']}")
    print(f"kubetrain-trainer --precision {p}: {med(x['samples_per_second'] for x in k):.0f} "
          f"samples/s ({med(cpu(x) for x in k):.0f} per CPU-second), eval AUC {kt_auc:.4f} "
          f"({kt_auc - tf_auc:+.4f} vs TensorFlow {p}), peak RSS {kt_rss[p] / 1e6:.0f} MB")
    # Against TensorFlow at the same precision and, for bf16, against its fp32 too (the
    # figure a user moving from an fp32 TensorFlow job sees).
    for q in dict.fromkeys([p, "fp32"]):
        if q not in tf:
            continue
        ratio = med(a["samples_per_second"] / b["samples_per_second"] for a, b in zip(k, tf[q]))
        cpu_ratio = med(cpu(a) / cpu(b) for a, b in zip(k, tf[q]))
        lines.append(f"kubetrain --precision {p} / TensorFlow {q}: {ratio:.2f}x samples/s, "
                     f"{cpu_ratio:.2f}x samples per CPU-second, AUC {kt_auc - med(x['auc'] for x in tf[q]):+.4f}, "
                     f"{kt_rss[p] / tf_rss[q]:.2f}x peak RSS")
print("\n".join(lines))
PY

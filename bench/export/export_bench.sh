#!/usr/bin/env bash
# ONNX export cost of the default models: the time `kubetrain-trainer --export` takes to read
# the trained model back from its checkpoint and write model.onnx + model.json, and the size
# of model.onnx.
#
#   bench/export/export_bench.sh [BUILD_DIR]    (default build/release; needs kubetrain-trainer)
# Environment: KT_BENCH_RUNS (default 5) exports of each model, alternating between the two.
#
# Models: the trainer's defaults (--layers 1024,512,256; Wide & Deep with --embedding-dim 16
# on generated Criteo data, 200 values per categorical field, so ~5,200 embedding rows; an
# MLP over 13 dense features, 2 classes), trained for a few steps into a checkpoint once.
# Each export is one process, timed by /usr/bin/time (wall and user + sys CPU: process start,
# checkpoint read, ONNX write, fsync) and by the trainer's own log line (read + write only,
# wall). On a shared machine the CPU figure is the steady one. Prints medians last.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${root}/build/release}"
runs="${KT_BENCH_RUNS:-5}"
trainer="${build}/trainer/kubetrain-trainer"
[[ -x ${trainer} ]] || { echo "build kubetrain-trainer in ${build}" >&2; exit 1; }
work="$(mktemp -d /tmp/kubetrain-export-bench.XXXXXX)"
trap 'rm -rf "${work}"' EXIT
export OMP_WAIT_POLICY=passive
common=(--threads 1 --metrics-port 0 --termination-log "" --log-every 0 --no-eval)
wd=(--model wide_deep --data-dir "${work}/criteo")
mlp=(--model mlp --data-format dense_csv --num-features 13 --num-classes 2 --data-dir "${work}/dense")

echo "training the default models for a few steps (once)" >&2
"${trainer}" "${wd[@]}" "${common[@]}" --generate-data 50000 --steps 20 \
  --output "${work}/wd" >"${work}/wd-train.log" 2>&1 || { cat "${work}/wd-train.log"; exit 1; }
mkdir -p "${work}/dense"
python3 - "${work}/dense/train.csv" <<'PY'
import random, sys
random.seed(3)
with open(sys.argv[1], "w") as f:
    for _ in range(20000):
        x = [random.gauss(0, 1) for _ in range(13)]
        f.write("%d,%s\n" % (sum(x[:4]) > 0, ",".join("%.5f" % v for v in x)))
PY
"${trainer}" "${mlp[@]}" "${common[@]}" --batch-size 128 --steps 20 \
  --output "${work}/mlp" >"${work}/mlp-train.log" 2>&1 || { cat "${work}/mlp-train.log"; exit 1; }

# export_once <name> <flags...>: one timed export; appends "wall user sys in_process bytes
# rows" to <name>.txt.
export_once() {
  local name="$1" out="${work}/x-$1"
  shift
  rm -rf "${out}"
  /usr/bin/time -f "%e %U %S" -o "${work}/time" \
    "${trainer}" "$@" "${common[@]}" --checkpoint-dir "${work}/${name}/model" --export "${out}" \
    >"${work}/${name}-export.log" 2>&1 || { cat "${work}/${name}-export.log"; exit 1; }
  local inproc rows
  inproc="$(sed -n 's/.*exported the model.* in \([0-9.]*\) s$/\1/p' "${work}/${name}-export.log")"
  rows="$(sed -n 's/.*exported the model (step [0-9]*, \([0-9]*\) embedding rows).*/\1/p' \
    "${work}/${name}-export.log")"
  echo "$(tail -1 "${work}/time") ${inproc} $(stat -c %s "${out}/model.onnx") ${rows}" \
    >>"${work}/${name}.txt"
}
for ((i = 0; i < runs; i++)); do
  export_once wd "${wd[@]}"
  export_once mlp "${mlp[@]}"
done

python3 - "${work}" "${runs}" <<'PY'
import statistics, sys
work, runs = sys.argv[1], sys.argv[2]
for name, label in (("wd", "wide_deep (1024,512,256, dim 16)"), ("mlp", "mlp (13 features, 1024,512,256, 2 classes)")):
    rows = [l.split() for l in open(f"{work}/{name}.txt")]
    wall = statistics.median(float(r[0]) for r in rows)
    cpu = statistics.median(float(r[1]) + float(r[2]) for r in rows)
    inproc = statistics.median(float(r[3]) for r in rows)
    size = statistics.median(int(r[4]) for r in rows)
    emb = rows[0][5]
    print(f"{label}: {emb} embedding rows; model.onnx {size / 1e6:.2f} MB; export "
          f"{inproc * 1000:.0f} ms in-process (wall), {wall * 1000:.0f} ms wall and "
          f"{cpu * 1000:.0f} ms CPU as a process (medians of {runs})")
PY

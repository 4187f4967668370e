#!/usr/bin/env bash
# Parameter-server mode with FP32 and with BF16 on the wire (--wire-precision), side by side:
# 1 PS + 1 asynchronous worker as real kubetrain-trainer processes over loopback, the
# compare_tf.sh model and data, rounds alternating between the two. Prints the medians of
# samples/s, eval AUC (20,000 examples) and the worker's payload bytes per step (sent +
# received during training), and last the bytes ratio.
# Usage: compare_wire.sh <path to kubetrain-trainer> [threads] [steps] [reps]
set -euo pipefail
trainer="$1"
threads="${2:-1}"
steps="${3:-200}"
reps="${4:-3}"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "${p}" 2>/dev/null || true; done
  rm -rf "${work}"
}
trap cleanup EXIT
common=(--batch-size 512 --layers 1024,512,256 --embedding-dim 16 --optimizer adagrad --lr 0.05
  --threads "${threads}" --metrics-port 0 --log-every 0)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
key="$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')"

"${trainer}" --data-dir "${work}/data" --generate-data 200000 --generate-eval 20000 --steps 0 \
  --no-eval --termination-log /dev/null "${common[@]}" >/dev/null 2>&1
for r in $(seq 1 "${reps}"); do
  for w in fp32 bf16; do
    cluster="{\"ps\":[\"127.0.0.1:$(free_port)\"],\"worker\":[\"127.0.0.1:$(free_port)\"]}"
    run=("${trainer}" --data-dir "${work}/data" --steps "${steps}" --wire-precision "${w}"
      "${common[@]}")
    CLUSTER_CONFIG="${cluster}" POD_NAME=ps-0 KUBETRAIN_AUTH_KEY="${key}" "${run[@]}" \
      --termination-log "${work}/ps.json" >"${work}/ps.log" 2>&1 &
    pids=($!)
    CLUSTER_CONFIG="${cluster}" POD_NAME=worker-0 KUBETRAIN_AUTH_KEY="${key}" "${run[@]}" \
      --termination-log "${work}/${w}.${r}.json" >"${work}/worker.log" 2>&1 || {
      cat "${work}/worker.log" "${work}/ps.log" >&2
      exit 1
    }
    wait "${pids[0]}" || {
      cat "${work}/ps.log" >&2
      exit 1
    }
    pids=()
  done
done
python3 - "${work}" "${reps}" "${threads}" "${steps}" <<'PY'
import json, statistics, sys
work, reps = sys.argv[1], int(sys.argv[2])
med = statistics.median
print(f"1 PS + 1 worker (pipelined), threads {sys.argv[3]}, {sys.argv[4]} steps of batch 512, "
      f"layers 1024,512,256, embedding dim 16, Adagrad 0.05, median of {reps} alternating rounds")
runs = {w: [json.load(open(f"{work}/{w}.{r}.json")) for r in range(1, reps + 1)] for w in ("fp32", "bf16")}
per_step = {w: [(k["ps_bytes"]["sent"] + k["ps_bytes"]["received"]) / k["steps"] for k in runs[w]]
            for w in runs}
for w, ks in runs.items():
    print(f"--wire-precision {w}: {med(k['samples_per_second'] for k in ks):.0f} samples/s, "
          f"eval AUC {med(k['eval']['auc'] for k in ks):.4f}, "
          f"{med(per_step[w]) / 1e6:.2f} MB on the wire per step")
auc = med(b["eval"]["auc"] - f["eval"]["auc"] for f, b in zip(runs["fp32"], runs["bf16"]))
sps = med(b["samples_per_second"] / f["samples_per_second"] for f, b in zip(runs["fp32"], runs["bf16"]))
print(f"bf16 vs fp32 wire: eval AUC {auc:+.4f}, {sps:.2f}x samples/s")
print(f"bf16 / fp32 wire: {med(per_step['bf16']) / med(per_step['fp32']):.2f}x bytes per step")
PY

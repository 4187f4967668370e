#!/usr/bin/env bash
# The operator's request rate to trainers (status.progress reads) with JOBS
# running TrainingJobs on kwok: one control plane, JOBS jobs of one worker each,
# all Running; then RUNS times: start the operator afresh (every job's target
# new and due at once: the worst case), let it sync, count its reads of
# trainers' /metrics (kubetrain_progress_reads_total, every result) over a
# WINDOW-second window, stop it. kwok pods serve no metrics, so every read
# fails and backs off; the bound is --progress-qps (default 10/s).
# Prints each run, then the median reads/s last.
# Usage: bench/progress/progress_bench.sh OPERATOR_BINARY [JOBS=500] [RUNS=3] [WINDOW=30]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
operator="${1:?usage: progress_bench.sh OPERATOR_BINARY [JOBS] [RUNS] [WINDOW]}"
jobs="${2:-500}"
runs="${3:-3}"
window="${4:-30}"
source "${root}/tests/tools/testlib.sh"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
dir="" op_pid=""
stop_operator() {
  [[ -n "${op_pid}" ]] && { kill "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null || true; }
  op_pid=""
}
stop() {
  stop_operator
  [[ -n "${dir}" ]] && "${root}/tests/cluster/down" "${dir}"
  dir=""
}
trap stop EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
start_operator() {
  port="$(free_port)" health="$(free_port)"
  "${operator}" --qps 500 --burst 1000 --workers 8 --metrics-addr "127.0.0.1:${port}" \
    --health-addr "127.0.0.1:${health}" --log-level warn >>"${dir}/operator.log" 2>&1 &
  op_pid=$!
  local deadline=$((SECONDS + 300))
  until curl -sf "127.0.0.1:${health}/readyz" >/dev/null; do
    ((SECONDS < deadline)) || { echo "the operator did not become ready" >&2; exit 1; }
    sleep 0.2
  done
}
reads() {
  curl -s "127.0.0.1:${port}/metrics" | awk '/^kubetrain_progress_reads_total/ {n += $2} END {print n + 0}'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

dir="$(mktemp -d)"
KUBETRAIN_TEST_NODES=10 "${root}/tests/cluster/up" "${dir}" >/dev/null
export KUBECONFIG="${dir}/kubeconfig"
kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
kubectl create namespace bench >/dev/null
wait_for_namespace bench
for ((i = 0; i < jobs; i++)); do
  cat <<JOB
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: bench-${i}, namespace: bench}
spec:
  replicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
---
JOB
done >"${dir}/jobs.yaml"
start_operator
kubectl create -f "${dir}/jobs.yaml" >/dev/null
deadline=$((SECONDS + 1200))
until (($(kubectl -n bench get pods --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l) >= jobs)); do
  ((SECONDS < deadline)) || { echo "not every pod Running after 1200 s" >&2; exit 1; }
  sleep 1
done
stop_operator

rates=()
for ((r = 1; r <= runs; r++)); do
  start_operator
  before="$(reads)"
  t0="$(date +%s.%N)"
  python3 -c "import time; time.sleep(${window})"  # the measurement window
  n=$(($(reads) - before))
  t="$(echo "$(date +%s.%N) - ${t0}" | bc -l)"
  rate="$(echo "${n} / ${t}" | bc -l)"
  rates+=("${rate}")
  printf 'run %d: %d reads of trainers in %.1f s with %d running jobs: %.2f requests/s\n' "${r}" "${n}" "${t}" "${jobs}" "${rate}"
  stop_operator
done
printf 'median over %d runs, %d running jobs, default --progress-qps 10: %.2f requests/s to trainers\n' \
  "${runs}" "${jobs}" "$(printf '%s\n' "${rates[@]}" | median)"

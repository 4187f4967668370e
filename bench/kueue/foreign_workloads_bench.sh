#!/usr/bin/env bash
# Operator memory and CPU with other job kinds' Workloads in the cluster
# (the operator must not pay for Workloads it does not own). FOREIGN Workloads as Kueue makes them for batch Jobs
# (label kueue.x-k8s.io/job-uid, a pod template of ~2 KB, no TrainingJob
# owner) in one namespace, and JOBS admitted TrainingJobs (1 worker each) in
# another, on a control plane with a real Kueue (tests/cluster/up,
# KUBETRAIN_KUEUE=1). Each contender (the operator with --kueue) is started
# RUNS times on that cluster (alternating, the order flipping every run) and
# measured once the work queue has stayed empty for 10 s and at least 20 s
# have passed (every job reconciled): VmRSS, VmHWM (peak) and CPU seconds
# since start. Prints every run, then the medians, last.
#
# Usage: bench/kueue/foreign_workloads_bench.sh OPERATOR_BINARY [FOREIGN=2000] [JOBS=20] [RUNS=3]
# Environment: BENCH_CONTENDERS="kubetrain" (labels; BIN_<label> is the
# binary, default OPERATOR_BINARY), e.g.
#   BENCH_CONTENDERS="before after" BIN_before=/tmp/op-main BIN_after=build/...
# BENCH_CLUSTER=DIR: use the Kueue control plane in DIR (DIR/kubeconfig; the
# Workload CRD and Kueue running there) instead of starting one; objects this
# script made before are reused. Bench only, not in CI. Stops only what it
# started.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../controller/lib.sh
source "${root}/bench/controller/lib.sh"
operator="$(realpath "${1:?usage: foreign_workloads_bench.sh OPERATOR_BINARY [FOREIGN] [JOBS] [RUNS]}")"
foreign="${2:-2000}"
jobs="${3:-20}"
runs="${4:-3}"
read -r -a contenders <<<"${BENCH_CONTENDERS:-kubetrain}"
source "${root}/tests/tools/testlib.sh"
export PATH="$("${root}/tests/cluster/build"):${PATH}"

dir="" op_pid="" work=""
stop_op() {
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null || true; fi
  op_pid=""
}
cleanup() {
  stop_op
  if [[ -n "${dir}" && -z "${BENCH_CLUSTER:-}" ]]; then "${root}/tests/cluster/down" "${dir}"; fi
  if [[ -n "${work}" ]]; then rm -rf "${work}"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-foreign-wl.XXXXXX")"

start_op() {  # start_op LABEL LOG: sets op_pid, health, metrics
  local bin_var="BIN_$1"
  health="$(free_port)" metrics="$(free_port)"
  "${!bin_var:-${operator}}" --kubeconfig "${KUBECONFIG}" --kueue --workers 4 --progress-qps 0 \
    --metrics-addr "127.0.0.1:${metrics}" --health-addr "127.0.0.1:${health}" >"$2" 2>&1 &
  op_pid=$!
}

dir="${BENCH_CLUSTER:-${work}/cluster}"
if [[ -z "${BENCH_CLUSTER:-}" ]]; then
  KUBETRAIN_KUEUE=1 "${root}/tests/cluster/up" "${dir}" >/dev/null
fi
export KUBECONFIG="${dir}/kubeconfig"
kubectl apply -k "${root}/crds" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
for ns in kwb-foreign kwb-jobs; do
  kubectl get namespace "${ns}" >/dev/null 2>&1 || kubectl create namespace "${ns}" >/dev/null
done
wait_for_namespace kwb-jobs

# The foreign Workloads, 200 to a kubectl call.
have=$(kubectl -n kwb-foreign get workloads -o name | wc -l)
for ((i = have; i < foreign; i++)); do
  cat <<WL
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata:
  name: job-batch-${i}
  namespace: kwb-foreign
  labels: {kueue.x-k8s.io/job-uid: "00000000-0000-4000-8000-$(printf %012d "${i}")"}
spec:
  queueName: batch
  podSets:
  - name: main
    count: 4
    template:
      spec:
        restartPolicy: Never
        containers:
        - name: worker
          image: registry.example.com/batch/etl-worker:2025.11.3
          command: [/bin/etl, --input, "s3://bucket/input/part-${i}", --output, "s3://bucket/output/part-${i}"]
          env:
$(for ((e = 0; e < 16; e++)); do echo "          - {name: ETL_SETTING_${e}, value: \"value-${e}-of-the-batch-job-number-${i}\"}"; done)
          resources: {requests: {cpu: 500m, memory: 1Gi}, limits: {memory: 2Gi}}
---
WL
done >"${work}/wl.yaml"
if ((have < foreign)); then
  python3 - "${work}/wl.yaml" "${work}" <<'PY'
import sys
docs = [d for d in open(sys.argv[1]).read().split("\n---\n") if d.strip()]
for n in range(0, len(docs), 200):
    with open(f"{sys.argv[2]}/chunk-{n // 200:04d}.yaml", "w") as f:
        f.write("\n---\n".join(docs[n:n + 200]) + "\n")
PY
  for f in "${work}"/chunk-*.yaml; do kubectl create -f "${f}" >/dev/null; done
fi
echo "foreign Workloads: $(kubectl -n kwb-foreign get workloads -o name | wc -l)"

# JOBS TrainingJobs, all admitted in one ClusterQueue.
cat <<Q | kubectl apply -f - >/dev/null
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: kwok}
spec:
  nodeLabels: {type: kwok}
  tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: kwb-cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: kwok
      resources: [{name: cpu, nominalQuota: "${jobs}"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: kwb-jobs}
spec: {clusterQueue: kwb-cq}
Q
for ((j = 0; j < jobs; j++)); do
  cat <<JOB
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: j${j}, namespace: kwb-jobs, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  replicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers: [{name: trainer, image: kubetrain-trainer, resources: {requests: {cpu: "1"}}}]
---
JOB
done | kubectl apply -f - >/dev/null
running() {
  kubectl -n kwb-jobs get pods -l kubetrain.io/job-name --field-selector=status.phase=Running -o name | wc -l
}
start_op "${contenders[0]}" "${work}/populate.log"
wait_ready "${op_pid}" "${health}" "${work}/populate.log" 300
deadline=$((SECONDS + 300))
until (($(running) >= jobs)); do
  ((SECONDS < deadline)) || { echo "only $(running)/${jobs} jobs running" >&2; exit 1; }
  sleep 2
done
stop_op
echo "objects: ${foreign} foreign Workloads, ${jobs} admitted TrainingJobs running"

results="${work}/results"
: >"${results}"
for ((r = 1; r <= runs; r++)); do
  order=("${contenders[@]}")
  if ((r % 2 == 0)); then
    order=(); for ((c = ${#contenders[@]} - 1; c >= 0; c--)); do order+=("${contenders[c]}"); done
  fi
  for label in "${order[@]}"; do
    log="${work}/op-${label}-${r}.log"
    start=${SECONDS}
    start_op "${label}" "${log}"
    wait_ready "${op_pid}" "${health}" "${log}" 300
    sync_s=$((SECONDS - start))
    quiet=0
    while ((quiet < 10 || SECONDS - start < 20)); do
      if [[ "$(metric "${metrics}" kubetrain_workqueue_depth)" == 0 ]]; then quiet=$((quiet + 1)); else quiet=0; fi
      sleep 1
    done
    rss=$(rss_mib "${op_pid}") hwm=$(hwm_mib "${op_pid}") cpu=$(cpu_s "${op_pid}")
    stop_op
    (($(running) >= jobs)) || { echo "${label}: jobs stopped running" >&2; exit 1; }
    echo "${label} ${rss} ${hwm} ${cpu}" >>"${results}"
    echo "run ${r} ${label}: synced in ${sync_s} s, RSS ${rss} MiB, peak ${hwm} MiB, ${cpu} CPU s"
  done
done

echo
echo "${foreign} foreign Workloads, ${jobs} TrainingJobs; medians of ${runs} runs (MiB; CPU s from start to steady):"
echo "| | RSS | peak RSS | CPU s |"
echo "|---|---|---|---|"
for label in "${contenders[@]}"; do
  col() { awk -v l="${label}" -v c="$1" '$1 == l {print $c}' "${results}" | median; }
  echo "| ${label} | $(col 2) | $(col 3) | $(col 4) |"
done

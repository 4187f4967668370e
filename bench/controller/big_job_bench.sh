#!/usr/bin/env bash
# One TrainingJob at the CRD's maximum : 1 PS + WORKERS
# workers (the CRD allows at most 10,000 replicas per replica type) on kwok,
# on a fresh test control plane. Polls the operator's VmHWM from
# /proc/PID/status until every pod of the job exists and prints the peak RSS in
# MiB, the seconds from the create to all pods created, and whether the peak
# stayed within the 256 MiB limit of the shipped Deployment
# (deploy/kustomize/base/deployment.yaml). The operator runs as a local process
# (no cgroup limit), so an overshoot is reported rather than OOM-killed.
# Usage: bench/controller/big_job_bench.sh OPERATOR_BINARY [WORKERS=10000]
# Operator flags: --qps 500 --burst 1000 --workers 8 (the shipped default rate
# limit would take minutes just to pace 20,000 creates of pods and services).
# Environment: KUBETRAIN_TEST_NODES (default 10) kwok nodes; kwok gives a node
# without a status its default capacity (the script prints allocatable pods).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
operator="$(realpath "${1:?usage: big_job_bench.sh OPERATOR_BINARY [WORKERS]}")"
workers="${2:-10000}"
limit_mib=256
timeout_s="${KUBETRAIN_BENCH_TIMEOUT:-1800}"
source "${root}/tests/tools/testlib.sh"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
pods=$((workers + 1))
dir="" op_pid=""
stop() {
  if [[ -n "${op_pid}" ]]; then kill "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null || true; fi
  if [[ -n "${dir}" ]]; then "${root}/tests/cluster/down" "${dir}"; fi
  op_pid="" dir=""
}
trap stop EXIT
trap 'exit 130' INT TERM

dir="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-bigjob.XXXXXX")"
KUBETRAIN_TEST_NODES="${KUBETRAIN_TEST_NODES:-10}" "${root}/tests/cluster/up" "${dir}" >/dev/null
export KUBECONFIG="${dir}/kubeconfig"
kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
kubectl create namespace bench >/dev/null
wait_for_namespace bench
alloc=$(kubectl get nodes -o jsonpath='{range .items[*]}{.status.allocatable.pods}{"\n"}{end}' | sort -u | tr '\n' ' ')
echo "kwok nodes: $(kubectl get nodes --no-headers | wc -l), allocatable pods per node: ${alloc}" >&2

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${operator}" --qps 500 --burst 1000 --workers 8 --metrics-addr "127.0.0.1:${port}" \
  --health-addr 127.0.0.1:0 --log-level warn >"${dir}/operator.log" 2>&1 &
op_pid=$!
until curl -sf "127.0.0.1:${port}/metrics" >/dev/null; do
  kill -0 "${op_pid}" 2>/dev/null || { echo "operator exited:" >&2; tail "${dir}/operator.log" >&2; exit 1; }
  sleep 0.2
done

cat <<JOB >"${dir}/job.yaml"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: big, namespace: bench}
spec:
  replicaSpecs:
    PS:
      replicas: 1
      template: &t
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
    Worker:
      replicas: ${workers}
      template: *t
JOB
hwm() { awk '/^VmHWM/ {print $2}' "/proc/${op_pid}/status" 2>/dev/null || echo 0; }
kubectl create -f "${dir}/job.yaml" >/dev/null
start=$(date +%s.%N)
deadline=$((SECONDS + timeout_s))
peak_kib=0 created=0 last_count=0
while :; do
  kill -0 "${op_pid}" 2>/dev/null || { echo "operator died after $(hwm) KiB; log:" >&2; tail "${dir}/operator.log" >&2; exit 1; }
  h=$(hwm); ((h > peak_kib)) && peak_kib=${h}
  if ((SECONDS >= last_count)); then  # listing 10,000 pods is not free: every 2 s
    created=$(kubectl get pods -n bench -l kubetrain.io/job-name=big -o name 2>/dev/null | wc -l)
    ((created >= pods)) && break
    last_count=$((SECONDS + 2))
  fi
  ((SECONDS < deadline)) || { echo "only ${created}/${pods} pods after ${timeout_s} s" >&2; exit 1; }
  sleep 0.5
done
t=$(echo "$(date +%s.%N) - ${start}" | bc -l)
h=$(hwm); ((h > peak_kib)) && peak_kib=${h}
peak_mib=$((peak_kib / 1024))
within=yes; ((peak_kib <= limit_mib * 1024)) || within=no
printf '1 PS + %d workers (%d pods): all pods created in %.1f s, operator peak RSS (VmHWM) %d MiB, within %d MiB: %s\n' \
  "${workers}" "${pods}" "${t}" "${peak_mib}" "${limit_mib}" "${within}"

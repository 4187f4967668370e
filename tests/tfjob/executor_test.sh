#!/usr/bin/env bash
# The operator with --tfjob=all runs Kubeflow training-operator v1.9.3's own
# example TFJob (examples/tensorflow/dist-mnist: Chief, PS, 2 workers) under
# v1.9.3's own TFJob CRD on the real control plane, kwok running the pods:
#   - pods and Services with v1's names and labels, TF_CONFIG as v1 writes it;
#   - status in v1's shape: Running, then Succeeded once the chief exits 0,
#     and `kubectl get tfjob` (v1's State column, conditions[-1:]) says so;
#   - the PS pod removed after success (cleanPodPolicy unset: kubetrain's Running);
#   - a TFJob managed by training-operator (runPolicy.managedBy) is never touched;
#   - before the CRD is installed, --tfjob=all logs that TFJobs are off and turns ready.
# v1.9.3's CRD and example come from its Go module (the module cache, else `go
# mod download`: the Go module proxy only). Installs the TFJob CRD and removes
# it at the end; refuses to run if the cluster already has one.
# Usage: executor_test.sh OPERATOR_BINARY (KUBECONFIG: the test cluster).
# Prints "tfjob: Succeeded N s after apply" and the operator's API writes for the job.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: executor_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
NS_PREFIX=tfexec

version=v1.9.3
moddir="$(go env GOMODCACHE 2>/dev/null)/github.com/kubeflow/training-operator@${version}"
if [[ ! -f "${moddir}/manifests/base/crds/kubeflow.org_tfjobs.yaml" ]]; then
  moddir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/kubeflow/training-operator@${version}" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
fi
peer_crd="${moddir}/manifests/base/crds/kubeflow.org_tfjobs.yaml"
example="${moddir}/examples/tensorflow/dist-mnist/tf_job_mnist.yaml"
[[ -f "${peer_crd}" && -f "${example}" ]] || { echo "FAIL: no training-operator ${version} module"; exit 1; }
if kubectl get crd tfjobs.kubeflow.org >/dev/null 2>&1; then
  echo "FAIL: the cluster already has a TFJob CRD; this test installs its own"
  exit 1
fi

work="$(mktemp -d)"
op_pid=""
crd_installed=""
cleanup() {
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; fi
  delete_namespaces
  if [[ -n "${crd_installed}" ]]; then kubectl delete crd tfjobs.kubeflow.org --wait=true --timeout=120s >/dev/null 2>&1; fi
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }

# No TFJob CRD yet: --tfjob=all says so, runs TrainingJobs and turns ready
# (no TFJob cache that could never sync), rather than crash-looping.
health_port="$(free_port)"
"${operator}" --kubeconfig "${KUBECONFIG}" --namespace default --tfjob=all \
  --metrics-addr 127.0.0.1:0 --health-addr "127.0.0.1:${health_port}" --progress-qps 0 \
  >"${work}/no-crd.log" 2>&1 &
op_pid=$!
wait_until "ready without the TFJob CRD" curl -sf "http://127.0.0.1:${health_port}/readyz"
check "it says TFJobs are off" "$(grep -c 'tfjobs are not served.*TFJobs are off' "${work}/no-crd.log")" 1
kill -TERM "${op_pid}"; wait "${op_pid}"; op_pid=""

crd_installed=1
kubectl apply --server-side -f "${peer_crd}" >/dev/null || { echo "FAIL: v1.9.3's CRD rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/tfjobs.kubeflow.org >/dev/null
new_ns run
# The test's own credentials: the TFJob RBAC ships with the deploy packaging.
metrics_port="$(free_port)"
"${operator}" --kubeconfig "${KUBECONFIG}" --namespace "${ns}" --tfjob=all --status-coalesce 1 \
  --metrics-addr "127.0.0.1:${metrics_port}" --health-addr "127.0.0.1:$(free_port)" --workers 2 \
  --progress-qps 0 >"${work}/operator.log" 2>&1 &
op_pid=$!

# The example as v1.9.3 ships it, its pods sent to the kwok nodes.
kwok_placed() {
  kubectl create --dry-run=client -o json -f "$1" | python3 -c '
import json, sys
job = json.load(sys.stdin)
job["metadata"].pop("namespace", None)
if len(sys.argv) > 1:
    job["metadata"]["name"] = sys.argv[1]
    job["spec"].setdefault("runPolicy", {})["managedBy"] = sys.argv[2]
for r in job["spec"]["tfReplicaSpecs"].values():
    spec = r["template"]["spec"]
    spec["nodeSelector"] = {"type": "kwok"}
    spec["tolerations"] = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
print(json.dumps(job))' "${@:2}"
}
kwok_placed "${example}" >"${work}/job.json"
kwok_placed "${example}" peer kubeflow.org/training-operator >"${work}/peer.json"
job=dist-mnist-for-e2e-test
t0=${SECONDS}
k create -f "${work}/peer.json" >/dev/null || fail "creating the peer's TFJob"
k create -f "${work}/job.json" >/dev/null || fail "creating ${job}"

wait_until "4 pods running" bash -c "[[ \$(kubectl -n ${ns} get pods -l training.kubeflow.org/job-name=${job} --field-selector=status.phase=Running -o name | wc -l) == 4 ]]"
check "pod names" "$(k get pods -l "training.kubeflow.org/job-name=${job}" -o name | sort | tr '\n' ' ')" \
  "pod/${job}-chief-0 pod/${job}-ps-0 pod/${job}-worker-0 pod/${job}-worker-1 "
check "v1's labels on worker 1" \
  "$(jpath "pod/${job}-worker-1" '{.metadata.labels.training\.kubeflow\.org/replica-type} {.metadata.labels.training\.kubeflow\.org/replica-index} {.metadata.labels.training\.kubeflow\.org/operator-name}')" \
  "worker 1 tfjob-controller"
check "job-role master on the chief" "$(jpath "pod/${job}-chief-0" '{.metadata.labels.training\.kubeflow\.org/job-role}')" master
check "the TFJob controls its pods" "$(jpath "pod/${job}-ps-0" '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].controller}')" "TFJob/true"
tf_config="$(jpath "pod/${job}-worker-1" '{.spec.containers[?(@.name=="tensorflow")].env[?(@.name=="TF_CONFIG")].value}')"
check "TF_CONFIG as v1 writes it" "${tf_config}" \
  "{\"cluster\":{\"chief\":[\"${job}-chief-0.${ns}.svc:2222\"],\"ps\":[\"${job}-ps-0.${ns}.svc:2222\"],\"worker\":[\"${job}-worker-0.${ns}.svc:2222\",\"${job}-worker-1.${ns}.svc:2222\"]},\"task\":{\"type\":\"worker\",\"index\":1},\"environment\":\"cloud\"}"
wait_until "a Service per replica" bash -c "[[ \$(kubectl -n ${ns} get services -l training.kubeflow.org/job-name=${job} -o name | wc -l) == 4 ]]"
check "the chief's Service port" "$(jpath "service/${job}-chief-0" '{.spec.ports[0].name}:{.spec.ports[0].port} {.spec.clusterIP}')" "tfjob-port:2222 None"

state() { k get tfjob "$1" --no-headers 2>/dev/null | awk '{print $2}'; }
state_is() { [[ "$(state "$1")" == "$2" ]]; }
wait_until "kubectl get tfjob says Running" state_is "${job}" Running
check "replicaStatuses while running" "$(jpath "tfjob/${job}" '{.status.replicaStatuses.Worker.active}')" 2
k annotate pod "${job}-chief-0" kubetrain.io/test-exit-code=0 >/dev/null
wait_until "kubectl get tfjob says Succeeded" state_is "${job}" Succeeded
echo "tfjob: Succeeded $((SECONDS - t0)) s after apply (kwok pods; the chief exited at once)"
check "the Succeeded condition" "$(jpath "tfjob/${job}" '{.status.conditions[?(@.type=="Succeeded")].reason}')" TFJobSucceeded
check "completionTime set" "$(jpath "tfjob/${job}" '{.status.completionTime}' | grep -c T)" 1
wait_until "the PS pod removed after success" bash -c "! kubectl -n ${ns} get pod ${job}-ps-0 >/dev/null 2>&1"
echo "  kubectl get tfjob:"
k get tfjob | sed 's/^/    /'

# Every write the operator made: for this one job (the peer's got none).
writes="$(curl -sf "http://127.0.0.1:${metrics_port}/metrics" | awk '/^kubetrain_api_requests_total\{/ &&
  /verb="(create|update|update_status|patch|delete)"/ { n += $NF } END { printf "%d\n", n }')"
echo "tfjob: ${writes} API writes for a 4-pod TFJob run to Succeeded (creates, status, state annotation, deletes)"
check "the peer's TFJob: no pods" "$(k get pods -l training.kubeflow.org/job-name=peer -o name | wc -l)" 0
check "the peer's TFJob: no status" "$(jpath tfjob/peer '{.status}')" ""
((failures == 0)) && echo "PASS" || { echo "${failures} failed checks"; exit 1; }

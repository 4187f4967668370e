#!/usr/bin/env bash
# Smoke test of the test control plane (needs KUBECONFIG from the cluster fixture):
# scheduling onto a kwok node, kwok's Running -> Succeeded/Failed stages with
# exit codes, pod deletion, and garbage collection of an orphaned child.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PATH="$("${here}/build"):${PATH}"
: "${KUBECONFIG:?KUBECONFIG must point at the test cluster}"

ns="smoke-$(openssl rand -hex 4)"
k() { kubectl -n "${ns}" "$@"; }
check() {  # check DESCRIPTION ACTUAL EXPECTED
  if [[ "$2" != "$3" ]]; then
    echo "FAIL: $1: got '$2', want '$3'" >&2
    exit 1
  fi
  echo "ok: $1"
}
cleanup() { kubectl delete namespace "${ns}" --wait=false >/dev/null 2>&1 || true; }
trap cleanup EXIT

kubectl create namespace "${ns}" >/dev/null
timeout 60 bash -c "until kubectl -n ${ns} get serviceaccount default >/dev/null 2>&1; do sleep 0.2; done"

pod() {  # pod NAME: a pod that tolerates the kwok taint
  cat <<POD
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  nodeSelector: {type: kwok}
  tolerations:
  - {key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}
  containers:
  - name: main
    image: busybox
POD
}

pod ok-pod | k apply -f - >/dev/null
pod bad-pod | k apply -f - >/dev/null
k wait --for=jsonpath='{.status.phase}'=Running pod/ok-pod pod/bad-pod --timeout=60s >/dev/null
node="$(k get pod ok-pod -o jsonpath='{.spec.nodeName}')"
check "pod scheduled onto a kwok node" "${node%-*}" "kwok-node"

k annotate pod ok-pod kubetrain.io/test-exit-code=0 >/dev/null
k annotate pod bad-pod kubetrain.io/test-exit-code=137 \
  kubetrain.io/test-termination-message='out of memory' >/dev/null
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/ok-pod --timeout=60s >/dev/null
k wait --for=jsonpath='{.status.phase}'=Failed pod/bad-pod --timeout=60s >/dev/null
check "succeeded pod exit code" \
  "$(k get pod ok-pod -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')" 0
check "failed pod exit code" \
  "$(k get pod bad-pod -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')" 137
check "failed pod termination message" \
  "$(k get pod bad-pod -o jsonpath='{.status.containerStatuses[0].state.terminated.message}')" \
  "out of memory"

k delete pod ok-pod bad-pod --wait=false >/dev/null
k wait --for=delete pod/ok-pod pod/bad-pod --timeout=60s >/dev/null
check "pods deleted" "$(k get pods -o name | wc -l)" 0

# Garbage collection: a child owned by a deleted owner is removed.
k create configmap owner >/dev/null
uid="$(k get configmap owner -o jsonpath='{.metadata.uid}')"
k apply -f - >/dev/null <<CM
apiVersion: v1
kind: ConfigMap
metadata:
  name: child
  ownerReferences:
  - {apiVersion: v1, kind: ConfigMap, name: owner, uid: ${uid}}
data: {k: v}
CM
k delete configmap owner --cascade=background >/dev/null
k wait --for=delete configmap/child --timeout=90s >/dev/null
check "child collected after its owner was deleted" \
  "$(k get configmap child -o name --ignore-not-found)" ""
echo "smoke test passed"

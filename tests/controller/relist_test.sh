#!/usr/bin/env bash
# A 410 relist does not duplicate anything. Usage: relist_test.sh OPERATOR_BINARY
#
# Runs its own control plane with the apiserver's watch cache off, so watches
# read etcd directly and an etcd compaction expires every older
# resourceVersion. The operator talks to the apiserver through a TCP proxy.
# Flow: job running -> proxy cuts the operator off -> a worker fails (exit 137)
# and a Service is deleted behind the operator's back -> etcd is compacted ->
# proxy lets the operator back: its watches resume from compacted
# resourceVersions, get 410 Gone, relist. Then the failed worker must be
# restarted exactly once, the Service recreated, every replica have exactly
# one pod, and the job still complete.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: relist_test.sh OPERATOR_BINARY}"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
work="$(mktemp -d)"
dir="${work}/cluster" op_pid="" proxy_pid=""
WAIT_SECONDS=90
source "${root}/tests/tools/testlib.sh"
cleanup() {
  [[ -n "${op_pid}" ]] && { kill "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; }
  [[ -n "${proxy_pid}" ]] && { kill "${proxy_pid}" 2>/dev/null; wait "${proxy_pid}" 2>/dev/null; }
  [[ -f "${dir}/pids" ]] && "${root}/tests/cluster/down" "${dir}"
  if ((failures)); then echo "---- operator log"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

KUBETRAIN_APISERVER_FLAGS="--watch-cache=false" "${root}/tests/cluster/up" "${dir}" >/dev/null || exit 1
export KUBECONFIG="${dir}/kubeconfig"
k() { kubectl -n relist "$@"; }
kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
kubectl create namespace relist >/dev/null
wait_until "default service account" k get sa default

# The operator reaches the apiserver only through the proxy.
api_port="$(sed -n 's#.*server: https://127.0.0.1:\([0-9]*\).*#\1#p' "${KUBECONFIG}")"
python3 "${root}/tests/tools/tcp_proxy.py" "${work}/proxy-port" 127.0.0.1 "${api_port}" &
proxy_pid=$!
wait_until "proxy listening" test -s "${work}/proxy-port"
sed "s#https://127.0.0.1:${api_port}#https://127.0.0.1:$(cat "${work}/proxy-port")#" "${KUBECONFIG}" \
  >"${work}/proxied-kubeconfig"
"${operator}" --kubeconfig "${work}/proxied-kubeconfig" --metrics-addr 127.0.0.1:0 \
  --health-addr 127.0.0.1:0 >"${work}/operator.log" 2>&1 &
op_pid=$!

cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: j}
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
      replicas: 2
      restartPolicy: ExitCode
      template: *t
JOB
running() { [[ $(k get pods --field-selector=status.phase=Running -o name | wc -l) == "$1" ]]; }
wait_until "3 pods running" running 3
k wait --for=condition=Running tj/j --timeout=60s >/dev/null || fail "job never Running"
old_uid="$(k get pod j-worker-1 -o jsonpath='{.metadata.uid}')"

kill -USR1 "${proxy_pid}"  # the operator is cut off
k annotate pod j-worker-1 kubetrain.io/test-exit-code=137 >/dev/null
wait_until "worker-1 Failed" bash -c "[[ \$(kubectl -n relist get pod j-worker-1 -o jsonpath='{.status.phase}') == Failed ]]"
k delete service j >/dev/null  # the job-wide Service (serviceMode JobWide, the default)
etcd="$(cat "${dir}/etcd-url")"
rev="$(curl -sf -X POST "${etcd}/v3/kv/range" -d '{"key":"AA=="}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["header"]["revision"])')"
curl -sf -X POST "${etcd}/v3/kv/compaction" -d "{\"revision\":\"${rev}\",\"physical\":true}" >/dev/null \
  || fail "etcd compaction failed"
kill -USR2 "${proxy_pid}"  # back again

wait_until "the operator relisted after 410" grep -q "expired, relisting" "${work}/operator.log"
wait_until "worker-1 recreated" bash -c "u=\$(kubectl -n relist get pod j-worker-1 -o jsonpath='{.metadata.uid}' 2>/dev/null); [[ -n \$u && \$u != ${old_uid} ]]"
wait_until "service recreated" k get service j
wait_until "3 pods running again" running 3
check "exactly one pod per replica" "$(k get pods -o name | sort)" \
  "$(printf 'pod/j-ps-0\npod/j-worker-0\npod/j-worker-1')"
check "the failure was counted once" "$(k get tj j -o jsonpath='{.status.replicaStatuses.Worker.restarts}')" 1
k annotate pod j-worker-0 kubetrain.io/test-exit-code=0 >/dev/null
k wait --for=condition=Succeeded tj/j --timeout=60s >/dev/null || fail "job did not succeed"
check "still one restart after completion" "$(k get tj j -o jsonpath='{.status.replicaStatuses.Worker.restarts}')" 1
((failures == 0)) && echo "relist test passed"
((failures == 0))

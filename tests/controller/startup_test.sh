#!/usr/bin/env bash
# How kubetrain-operator starts and stops when its first cache sync keeps
# failing, against the real control plane (the ctest `cluster` fixture):
#  - SIGTERM during a failing first sync exits at once (issue 10, item 10);
#  - when the sync times out, the error names the cause seen: 401, 403, TLS;
#  - a leader whose Start fails exits 1 and releases the Lease (item 3).
# Usage: startup_test.sh OPERATOR_BINARY [CASE...]. Every process is stopped by PID.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: startup_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
work="$(mktemp -d)"
pids=()
ns="startup-$(openssl rand -hex 3)"

cleanup() {
  for p in "${pids[@]}"; do kill -KILL "${p}" 2>/dev/null; wait "${p}" 2>/dev/null; done
  kubectl delete namespace "${ns}" --wait=false >/dev/null 2>&1
  rm -rf "${work}"
}
trap cleanup EXIT

server="$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')"
ca="$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
# kubeconfig FILE CA-DATA TOKEN
kubeconfig() {
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "${server}", certificate-authority-data: "$2"}}]
users: [{name: u, user: {token: "$3"}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
KC
}

# A ServiceAccount that may use Leases in ${ns} and nothing else (403 on lists).
kubectl create namespace "${ns}" >/dev/null
kubectl -n "${ns}" create serviceaccount nolist >/dev/null
kubectl -n "${ns}" create role leases --verb=get,create,update --resource=leases.coordination.k8s.io >/dev/null
kubectl -n "${ns}" create rolebinding leases --role=leases --serviceaccount="${ns}:nolist" >/dev/null
kubeconfig "${work}/403" "${ca}" "$(kubectl -n "${ns}" create token nolist --duration=1h)"
kubeconfig "${work}/401" "${ca}" "not-a-token-the-apiserver-knows"
openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=other-ca -days 1 -keyout "${work}/other.key" \
  -out "${work}/other.crt" >/dev/null 2>&1
kubeconfig "${work}/tls" "$(base64 -w0 <"${work}/other.crt")" "not-used"

# run_operator NAME KUBECONFIG ARGS...: starts it in the background; pid in $op_pid.
run_operator() {
  local name="$1" kc="$2"; shift 2
  "${operator}" --kubeconfig "${kc}" --metrics-addr 127.0.0.1:0 --health-addr 127.0.0.1:0 \
    "$@" >"${work}/${name}.log" 2>&1 &
  op_pid=$!
  pids+=("${op_pid}")
}
# wait_exit PID SECONDS: sets $status to the exit status, or "timeout". (Not
# in a $(...) subshell: only this shell can collect its child's status.)
wait_exit() {
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null && [[ ! -e "/proc/$1/stat" || "$(cut -d' ' -f3 "/proc/$1/stat")" != Z ]]; do
    ((SECONDS < deadline)) || { status=timeout; return; }
    sleep 0.1
  done
  wait "$1"
  status=$?
}

case_sigterm_during_failing_sync() {
  run_operator sigterm "${work}/401" --cache-sync-timeout 120
  wait_until "a failed list" grep -q "list failed" "${work}/sigterm.log"
  local start=${SECONDS}
  kill -TERM "${op_pid}"
  wait_exit "${op_pid}" 10
  check "exit status after SIGTERM during the first sync" "${status}" 0
  echo "  exited $((SECONDS - start)) s after SIGTERM (sync timeout 120 s)"
}

# sync_failure_names CASE KUBECONFIG WANT: the sync error names the cause.
sync_failure_names() {
  run_operator "$1" "$2" --cache-sync-timeout 3
  wait_exit "${op_pid}" 60
  check "$1: exit status when the caches never sync" "${status}" 1
  local err; err="$(grep "did not sync" "${work}/$1.log" | tail -n 1)"
  [[ "${err}" == *"$3"* ]] || fail "$1: sync error does not name '$3': ${err}"
  [[ -n "${err}" ]] && echo "  $1: ${err#* E }" | cut -c1-220
}
case_sync_failure_names_401() { sync_failure_names 401 "${work}/401" "401 Unauthorized"; }
case_sync_failure_names_403() { sync_failure_names 403 "${work}/403" "403 Forbidden: RBAC does not let the operator list and watch"; }
case_sync_failure_names_tls() { sync_failure_names tls "${work}/tls" "TLS"; }

lease_holder() { kubectl -n "${ns}" get lease kubetrain-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null; }
case_failed_start_releases_lease() {
  run_operator lease "${work}/403" --leader-elect --leader-elect-namespace "${ns}" \
    --leader-elect-identity failing --cache-sync-timeout 3
  wait_until "the failing replica holds the lease" bash -c "[[ \$(kubectl -n ${ns} get lease kubetrain-operator -o jsonpath='{.spec.holderIdentity}') == failing ]]"
  wait_exit "${op_pid}" 60
  check "a leader whose Start fails exits non-zero" "${status}" 1
  check "and has released the lease" "$(lease_holder)" ""
}

cases=(case_sigterm_during_failing_sync case_sync_failure_names_401 case_sync_failure_names_403
  case_sync_failure_names_tls case_failed_start_releases_lease)
[[ $# -gt 1 ]] && cases=("${@:2}")
run_cases "${cases[@]}"

# Shared helpers for the shell tests; source it. Each check is counted in
# `failures`; a test script ends with `((failures == 0))`.
#   fail MESSAGE...                 count a failure
#   check DESCRIPTION ACTUAL WANT   pass when ACTUAL == WANT
#   wait_until DESCRIPTION CMD...   poll CMD until it succeeds, up to WAIT_SECONDS (default 60)
#   run_cases CASE...               run each case function, print PASS/FAILED per case (with its
#                                   seconds) and a summary; returns non-zero if any check failed
#   free_port                       print a free loopback TCP port
# For tests and benches against a cluster (KUBECONFIG set):
#   use_test_cluster [BUILD...]     put the test cluster's tools (tests/cluster/build: kubectl...)
#                                   first on PATH, then each tests/cluster/BUILD's (build-helm...),
#                                   and exit unless KUBECONFIG is set
#   wait_for_namespace NS           wait (up to WAIT_SECONDS) for NS's default ServiceAccount:
#                                   a pod created before it exists is refused
#   own_cluster_teardown [SIGNAL]   for a bench with a control plane of its own (in ${dir}) and
#                                   a scratch directory ${work}: stop ${op_pid} (SIGTERM, or
#                                   SIGNAL) and wait for it, tests/cluster/down ${dir}, remove
#                                   ${work}; each only if set, then unsets them (an EXIT trap)
#   new_ns NAME                     create namespace ${NS_PREFIX}-NAME-<random>, make it the
#                                   current one (ns) and record it in `namespaces`; waits for its
#                                   default ServiceAccount (pods need it)
#   delete_namespaces               delete every namespace new_ns made (no wait)
#   k ARGS...                       kubectl in the current namespace
#   jpath OBJECT JSONPATH           one field of an object in the current namespace
#   operator_kubeconfig FILE        write a kubeconfig that acts as the operator's ServiceAccount
#                                   (kubetrain-system/kubetrain-operator, a 2 h token) on the
#                                   current cluster, so a test proves the shipped RBAC is enough
failures=0
namespaces=()
_testlib_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); return 1; }
check() {
  if [[ "$2" == "$3" ]]; then echo "  ok: $1"; else fail "$1: got '$2', want '$3'"; fi
}
wait_until() {
  local what="$1"; shift
  local deadline=$((SECONDS + ${WAIT_SECONDS:-60}))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { fail "timed out waiting for ${what}"; return 1; }
    sleep 0.2
  done
}
# wait_progressing WHAT PROGRESS_CMD DONE_CMD...: waits until DONE_CMD succeeds while
# PROGRESS_CMD's output keeps changing; fails when it has not changed for STALL_SECONDS
# (default 120). For long waits whose speed depends on the machine (a starved operator is slow,
# not stuck), where a fixed deadline either fails a slow run or waits long on a stuck one; the
# test's ctest TIMEOUT still bounds the whole.
wait_progressing() {
  local what="$1" progress="$2"; shift 2
  local seen last now
  seen="$(bash -c "${progress}" 2>/dev/null)" last=${SECONDS}
  until "$@" >/dev/null 2>&1; do
    now="$(bash -c "${progress}" 2>/dev/null)"
    if [[ "${now}" != "${seen}" ]]; then
      seen="${now}" last=${SECONDS}
    elif ((SECONDS - last > ${STALL_SECONDS:-120})); then
      fail "timed out waiting for ${what}: no progress for ${STALL_SECONDS:-120} s (at: ${seen})"
      return 1
    fi
    sleep 1
  done
}
run_cases() {
  local c before t0
  for c in "$@"; do
    echo "== ${c}"
    before=${failures} t0=${SECONDS}
    "${c}" || true
    ((failures == before)) && echo "PASS ${c} ($((SECONDS - t0)) s)" || echo "FAILED ${c} ($((SECONDS - t0)) s)"
  done
  echo "$# cases, ${failures} failed checks"
  ((failures == 0))
}
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
use_test_cluster() {
  local tools b
  tools="$("${_testlib_root}/tests/cluster/build")"
  for b in "$@"; do tools+=":$("${_testlib_root}/tests/cluster/${b}")"; done
  export PATH="${tools}:${PATH}"
  : "${KUBECONFIG:?KUBECONFIG must point at the test cluster}"
}
wait_for_namespace() {
  wait_until "the default service account of $1" kubectl -n "$1" get sa default
}
own_cluster_teardown() {
  if [[ -n "${op_pid:-}" ]]; then kill "-${1:-TERM}" "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null || true; fi
  if [[ -n "${dir:-}" ]]; then "${_testlib_root}/tests/cluster/down" "${dir}"; fi
  if [[ -n "${work:-}" ]]; then rm -rf "${work}"; fi
  op_pid="" dir="" work=""
}
new_ns() {
  ns="${NS_PREFIX:?set NS_PREFIX before new_ns}-$1-$(openssl rand -hex 3)"
  namespaces+=("${ns}")
  kubectl create namespace "${ns}" >/dev/null
  wait_for_namespace "${ns}"
}
delete_namespaces() {
  local n
  for n in "${namespaces[@]}"; do kubectl delete namespace "${n}" --wait=false >/dev/null 2>&1; done
}
k() { kubectl -n "${ns}" "$@"; }
jpath() { k get "$1" -o "jsonpath=$2" 2>/dev/null; }
operator_kubeconfig() {
  local token server ca
  token="$(kubectl create token kubetrain-operator -n kubetrain-system --duration=2h)" || return 1
  server="$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.server}')"
  ca="$(kubectl config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')"
  cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "${server}", certificate-authority-data: "${ca}"}}]
users: [{name: operator, user: {token: "${token}"}}]
contexts: [{name: c, context: {cluster: c, user: operator}}]
current-context: c
KC
}

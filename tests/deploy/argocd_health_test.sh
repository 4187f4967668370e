#!/usr/bin/env bash
# The Argo CD health checks shipped in deploy/argocd/kubetrain.io/<Kind>/health.lua
# run by a real Lua 5.1 interpreter (Argo CD's gopher-lua speaks 5.1) on objects
# whose status the operator wrote on the real control plane: TrainingJobs
# succeeded, failed, suspended, running, refused (Pod Security, quota), and one
# not yet seen; TrainingSweeps running, suspended, succeeded and failed.
# Usage: argocd_health_test.sh OPERATOR_BINARY (KUBECONFIG: the test cluster).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: argocd_health_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
command -v lua5.1 >/dev/null || { echo "lua5.1 is missing (.ci/setup installs it)"; exit 1; }
"${here}/argocd_cases.py" || { echo "the health checks fail their own cases"; exit 1; }
NS_PREFIX=argo
source "${here}/lib.sh"
work="$(mktemp -d)"
op_pid=""
cleanup() {
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; fi
  delete_namespaces
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

# health KIND FILE: "<status>|<message>" of the object in FILE (JSON) as Argo CD
# would compute it with deploy/argocd/kubetrain.io/KIND/health.lua.
health() { "${here}/argocd_cases.py" health "$@"; }
health_of() { k get tj "$1" -o json >"${work}/$1.json" && health TrainingJob "${work}/$1.json"; }
sweep_health_of() { k get tsw "$1" -o json >"${work}/$1.json" && health TrainingSweep "${work}/$1.json"; }
state_is() { [[ "$(jpath "tj/$1" '{.status.state}')" == "$2" ]]; }

kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
kubectl apply -k "${root}/deploy/kustomize/rbac" >/dev/null || { echo "RBAC rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
"${operator}" --kubeconfig "${work}/operator-kubeconfig" --metrics-addr "127.0.0.1:$(free_port)" \
  --health-addr "127.0.0.1:$(free_port)" --workers 2 --progress-qps 0 >"${work}/operator.log" 2>&1 &
op_pid=$!

new_ns health
kwok_job ok "backoffLimit: 0"
kwok_job bad "backoffLimit: 0"
kwok_job paused "suspend: true"
kwok_job running
wait_until "ok runs" state_is ok Running
wait_until "bad runs" state_is bad Running
k annotate pod ok-worker-0 kubetrain.io/test-exit-code=0 >/dev/null || fail "finishing ok"
k annotate pod bad-worker-0 kubetrain.io/test-exit-code=1 >/dev/null || fail "failing bad"
wait_until "ok succeeds" state_is ok Succeeded
wait_until "bad fails" state_is bad Failed
wait_until "paused is suspended" state_is paused Suspended
wait_until "running runs" state_is running Running

got="$(health_of ok)"
check "a succeeded job is Healthy" "${got%%|*}" Healthy
got="$(health_of bad)"
check "a failed job is Degraded" "${got%%|*}" Degraded
[[ "${got#*|}" == "$(jpath tj/bad '{.status.conditions[?(@.type=="Failed")].reason}'): "* ]] \
  || fail "Degraded's message does not start with the Failed reason: ${got}"
got="$(health_of paused)"
check "a suspended job is Suspended" "${got%%|*}" Suspended
got="$(health_of running)"
check "a running job is Progressing" "${got}" "Progressing|TrainingJobRunning: every replica is running"
# Refused by the apiserver (condition CreateRefused): Pod Security is Degraded
# (nothing changes until someone acts), a quota Progressing (it waits for room).
refused_is() { [[ "$(jpath "tj/$1" '{.status.conditions[?(@.type=="CreateRefused")].reason}')" == "$2" ]]; }
new_ns forbidden
kubectl label namespace "${ns}" pod-security.kubernetes.io/enforce=restricted >/dev/null
privileged_job
wait_until "privileged is refused" refused_is privileged PodCreateForbidden
got="$(health_of privileged)"
check "a job Pod Security refuses is Degraded" "${got%%|*}" Degraded
[[ "${got#*|}" == "PodCreateForbidden: cannot create pod privileged-worker-0: "*"violates PodSecurity"* ]] \
  || fail "Degraded's message does not say Pod Security refused the pod: ${got}"
new_ns quota
k create quota no-pods --hard=pods=0 >/dev/null || fail "creating the quota"
kwok_job over
wait_until "over is refused" refused_is over QuotaExceeded
got="$(health_of over)"
check "a job over its namespace's quota is Progressing" "${got%%|*}" Progressing
[[ "${got#*|}" == "QuotaExceeded: cannot create pod over-worker-0: "*"exceeded quota: no-pods"* ]] \
  || fail "Progressing's message does not name the quota: ${got}"
printf '{"apiVersion":"kubetrain.io/v1alpha1","kind":"TrainingJob","metadata":{"name":"new"}}' \
  >"${work}/new.json"
got="$(health TrainingJob "${work}/new.json")"
check "a job the operator has not seen yet is Progressing" "${got%%|*}" Progressing

# Sweeps: one whose trials never end (running), one suspended, one whose trials
# report the metric (succeeded), one whose trials do not (failed).
sweep_state_is() { [[ "$(jpath "tsw/$1" '{.status.state}')" == "$2" ]]; }
new_ns sweeps
kwok_sweep hang ""
kwok_sweep held "" true
kwok_sweep win '"kubetrain.io/test-exit-code": "0", "kubetrain.io/test-termination-message": "{\"eval\": {\"auc\": 0.${params.x}}}"'
kwok_sweep lose '"kubetrain.io/test-exit-code": "0", "kubetrain.io/test-termination-message": "{\"eval\": {\"loss\": 0.${params.x}}}"'
wait_until "hang runs" sweep_state_is hang Running
wait_until "held is suspended" sweep_state_is held Suspended
wait_until "win succeeds" sweep_state_is win Succeeded
wait_until "lose fails" sweep_state_is lose Failed
got="$(sweep_health_of hang)"
check "a running sweep is Progressing" "${got%%|*}" Progressing
[[ "${got#*|}" == "TrialsRunning: 2 trials running"* ]] || fail "Progressing's message does not count the trials: ${got}"
got="$(sweep_health_of held)"
check "a suspended sweep is Suspended" "${got%%|*}" Suspended
got="$(sweep_health_of win)"
check "a succeeded sweep is Healthy" "${got}" \
  "Healthy|AllTrialsFinished: $(jpath tsw/win '{.status.conditions[?(@.type=="Succeeded")].message}')"
got="$(sweep_health_of lose)"
check "a failed sweep is Degraded" "${got}" \
  "Degraded|NoTrialSucceeded: all 2 trials finished and none reported eval.auc"
((failures == 0))

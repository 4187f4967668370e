#!/usr/bin/env bash
# kstatus (sigs.k8s.io/cli-utils/pkg/kstatus: what Flux's health checks, kpt and
# cli-utils' apply compute) on TrainingJobs and TrainingSweeps whose status the
# operator wrote on the real control plane, in each phase: running, restarting,
# suspended, waiting for quota -> InProgress; succeeded -> Current; failed,
# refused by Pod Security -> Failed; a spec edit not yet observed ->
# InProgress. The STATE column of kubectl get in each phase. The same verdicts from Flux's CEL evaluator with the healthCheckExprs
# of deploy/flux/kustomization.yaml. tests/tools/kstatus-check is built from
# cli-utils' and Flux's Go modules.
# Usage: kstatus_test.sh OPERATOR_BINARY (KUBECONFIG: the test cluster).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: kstatus_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster build-kstatus
NS_PREFIX=kstatus
source "${here}/lib.sh"
work="$(mktemp -d)"
op_pid=""
stop_operator() {
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; fi
  op_pid=""
}
start_operator() {
  "${operator}" --kubeconfig "${work}/operator-kubeconfig" --metrics-addr "127.0.0.1:$(free_port)" \
    --health-addr "127.0.0.1:$(free_port)" --workers 2 --progress-qps 0 >>"${work}/operator.log" 2>&1 &
  op_pid=$!
}
cleanup() {
  stop_operator
  delete_namespaces
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

state_is() { [[ "$(jpath "$1" '{.status.state}')" == "$2" ]]; }
field_is() { [[ "$(jpath "$1" "$2")" == "$3" ]]; }  # field_is OBJECT JSONPATH VALUE
observed() { [[ "$(jpath "$1" '{.status.observedGeneration}')" == "$(jpath "$1" '{.metadata.generation}')" ]]; }
restarted() { (( $(jpath "$1" '{.status.restarts}') >= 1 )); }
# The STATE column of `kubectl get` shows the state the conditions say (the first
# True of Succeeded, Failed, Suspended, Restarting, Running, else Created), whatever
# order the conditions are listed in: a column reading the last condition
# (kubeflow/trainer #3666's conditions[-1]) shows a stale one. stale_last counts the
# objects whose last condition is not their state, so the check is not vacuous.
stale_last=0
state_column_is_true() {  # state_column_is_true OBJECT
  local json want col last
  json="$(k get "$1" -o json)"
  want="$(jq -r '[.status.conditions[]? | select(.status == "True") | .type] as $t
    | ([("Succeeded", "Failed", "Suspended", "Restarting", "Running") | select(. as $s | $t | index($s))][0]) // "Created"' \
    <<<"${json}")"
  # By the header's offset: empty cells (a sweep's BEST) shift the fields.
  col="$(k get "$1" | awk 'NR == 1 { c = index($0, " STATE ") + 1 } NR == 2 { split(substr($0, c), f, " "); print f[1] }')"
  check "kubectl get $1: STATE is the true condition" "${col}" "${want}"
  last="$(jq -r '.status.conditions[-1].type' <<<"${json}")"
  [[ "${last}" == "${want}" ]] || stale_last=$((stale_last + 1))
}
# The Flux Kustomization shipped with the docs (deploy/flux/kustomization.yaml).
flux_ks="${root}/deploy/flux/kustomization.yaml"
# expect DESCRIPTION OBJECT STATUS [MESSAGE-PREFIX]: kstatus's verdict on OBJECT, and
# the same status from Flux's CEL evaluator with the shipped healthCheckExprs.
expect() {
  local json got flux
  json="$(k get "$2" -o json)"
  got="$(kstatus-check <<<"${json}")"
  check "$1" "${got%%|*}" "$3"
  if [[ -n "${4:-}" && "${got#*|}" != "$4"* ]]; then
    fail "$1: message '${got#*|}' does not start with '$4'"
  fi
  flux="$(kstatus-check flux "${flux_ks}" <<<"${json}")"
  check "$1 (Flux healthCheckExprs)" "${flux%%|*}" "$3"
}
# The docs show the shipped snippet as it is.
docs_block="$(awk '/^```yaml$/ { on = 1; b = ""; next } on && /^```$/ { if (b ~ /kustomize.toolkit.fluxcd.io/) print b; on = 0; next } on { b = b $0 "\n" }' \
  "${root}/docs/operations.md")"
check "docs/operations.md shows deploy/flux/kustomization.yaml" \
  "$(printf '%b' "${docs_block}")" "$(grep -v '^#' "${flux_ks}")"

kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
kubectl apply -k "${root}/deploy/kustomize/rbac" >/dev/null || { echo "RBAC rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
start_operator

new_ns jobs
kwok_job ok "backoffLimit: 0" OnFailure
kwok_job bad "backoffLimit: 0" OnFailure
kwok_job paused "suspend: true" OnFailure
kwok_job running "" OnFailure
kwok_job restarting "backoffLimit: 5" OnFailure
wait_until "ok runs" state_is tj/ok Running
wait_until "bad runs" state_is tj/bad Running
wait_until "running runs" state_is tj/running Running
wait_until "restarting runs" state_is tj/restarting Running
expect "a running job is InProgress" tj/running InProgress "every replica is running"
check "its observedGeneration is its generation" \
  "$(jpath tj/running '{.status.observedGeneration}')" "$(jpath tj/running '{.metadata.generation}')"
check "Ready is False with the reason it is not done" \
  "$(jpath tj/running '{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}')" \
  "False TrainingJobRunning"
check "and the job keeps its own conditions" \
  "$(jpath tj/running '{.status.conditions[?(@.type=="Running")].status}')" "True"
k annotate pod ok-worker-0 kubetrain.io/test-exit-code=0 >/dev/null || fail "finishing ok"
k annotate pod bad-worker-0 kubetrain.io/test-exit-code=1 >/dev/null || fail "failing bad"
k annotate pod restarting-worker-0 kubetrain.io/test-exit-code=1 >/dev/null || fail "failing restarting"
wait_until "ok succeeds" state_is tj/ok Succeeded
wait_until "bad fails" state_is tj/bad Failed
wait_until "paused is suspended" state_is tj/paused Suspended
expect "a succeeded job is Current" tj/ok Current
check "its Ready is True" "$(jpath tj/ok '{.status.conditions[?(@.type=="Ready")].status}')" True
check "and it has neither Reconciling nor Stalled" \
  "$(jpath tj/ok '{.status.conditions[?(@.type=="Reconciling")].status}{.status.conditions[?(@.type=="Stalled")].status}')" ""
expect "a failed job is Failed" tj/bad Failed "backoffLimit 0 exceeded"
check "Stalled says why it failed" \
  "$(jpath tj/bad '{.status.conditions[?(@.type=="Stalled")].reason}')" \
  "$(jpath tj/bad '{.status.conditions[?(@.type=="Failed")].reason}')"
expect "a suspended job is InProgress" tj/paused InProgress
for j in ok bad paused running; do state_column_is_true "tj/${j}"; done
# A restarting job: kwok recreates nothing by itself, so catch it either restarting or
# running again; both are InProgress, never Failed.
wait_until "restarting counts a restart" restarted tj/restarting
expect "a job that restarted is InProgress" tj/restarting InProgress
state_column_is_true tj/restarting
# Waiting for quota is InProgress, refused by Pod Security is Failed (nothing changes
# until someone acts), as in the Argo CD health check.
new_ns quota
k create quota no-pods --hard=pods=0 >/dev/null || fail "creating the quota"
kwok_job over "" OnFailure
wait_until "over is refused" field_is tj/over '{.status.conditions[?(@.type=="CreateRefused")].reason}' QuotaExceeded
expect "a job over its namespace's quota is InProgress" tj/over InProgress "cannot create pod over-worker-0"
new_ns forbidden
kubectl label namespace "${ns}" pod-security.kubernetes.io/enforce=restricted >/dev/null
privileged_job
wait_until "privileged is refused" field_is tj/privileged '{.status.conditions[?(@.type=="CreateRefused")].reason}' PodCreateForbidden
expect "a job Pod Security refuses is Failed" tj/privileged Failed "cannot create pod privileged-worker-0"

# observedGeneration: a spec edit the operator has not seen yet is InProgress,
# then Current again once it has.
ns="${namespaces[0]}"
stop_operator
k patch tj ok --type merge -p '{"spec":{"runPolicy":{"ttlSecondsAfterFinished":3600}}}' >/dev/null \
  || fail "editing ok"
expect "a spec edit the operator has not observed is InProgress" tj/ok InProgress "TrainingJob generation is"
# A job or sweep the operator has not seen: observedGeneration is 0 by the CRD's default.
kwok_job unseen "" OnFailure
cat <<SWEEP | k apply -f - >/dev/null || fail "creating sweep unseen"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: unseen}
spec:
  objective: {metric: eval.auc}
  parameters: [{name: x, type: categorical, values: ["1"]}]
  trialTemplate:
    replicaSpecs:
      Worker:
        template:
          spec:
            containers: [{name: trainer, image: kubetrain-trainer}]
SWEEP
expect "a job the operator has not seen is InProgress" tj/unseen InProgress \
  "TrainingJob generation is 1, but latest observed generation is 0"
expect "a sweep the operator has not seen is InProgress" tsw/unseen InProgress \
  "TrainingSweep generation is 1, but latest observed generation is 0"
start_operator
WAIT_SECONDS=180 wait_until "ok's edit is observed" observed tj/ok
expect "once observed, the succeeded job is Current again" tj/ok Current

# Sweeps: running (trials that have not ended) InProgress, succeeded Current,
# failed (no trial reported the metric) Failed.
new_ns sweeps
kwok_sweep hang ""
kwok_sweep win '"kubetrain.io/test-exit-code": "0", "kubetrain.io/test-termination-message": "{\"eval\": {\"auc\": 0.${params.x}}}"'
kwok_sweep lose '"kubetrain.io/test-exit-code": "0", "kubetrain.io/test-termination-message": "{\"eval\": {\"loss\": 0.${params.x}}}"'
wait_until "hang runs" state_is tsw/hang Running
wait_until "win succeeds" state_is tsw/win Succeeded
wait_until "lose fails" state_is tsw/lose Failed
expect "a running sweep is InProgress" tsw/hang InProgress
check "its observedGeneration is its generation" \
  "$(jpath tsw/hang '{.status.observedGeneration}')" "$(jpath tsw/hang '{.metadata.generation}')"
expect "a succeeded sweep is Current" tsw/win Current
expect "a failed sweep is Failed" tsw/lose Failed "all 2 trials finished"
for sw in hang win lose; do state_column_is_true "tsw/${sw}"; done
((stale_last > 0)) || fail "every object's last condition was its state: the STATE checks prove nothing"
echo "  (${stale_last} objects whose last condition is not their state)"
((failures == 0))

#!/usr/bin/env bash
# Refused pod creates on the real control plane, kwok running the pods (issue
# 28 item 1): a job the apiserver refuses says why at once and probes with one
# create at a time, then proceeds once the cause goes away.
#   (a) Pod Security: a namespace enforcing `restricted` and a privileged
#       template -> condition CreateRefused (PodCreateForbidden) and a
#       FailedCreate Warning event within 10 s; at most 6 pod creates denied in
#       the first minute, counted by the apiserver (Pod Security admission's
#       pod_security_evaluations_total, decision deny); the namespace relabelled
#       -> every pod runs within 30 s and the condition is gone.
#   (b) ResourceQuota: 2 pods allowed, a 5-pod job -> condition QuotaExceeded
#       naming the quota, 2 pods; quota raised -> all 5 run, the condition is
#       gone, and the job succeeds.
# (b) runs inside (a)'s minute, so the whole takes about 80 s.
# Usage: refused_test.sh OPERATOR_BINARY (KUBECONFIG: the test cluster).
# Prints "refused job: N pod creates in its first 60 s" (the figure for the note).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: refused_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
NS_PREFIX=refused
WAIT_SECONDS=60
work="$(mktemp -d)"
op_pid=""
cleanup() {
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; fi
  delete_namespaces
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
kubectl apply -k "${root}/deploy/kustomize/rbac" >/dev/null || { echo "RBAC rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
"${operator}" --kubeconfig "${work}/operator-kubeconfig" --metrics-addr "127.0.0.1:$(free_port)" \
  --health-addr "127.0.0.1:$(free_port)" --workers 2 --progress-qps 0 >"${work}/operator.log" 2>&1 &
op_pid=$!

# job NAME WORKERS [SECURITY-CONTEXT]: workers on kwok nodes; all must succeed.
job() {
  cat <<JOB | k apply -f - >/dev/null || fail "creating $1"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  successPolicy: AllWorkers
  replicaSpecs:
    Worker:
      replicas: $2
      template:
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer, securityContext: {${3:-}}}]
JOB
}
refused() { jpath "tj/$1" '{.status.conditions[?(@.type=="CreateRefused")].reason}'; }
refused_is() { [[ "$(refused "$1")" == "$2" ]]; }
running_pods() {
  k get pods -l "kubetrain.io/job-name=$1" --field-selector=status.phase=Running -o name | wc -l
}
runs() { [[ "$(running_pods "$1")" == "$2" ]]; }
# Pod creates Pod Security admission denied, cluster-wide, from the apiserver's metrics.
psa_denials() {
  kubectl get --raw /metrics | awk '/^pod_security_evaluations_total\{/ &&
    /decision="deny"/ && /mode="enforce"/ && /request_operation="create"/ && /resource="pod"/ {
    n += $NF } END { printf "%d\n", n }'
}
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f\n", b - a }'; }

# --- (a) Pod Security, part 1: refused, said at once.
new_ns psa
psa_ns="${ns}"
kubectl label namespace "${ns}" pod-security.kubernetes.io/enforce=restricted \
  pod-security.kubernetes.io/enforce-version=latest >/dev/null
denied_before="$(psa_denials)"
t0="$(now)"
job priv 5 "privileged: true"
WAIT_SECONDS=10 wait_until "the CreateRefused condition within 10 s" refused_is priv PodCreateForbidden
echo "  condition after $(elapsed "${t0}") s"
check "the condition quotes Pod Security" \
  "$(jpath tj/priv '{.status.conditions[?(@.type=="CreateRefused")].message}' |
    grep -c 'cannot create pod priv-worker-0: pods "priv-worker-0" is forbidden: violates PodSecurity "restricted:latest"')" 1
failed_create() {
  k get events.events.k8s.io --field-selector reason=FailedCreate -o jsonpath='{range .items[*]}{.type} {.regarding.name} {.note}{"\n"}{end}'
}
WAIT_SECONDS=10 wait_until "a FailedCreate event within 10 s" bash -c "kubectl -n ${ns} get events.events.k8s.io --field-selector reason=FailedCreate -o name | grep -q ."
check "the FailedCreate event" "$(failed_create | grep -c '^Warning priv cannot create pod priv-worker-0: .*violates PodSecurity')" 1
check "the REFUSED column" "$(k get tj priv --no-headers | awk '{print $1, $2, $3}')" "priv Created PodCreateForbidden"

# --- (b) ResourceQuota, inside (a)'s minute.
new_ns quota
k create quota two-pods --hard=pods=2 >/dev/null || fail "creating the quota"
wait_until "the quota counted" bash -c "[[ \$(kubectl -n ${ns} get quota two-pods -o jsonpath='{.status.hard.pods}') == 2 ]]"
job q 5
wait_until "the quota refusal" refused_is q QuotaExceeded
check "the condition names the quota" \
  "$(jpath tj/q '{.status.conditions[?(@.type=="CreateRefused")].message}' | grep -c 'exceeded quota: two-pods')" 1
wait_until "the 2 pods the quota allows running" runs q 2
check "pods while over quota" "$(k get pods -l kubetrain.io/job-name=q -o name | wc -l)" 2
k patch quota two-pods --type=merge -p '{"spec":{"hard":{"pods":"10"}}}' >/dev/null
t1="$(now)"
WAIT_SECONDS=30 wait_until "all 5 pods running within 30 s of the quota raised" runs q 5
echo "  quota raised -> 5 pods running in $(elapsed "${t1}") s"
wait_until "the condition gone" refused_is q ""
for i in 0 1 2 3 4; do k annotate pod "q-worker-${i}" kubetrain.io/test-exit-code=0 >/dev/null; done
wait_until "q Succeeded" bash -c "[[ \$(kubectl -n ${ns} get tj q -o jsonpath='{.status.state}') == Succeeded ]]"

# --- (a) part 2: the first minute's creates, then the namespace relabelled.
ns="${psa_ns}"
left="$(awk -v a="${t0}" -v b="$(now)" 'BEGIN { d = a + 60 - b; printf "%.2f\n", (d > 0 ? d : 0) }')"
sleep "${left}"  # the minute to count in, not synchronisation
creates=$(($(psa_denials) - denied_before))
echo "refused job: ${creates} pod creates in its first 60 s (goal: at most 6)"
((creates >= 2 && creates <= 6)) || fail "pod creates denied in the first minute: ${creates}, want 2..6"
check "no pod while refused" "$(k get pods -o name | wc -l)" 0
kubectl label namespace "${ns}" pod-security.kubernetes.io/enforce=privileged --overwrite >/dev/null
t2="$(now)"
WAIT_SECONDS=30 wait_until "all 5 pods running within 30 s of the relabel" runs priv 5
echo "  namespace relabelled -> 5 pods running in $(elapsed "${t2}") s"
wait_until "the condition gone" refused_is priv ""
check "the REFUSED column once running" "$(k get tj priv --no-headers | awk '{print $1, $2}')" "priv Running"
((failures == 0))

#!/usr/bin/env bash
# Pod Security applies to the pods the operator creates (no tenant gets a
# privileged pod through it): a job whose template asks for a privileged
# container, in a namespace enforcing `restricted`, gets no pod: the apiserver
# refuses it at creation, and the job says why (condition CreateRefused, reason
# PodCreateForbidden, the apiserver's message, the REFUSED column) with a
# FailedCreate Warning event. Relabelled `privileged`, the namespace takes the
# pod at the operator's next probe (within 20 s) and the job succeeds on the
# real node. The operator runs as installed (kustomize base).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns refused

cat <<JOB | k apply -f - >/dev/null || fail "creating the job"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: priv}
spec:
  runPolicy: {activeDeadlineSeconds: 600}
  replicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          nodeSelector: {type: real}
          containers:
            - name: trainer
              image: ${KUBETRAIN_DEBIAN_IMAGE}
              command: [sh, -c, 'exit 0']
              securityContext: {privileged: true}
JOB

refused() { jpath tj/priv '{.status.conditions[?(@.type=="CreateRefused")].reason}'; }
refused_is() { [[ "$(refused)" == "$1" ]]; }
WAIT_SECONDS=10 wait_until "the CreateRefused condition within 10 s" refused_is PodCreateForbidden
message="$(jpath tj/priv '{.status.conditions[?(@.type=="CreateRefused")].message}')"
[[ "${message}" == 'cannot create pod priv-worker-0: pods "priv-worker-0" is forbidden: violates PodSecurity "restricted:latest": '*privileged* ]] ||
  fail "the condition does not quote Pod Security: ${message}"
check "refused at creation: no pod exists" "$(k get pods -o name | wc -l)" 0
check "the REFUSED column" "$(k get tj priv --no-headers | awk '{print $2, $3}')" "Created PodCreateForbidden"
event() {
  k get events.events.k8s.io --field-selector reason=FailedCreate \
    -o jsonpath='{range .items[*]}{.type}/{.regarding.name}{"\n"}{end}'
}
wait_until "a FailedCreate Warning event" bash -c "kubectl -n ${ns} get events.events.k8s.io --field-selector reason=FailedCreate -o name | grep -q ."
check "the FailedCreate event" "$(event)" "Warning/priv"

kubectl label namespace "${ns}" pod-security.kubernetes.io/enforce=privileged --overwrite >/dev/null
wait_state priv Succeeded
check "the condition is gone" "$(refused)" ""
((failures == 0))

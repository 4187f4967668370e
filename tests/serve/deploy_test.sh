#!/usr/bin/env bash
# examples/serving/deployment.yaml on the real control plane, in a namespace that enforces
# Pod Security "restricted": applying it draws no Pod Security warning, and the ReplicaSet's
# pods are admitted (created); the same Deployment with a privilege escalation allowed is
# warned about and its pods are refused (so the check can fail). Also: the readiness probe is
# /v2/health/ready, the root filesystem read-only, the user non-root.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../tools/testlib.sh
source "${here}/../tools/testlib.sh"
NS_PREFIX=serve-deploy
example="${here}/../../examples/serving/deployment.yaml"
trap delete_namespaces EXIT

restricted_ns() {
  new_ns "$1"
  kubectl label namespace "${ns}" pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/enforce-version=latest pod-security.kubernetes.io/warn=restricted \
    pod-security.kubernetes.io/warn-version=latest >/dev/null
}

pods_created() { [[ "$(k get pods -l app.kubernetes.io/name=wide-deep-serve -o name | wc -l)" == "$1" ]]; }

case_example_is_admitted_under_restricted() {
  restricted_ns ok
  k apply -f "${example}" >"${KT_OUT}/apply.out" 2>"${KT_OUT}/apply.err" || fail "apply: $(cat "${KT_OUT}/apply.err")"
  if grep -qi "PodSecurity" "${KT_OUT}/apply.err"; then fail "Pod Security warning: $(cat "${KT_OUT}/apply.err")"; fi
  wait_until "2 pods created (admitted by Pod Security restricted)" pods_created 2
  check "readiness probe path" \
    "$(jpath deployment/wide-deep-serve '{.spec.template.spec.containers[0].readinessProbe.httpGet.path}')" \
    /v2/health/ready
  check "read-only root filesystem" \
    "$(jpath deployment/wide-deep-serve '{.spec.template.spec.containers[0].securityContext.readOnlyRootFilesystem}')" \
    true
  check "non-root" "$(jpath deployment/wide-deep-serve '{.spec.template.spec.securityContext.runAsNonRoot}')" true
  check "command" "$(jpath deployment/wide-deep-serve '{.spec.template.spec.containers[0].command[0]}')" \
    /usr/local/bin/kubetrain-serve
  check "the Service selects the pods" "$(jpath service/wide-deep-serve '{.spec.selector.app\.kubernetes\.io/name}')" \
    wide-deep-serve
}

case_a_violation_is_refused() {
  restricted_ns bad
  sed 's/allowPrivilegeEscalation: false/allowPrivilegeEscalation: true/' "${example}" |
    k apply -f - >"${KT_OUT}/bad.out" 2>"${KT_OUT}/bad.err" || fail "apply: $(cat "${KT_OUT}/bad.err")"
  grep -qi "PodSecurity" "${KT_OUT}/bad.err" || fail "no Pod Security warning for allowPrivilegeEscalation: true"
  wait_until "the ReplicaSet reports FailedCreate" \
    bash -c "kubectl -n ${ns} get events --field-selector reason=FailedCreate -o name | grep -q ."
  pods_created 0 || fail "pods were created despite the violation"
}

KT_OUT="$(mktemp -d)"
trap 'delete_namespaces; rm -rf "${KT_OUT}"' EXIT
run_cases case_example_is_admitted_under_restricted case_a_violation_is_refused

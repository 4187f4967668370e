#!/usr/bin/env bash
# Pods the kubelet cannot start: the PS reads an env var from a Secret that
# does not exist (CreateContainerConfigError), the worker names an image that
# is not on the node with imagePullPolicy Never (ErrImageNeverPull). Both stay
# Pending forever; the job says why in its CannotStart condition (reason and
# the kubelet's message) with a Warning event, then fails with
# StartDeadlineExceeded after runPolicy.startDeadlineSeconds and its pods are
# deleted (cleanPodPolicy Running), so they hold nothing. Runs on the real node.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns nostart

cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: stuck}
spec:
  runPolicy: {startDeadlineSeconds: 20, activeDeadlineSeconds: 600}
  replicaSpecs:
    PS:
      replicas: 1
      restartPolicy: Never
$(pod_template "${KUBETRAIN_DEBIAN_IMAGE}" "command: [sh, -c, 'exit 0']
              env: [{name: CREDS, valueFrom: {secretKeyRef: {name: no-such-secret, key: k}}}]")
    Worker:
      replicas: 1
      restartPolicy: Never
$(pod_template "kubetrain-no-such-image:1" "imagePullPolicy: Never")
JOB

cannot_start() { jpath tj/stuck '{.status.conditions[?(@.type=="CannotStart")].status}'; }
stuck_says() { [[ "$(cannot_start)" == True ]]; }
wait_until "the CannotStart condition" stuck_says
reason="$(jpath tj/stuck '{.status.conditions[?(@.type=="CannotStart")].reason}')"
message="$(jpath tj/stuck '{.status.conditions[?(@.type=="CannotStart")].message}')"
case "${reason}" in
  CreateContainerConfigError | ErrImageNeverPull) echo "  ok: reason ${reason}" ;;
  *) fail "CannotStart reason: got '${reason}'" ;;
esac
[[ "${message}" == *"pods cannot start; stuck-"* ]] || fail "CannotStart message: ${message}"
[[ "${message}" == *"no-such-secret"* || "${message}" == *"kubetrain-no-such-image"* ]] ||
  fail "the message does not quote the kubelet: ${message}"
[[ "$(job_state stuck)" != Failed ]] || fail "failed before its start deadline"
has_event() {
  k get events.events.k8s.io -o jsonpath='{.items[*].reason}' | tr ' ' '\n' | grep -qx CannotStart
}
wait_until "a CannotStart Warning event" has_event
wait_state stuck Failed
check "failed for the start deadline" \
  "$(jpath tj/stuck '{.status.conditions[?(@.type=="Failed")].reason}')" StartDeadlineExceeded
no_pods() { [[ -z "$(k get pods -l kubetrain.io/job-name=stuck -o name 2>/dev/null)" ]]; }
wait_until "the stuck pods are deleted" no_pods
check "CannotStart is False once the job stopped" "$(cannot_start)" False
((failures == 0))

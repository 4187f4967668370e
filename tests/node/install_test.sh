#!/usr/bin/env bash
# Install as a user does, on the real node: the kustomize base with the built
# operator image, in its namespace enforcing Pod Security `restricted`: both
# replicas Ready (a standby is Ready too), one leader; a rolling update to a new
# image tag completes (`kubectl rollout status` returns) while jobs created
# during it are reconciled to the end. Then the same through the Helm chart.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
chart="${root}/deploy/helm/kubetrain"
repo="${KUBETRAIN_OPERATOR_IMAGE%:*}"

ready_pods() {  # ready_pods NAMESPACE: the Deployment's ready replicas
  kubectl -n "$1" get deploy "$2" -o jsonpath='{.status.readyReplicas}' 2>/dev/null
}
# roll NAMESPACE DEPLOYMENT APPLY-CMD...: start a rolling update with APPLY-CMD,
# create jobs while it runs, and check it completes and the jobs succeed.
roll() {
  local opns="$1" deploy="$2" i
  shift 2
  "$@" >/dev/null || { fail "starting the rolling update failed"; return 1; }
  for i in 0 1 2; do sh_job "roll-${deploy}-${i}" "Worker=1" 'exit 0'; done
  timeout "${T}" kubectl -n "${opns}" rollout status "deploy/${deploy}" --timeout "${T}s" >/dev/null
  check "kubectl rollout status returns for ${deploy}" "$?" 0
  for i in 0 1 2; do wait_state "roll-${deploy}-${i}" Succeeded; done
  check "jobs created during the rolling update succeeded" \
    "$(for i in 0 1 2; do job_state "roll-${deploy}-${i}"; echo; done | grep -c Succeeded)" 3
  check "both replicas Ready after the update" "$(ready_pods "${opns}" "${deploy}")" 2
}

echo "== kustomize"
restricted_ns install
ensure_operator || exit 1
check "the operator's namespace enforces restricted" \
  "$(kubectl get ns kubetrain-system -o jsonpath='{.metadata.labels.pod-security\.kubernetes\.io/enforce}')" restricted
check "both replicas Ready (the standby too)" "$(ready_pods kubetrain-system kubetrain-operator)" 2
holder="$(lease_holder)"
check "one of the pods holds the Lease" "$(kubectl -n kubetrain-system get pods -o name | grep -c "/${holder}$")" 1
sh_job first "Worker=1" 'exit 0'
wait_state first Succeeded
check "a job is reconciled" "$(job_state first)" Succeeded
tag_operator_image rollout-2
roll kubetrain-system kubetrain-operator kubectl apply -k "$(kustomize_overlay rollout-2)"
operator_images() {
  kubectl -n kubetrain-system get pods -l app.kubernetes.io/name=kubetrain-operator \
    -o jsonpath='{.items[*].spec.containers[0].image}' | tr ' ' '\n' | sort -u
}
only_new_tag() { [[ "$(operator_images)" == "${repo}:rollout-2" ]]; }
# The old pods may still be terminating when rollout status returns.
wait_until "the old operator pods to go" only_new_tag
check "the pods run the new tag" "$(operator_images)" "${repo}:rollout-2"
# Back to the base image for the tests that follow; then make way for Helm.
ensure_operator
kubectl -n kubetrain-system delete deploy kubetrain-operator --wait=true --timeout "${T}s" >/dev/null

echo "== helm"
helm_ns="kubetrain-helm"
kubectl create namespace "${helm_ns}" >/dev/null 2>&1
kubectl label namespace "${helm_ns}" --overwrite pod-security.kubernetes.io/enforce=restricted >/dev/null
helm_args=(--set "image.repository=${repo}" --set "image.tag=${KUBETRAIN_OPERATOR_IMAGE##*:}")
# The kustomize install applied crds/: the release adopts them (README.md of the chart).
helm install kt "${chart}" -n "${helm_ns}" "${helm_args[@]}" --take-ownership --wait --timeout "${T}s" >/dev/null
check "helm install --wait returns" "$?" 0
check "both Helm replicas Ready" "$(ready_pods "${helm_ns}" kt-kubetrain)" 2
sh_job helm-first "Worker=1" 'exit 0'
wait_state helm-first Succeeded
check "a job is reconciled by the Helm install" "$(job_state helm-first)" Succeeded
roll "${helm_ns}" kt-kubetrain helm upgrade kt "${chart}" -n "${helm_ns}" "${helm_args[@]}" --set image.tag=rollout-2
helm uninstall kt -n "${helm_ns}" --wait --timeout "${T}s" >/dev/null
kubectl delete namespace "${helm_ns}" --wait=false >/dev/null
# Leave the kustomize install for the other node tests.
ensure_operator
((failures == 0)) && echo "install test passed"
((failures == 0))

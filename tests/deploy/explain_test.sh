#!/usr/bin/env bash
# kubectl conventions of the CRDs on the real control plane: every field under
# spec and status has a description in `kubectl explain` (fields listed by
# `kubectl explain <kind>.<spec|status> --recursive`, each then explained: the
# count without one must be 0); `kubectl get kubetrain` lists both kinds (the
# category); `kubectl get tj` and `tsw` have a REASON column that reads the
# Ready condition. Needs KUBECONFIG (the cluster fixture).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
NS_PREFIX=explain
# A fresh discovery cache: a cached one may hold an earlier CRD's categories.
export KUBECACHEDIR="$(mktemp -d)"
trap 'delete_namespaces; rm -rf "${KUBECACHEDIR}"' EXIT
kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
# The apiserver publishes a new CRD's OpenAPI a moment after it is Established.
wait_until "the CRDs' OpenAPI" kubectl explain trainingjob.status.observedGeneration
wait_until "the CRDs' OpenAPI" kubectl explain trainingsweep.status.observedGeneration

# fields KIND.TOP: every field path under TOP, from the recursive listing (two
# spaces of indentation per level; "enum: ..." lines are not fields).
fields() {
  kubectl explain "$1" --recursive | awk -v top="$1" '
    /^FIELDS:/ { on = 1; next }
    on && match($0, /^ +[A-Za-z][A-Za-z0-9_-]*\t/) {
      depth = (RLENGTH - 1 - length($1)) / 2
      name[depth] = $1
      path = top
      for (i = 1; i <= depth; i++) path = path "." name[i]
      print path
    }'
}
# undocumented PATH...: the paths whose `kubectl explain` has no description.
undocumented() {
  local p
  for p in "$@"; do
    kubectl explain "${p}" | awk '/^DESCRIPTION:/ { d = 1; next } d && /^[A-Z]+:/ { exit } d && NF { print }' |
      grep -qv '<empty>' || echo "${p}"
  done
}
for kind in trainingjob trainingsweep; do
  for top in spec status; do
    mapfile -t all < <(fields "${kind}.${top}")
    ((${#all[@]} > 5)) || fail "${kind}.${top}: kubectl explain --recursive listed only ${#all[@]} fields"
    missing="$(undocumented "${all[@]}")"
    check "${kind}.${top}: fields without a description in kubectl explain (of ${#all[@]})" \
      "$(grep -c . <<<"${missing}")" 0
    [[ -z "${missing}" ]] || echo "${missing}" | sed 's/^/    undocumented: /'
  done
done

new_ns get
cat <<OBJ | k apply -f - >/dev/null || fail "creating a job and a sweep"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: j}
spec:
  runPolicy: {suspend: true}
  replicaSpecs:
    Worker:
      template: {spec: {containers: [{name: trainer, image: kubetrain-trainer}]}}
---
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: s}
spec:
  suspend: true
  objective: {metric: eval.auc}
  parameters: [{name: x, type: categorical, values: ["1"]}]
  trialTemplate:
    replicaSpecs:
      Worker:
        template: {spec: {containers: [{name: trainer, image: kubetrain-trainer}]}}
OBJ
lists_both() { [[ "$(k get kubetrain -o name | sort | tr '\n' ' ')" == "trainingjob.kubetrain.io/j trainingsweep.kubetrain.io/s " ]]; }
wait_until "kubectl get kubetrain lists jobs and sweeps (category kubetrain)" lists_both &&
  echo "  ok: kubectl get kubetrain lists jobs and sweeps (category kubetrain)"
check "kubectl get tj has a REASON column after STATE" \
  "$(k get tj | head -1 | awk '{print $2, $3}')" "STATE REASON"
check "kubectl get tsw has a REASON column after STATE" \
  "$(k get tsw | head -1 | awk '{print $4, $5}')" "STATE REASON"
# The column reads Ready's reason (written here as the operator would).
k patch tj j --subresource=status --type merge -p \
  '{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Unschedulable","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}' \
  >/dev/null || fail "writing j's status"
check "REASON is the Ready condition's reason" "$(k get tj j --no-headers | awk '{print $3}')" Unschedulable
((failures == 0))

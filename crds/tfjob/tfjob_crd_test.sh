#!/usr/bin/env bash
# crds/tfjob/tfjobs.kubeflow.org.yaml accepts what Kubeflow training-operator
# v1.9.3's TFJob CRD accepts: every TFJob manifest of v1.9.3's module (its
# examples), ours (operator/api/testdata/tfjob, tests/cli/jobs/tfjob-*.yaml)
# and bad ones are applied (server-side dry run; the queue's immutability
# with a real create and update) under each CRD in turn on a real
# kube-apiserver, and the verdicts must be the expected ones under both.
# v1.9.3's CRD and examples come from its Go module (the module cache, else
# `go mod download`: the Go module proxy only). Leaves no TFJob CRD behind
# that it installed; refuses to run if the cluster already has one.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
: "${KUBECONFIG:?needs the test cluster}"
bin="$("${root}/tests/cluster/build")" || { echo "FAIL: cannot find the cluster binaries"; exit 1; }
export PATH="${bin}:${PATH}"
version=v1.9.3
moddir="$(go env GOMODCACHE 2>/dev/null)/github.com/kubeflow/training-operator@${version}"
if [[ ! -f "${moddir}/manifests/base/crds/kubeflow.org_tfjobs.yaml" ]]; then
  moddir="$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "github.com/kubeflow/training-operator@${version}" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
fi
peer_crd="${moddir}/manifests/base/crds/kubeflow.org_tfjobs.yaml"
[[ -f "${peer_crd}" ]] || { echo "FAIL: no training-operator ${version} module"; exit 1; }

if kubectl get crd tfjobs.kubeflow.org >/dev/null 2>&1; then
  echo "FAIL: the cluster already has a TFJob CRD; this test installs its own"
  exit 1
fi
work="$(mktemp -d /tmp/kubetrain-tfjob-crd.XXXXXX)"
installed=""
cleanup() {
  if [[ -n "${installed}" ]]; then kubectl delete crd tfjobs.kubeflow.org --wait=true >/dev/null 2>&1; fi
  rm -rf "${work}"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Good manifests: every TFJob file of v1.9.3's examples and ours, one document each.
good=()
while IFS= read -r f; do good+=("$f"); done < <(grep -rlE '^kind: "?TFJob"?' "${moddir}/examples" | sort)
((${#good[@]} >= 4)) || fail "found ${#good[@]} TFJob examples in ${moddir}/examples, want at least 4"
good+=("${root}"/operator/api/testdata/tfjob/*.yaml)
awk '/^---/{exit} {print}' "${root}/tests/cli/jobs/tfjob-tiny.yaml" >"${work}/tfjob-tiny.yaml"
good+=("${work}/tfjob-tiny.yaml")

# Bad manifests, each rejected by both CRDs.
base() {
  cat <<'YAML'
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: bad}
YAML
}
{ base; echo 'spec: {runPolicy: {}}'; } >"${work}/bad-no-specs.yaml"
{ base; echo 'spec: {tfReplicaSpecs: {Worker: {replicas: two, template: {spec: {containers: [{name: tensorflow, image: tf}]}}}}}'; } >"${work}/bad-replicas-type.yaml"
{ base; echo 'spec: {tfReplicaSpecs: {Worker: {template: {spec: {containers: [{image: tf}]}}}}}'; } >"${work}/bad-container-name.yaml"
{ base; echo 'spec: {tfReplicaSpecs: {Worker: {template: {spec: {}}}}}'; } >"${work}/bad-no-containers.yaml"
{ base; echo 'spec: {runPolicy: {suspend: "yes"}, tfReplicaSpecs: {Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}}}'; } >"${work}/bad-suspend-type.yaml"
{ base; echo 'spec: {runPolicy: {backoffLimit: 1.5}, tfReplicaSpecs: {Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}}}'; } >"${work}/bad-backoff-type.yaml"
{ base; echo 'spec: {replicaSpecs: {}, tfReplicaSpecs: {Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}}}'; } >"${work}/bad-unknown-field.yaml"
bad=("${work}"/bad-*.yaml)

# One pass under the installed CRD: "<file> accepted|rejected" per manifest.
verdicts() {
  local f
  for f in "${good[@]}" "${bad[@]}"; do
    if kubectl apply --dry-run=server --validate=strict -n default -f <(sed '/^  namespace: /d' "$f") \
      >"${work}/out" 2>&1; then
      echo "$(basename "$f") accepted"
    else
      echo "$(basename "$f") rejected"
    fi
  done
  # The queue is immutable: a real create, then an update of it.
  { base | sed 's/name: bad/name: queue-test/'
    echo 'spec: {runPolicy: {schedulingPolicy: {queue: a}}, tfReplicaSpecs: {Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}}}'; } >"${work}/queue.yaml"
  kubectl create -n default -f "${work}/queue.yaml" >/dev/null || echo "queue create failed"
  if kubectl patch -n default tfjob queue-test --type=merge \
    -p '{"spec":{"runPolicy":{"schedulingPolicy":{"queue":"b"}}}}' >"${work}/out" 2>&1; then
    echo "queue change accepted"
  else
    grep -q 'queue is immutable' "${work}/out" && echo "queue change rejected" || echo "queue change: $(cat "${work}/out")"
  fi
  # Suspend defaults to false, as v1.9.3 defaults it.
  echo "suspend default: $(kubectl get -n default tfjob queue-test -o 'jsonpath={.spec.runPolicy.suspend}')"
  kubectl delete -n default tfjob queue-test --wait=true >/dev/null
}

install() {
  kubectl apply --server-side --force-conflicts -f "$1" >/dev/null || { fail "CRD $1 rejected"; return 1; }
  installed=yes
  "${root}/tests/tools/wait-crds" crd/tfjobs.kubeflow.org >/dev/null ||
    { fail "CRD $1 not established"; return 1; }
}
uninstall() {
  kubectl delete crd tfjobs.kubeflow.org --wait=true >/dev/null || fail "CRD not deleted"
  installed=""
}

install "${root}/crds/tfjob/tfjobs.kubeflow.org.yaml" && verdicts >"${work}/ours" && uninstall
install "${peer_crd}" && verdicts >"${work}/peer" && uninstall

expected() {
  local f
  for f in "${good[@]}"; do echo "$(basename "$f") accepted"; done
  for f in "${bad[@]}"; do echo "$(basename "$f") rejected"; done
  echo "queue change rejected"
  echo "suspend default: false"
}
expected >"${work}/expected"
diff -u "${work}/expected" "${work}/peer" || fail "v1.9.3's CRD does not give the expected verdicts (the test's expectation is wrong)"
diff -u "${work}/peer" "${work}/ours" || fail "crds/tfjob/tfjobs.kubeflow.org.yaml differs from v1.9.3's CRD"
((failures == 0)) || exit 1
echo "PASS: $(wc -l <"${work}/ours") verdicts (${#good[@]} good, ${#bad[@]} bad manifests, the queue, a default): the same under both CRDs"

#!/usr/bin/env bash
# The examples on a cluster (examples/Kustomization): the commands that
# docs/user-guide.md ("Examples on a cluster") shows retarget every trainer
# container at another registry and tag (`kustomize edit set image`, the kustomize
# CLI built by tests/cluster/build-kustomize; `kubectl kustomize`), and the
# result is accepted by the apiserver (`kubectl apply --dry-run=server`, the
# CRDs' validation). Needs KUBECONFIG (the cluster fixture).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
source "${root}/tests/tools/testlib.sh"
use_test_cluster build-kustomize
NS_PREFIX=examples
work="$(mktemp -d)"
trap 'delete_namespaces; rm -rf "${work}"' EXIT
released=ghcr.io/kubetrain/kubetrain-trainer
mine=registry.example.com/ml/kubetrain-trainer:v1

# The docs' block, run as printed (with the namespace this test makes).
block="$(awk '/^### Examples on a cluster/ { s = 1 } s && /^```sh$/ { on = 1; next } on && /^```$/ { exit } on' \
  "${root}/docs/user-guide.md")"
check "the docs show the set-image command for the examples' image" \
  "$(grep -c "^kustomize edit set image ${released}=${mine}$" <<<"${block}")" 1
cp -r "${root}/examples" "${work}/"
# trainer_images: "<count> <image>" per trainer image of the containers in the YAML on stdin.
trainer_images() { python3 -c '
import sys, yaml
def walk(o):
    if isinstance(o, dict):
        for k, v in o.items():
            if k in ("containers", "initContainers"):
                for c in v:
                    if "kubetrain-trainer" in c["image"]: print(c["image"])
            else: walk(v)
    elif isinstance(o, list):
        for v in o: walk(v)
for d in yaml.safe_load_all(sys.stdin): walk(d)' | sort | uniq -c | sed 's/^ *//'; }
before="$(kubectl kustomize "${work}/examples" | trainer_images)"
check "before: every trainer container names the released image" "${before##* }" "${released}:0.1.0"
kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
new_ns apply
(cd "${work}" && eval "$(sed "s/kubectl apply -n team-a -k ./kubectl apply -n ${ns} --dry-run=server -k . >\/dev\/null/" <<<"${block}")")
check "the docs' commands run" "$?" 0
after="$(kubectl kustomize "${work}/examples" | trainer_images)"
check "after: the same containers name the new image" "${after}" "${before%% *} ${mine}"
((failures == 0))

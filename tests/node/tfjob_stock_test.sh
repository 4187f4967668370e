#!/usr/bin/env bash
# Stock TensorFlow on the real node: a Kubeflow TFJob (kubeflow.org/v1) of
# Chief + 2 PS + 1 Worker running TensorFlow's ParameterServerStrategy (Keras model.fit
# driven by a ClusterCoordinator on the chief; examples/tfjob/ps-keras.yaml and
# ps_keras.py as they are, but the image and a nodeSelector) in a namespace enforcing Pod
# Security `restricted`, TF_CONFIG written by the operator (--tfjob=all, the kustomize
# component tfjob-all) under the TFJob CRD of crds/tfjob/:
#   - the TFJob reaches Succeeded, and `kubectl get tfjob` says so (v1's State column);
#   - the PS pods (and the worker), still serving at success, are removed after it;
#   - the chief's log shows training ran: variables on both PS, 30 steps, the loss fell.
# The image (TensorFlow from a venv made on the host, Debian's python3) is built by
# tests/cluster/build-tf-image, cached by content, and imported into the node here.
# Puts the fixture's plain operator install back and removes the TFJob CRD at the end.
# Prints the seconds each phase took (image, import, to Succeeded).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
crd="${root}/crds/tfjob/tfjobs.kubeflow.org.yaml"
job=ps-keras

restore() {  # after node_cleanup (which prints the operator's logs on failure)
  node_cleanup
  mkdir -p "${work}"
  ensure_operator >/dev/null 2>&1
  kubectl delete crd tfjobs.kubeflow.org --wait=false >/dev/null 2>&1
  rm -rf "${work}"
}
trap restore EXIT

t0=${SECONDS}
read -r tf_image tf_archive < <("${root}/tests/cluster/build-tf-image" "${KUBETRAIN_DEBIAN_ARCHIVE}")
[[ -n "${tf_archive:-}" && -f "${tf_archive}" ]] || { fail "building the TensorFlow image failed"; exit 1; }
t_image=$((SECONDS - t0))
t0=${SECONDS}
# (Listed, then searched: grep -q would end ctr's pipe early, and pipefail fail it.)
node_images="$(ctr_ images ls -q)" || { fail "listing the node's images failed"; exit 1; }
if ! grep -qxF "${tf_image}" <<<"${node_images}"; then
  ctr_ images import --no-unpack=false "${tf_archive}" >/dev/null || { fail "importing ${tf_archive} failed"; exit 1; }
fi
t_import=$((SECONDS - t0))
echo "tfjob_stock: image ${tf_image}: built or found in ${t_image} s, imported in ${t_import} s"

# The TFJob CRD first: the operator asks at start-up whether TFJobs are served.
kubectl apply --server-side -f "${crd}" >/dev/null || { fail "the TFJob CRD was rejected"; exit 1; }
"${root}/tests/tools/wait-crds" --timeout "${T}" crd/tfjobs.kubeflow.org >/dev/null ||
  { fail "the TFJob CRD is not Established"; exit 1; }
# The fixture's install plus the component tfjob-all (its RBAC and --tfjob=all).
tag="${KUBETRAIN_OPERATOR_IMAGE##*:}"
tag_operator_image "${tag}"
base_overlay="$(kustomize_overlay "${tag}")"
tf_overlay="${work}/overlay-tfjob"
mkdir -p "${tf_overlay}"
cat >"${tf_overlay}/kustomization.yaml" <<KUST
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [$(realpath --relative-to="${tf_overlay}" "${base_overlay}")]
components: [$(realpath --relative-to="${tf_overlay}" "${root}/deploy/kustomize/components/tfjob-all")]
KUST
kubectl apply -k "${tf_overlay}" >/dev/null || { fail "kubectl apply -k (tfjob-all) failed"; exit 1; }
kubectl -n kubetrain-system rollout status deploy/kubetrain-operator --timeout "${T}s" >/dev/null ||
  { fail "the operator with --tfjob=all did not roll out"; exit 1; }
check "the operator runs with --tfjob=all" \
  "$(kubectl -n kubetrain-system get deploy kubetrain-operator -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -c -- '--tfjob=all')" 1

restricted_ns tfstock
k create configmap ps-keras --from-file="${root}/examples/tfjob/ps_keras.py" >/dev/null
# The example with the built image, its pods on the real node.
kubectl create --dry-run=client -o json -f "${root}/examples/tfjob/ps-keras.yaml" |
  python3 -c '
import json, sys
job = json.load(sys.stdin)
job["metadata"].pop("namespace", None)
for spec in job["spec"]["tfReplicaSpecs"].values():
    pod = spec["template"]["spec"]
    pod["nodeSelector"] = {"type": "real"}
    pod["containers"][0]["image"] = sys.argv[1]
json.dump(job, sys.stdout)' "${tf_image}" >"${work}/tfjob.json" || { fail "rendering the example failed"; exit 1; }
t0=${SECONDS}
k apply -f "${work}/tfjob.json" >/dev/null || { fail "the TFJob was rejected"; exit 1; }

state() { k get tfjob "${job}" --no-headers 2>/dev/null | awk '{print $2}'; }
finished() { [[ "$(state)" == Succeeded || "$(state)" == Failed ]]; }
# TensorFlow's start-up (import, gRPC servers) on 2 shared cores: minutes, not seconds.
WAIT_SECONDS=600 wait_until "the TFJob to finish (Succeeded or Failed)" finished
t_run=$((SECONDS - t0))
check "kubectl get tfjob says Succeeded" "$(state)" Succeeded
# The chief may have been restarted (OnFailure) while the PS came up: say so.
chief_log="$(k logs "${job}-chief-0" 2>&1)"
echo "tfjob_stock: Succeeded ${t_run} s after apply; chief restarts:" \
  "$(k get pod "${job}-chief-0" -o jsonpath='{.status.containerStatuses[0].restartCount}' 2>/dev/null)"

# cleanPodPolicy (unset: kubetrain's Running): the PS and the worker still serve when
# the chief ends; the operator deletes them.
job_pods_of() {  # job_pods_of TYPE: pods of the job's TYPE replicas
  k get pods -l "training.kubeflow.org/job-name=${job},training.kubeflow.org/replica-type=$1" -o name 2>/dev/null
}
no_ps() { [[ -z "$(job_pods_of ps)" && -z "$(job_pods_of worker)" ]]; }
t0=${SECONDS}
wait_until "the PS and worker pods to be removed after success" no_ps
t_clean=$((SECONDS - t0))
check "PS pods left after success" "$(job_pods_of ps | wc -l)" 0
check "worker pods left after success" "$(job_pods_of worker | wc -l)" 0
check "the chief pod stays, Succeeded" "$(k get pod "${job}-chief-0" -o jsonpath='{.status.phase}' 2>/dev/null)" Succeeded

# Training ran, through the cluster TF_CONFIG described.
check "the chief saw 2 PS and 1 worker" "$(grep -c 'chief: 2 PS, 1 worker(s)' <<<"${chief_log}")" 1
check "variables on both PS" \
  "$(grep 'chief: variables on' <<<"${chief_log}" | grep -c '/job:ps/replica:0/task:0/.*/job:ps/replica:0/task:1/')" 1
check "3 epochs logged" "$(grep -cE '^epoch [0-9]+: step [0-9]+ loss [0-9.]+$' <<<"${chief_log}")" 3
check "the chief trained 30 steps and its loss fell" \
  "$(grep -cE '^trained 30 steps, loss [0-9.]+ \(first epoch [0-9.]+\)$' <<<"${chief_log}")" 1
kubectl get tfjob -n "${ns}" "${job}" | sed 's/^/  /'
grep -E '^(epoch|trained) ' <<<"${chief_log}" | sed 's/^/  chief: /'
if ((failures)); then
  k get tfjob "${job}" -o yaml | tail -40
  k get pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 20 2>&1; done
fi
((failures == 0)) &&
  echo "tfjob_stock test passed (image ${t_image} s, import ${t_import} s, job ${t_run} s, PS and worker gone ${t_clean} s later)"
((failures == 0))

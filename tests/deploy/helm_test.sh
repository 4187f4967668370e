#!/usr/bin/env bash
# The Helm chart for production, on the real control plane:
#   - its README lists every value of values.yaml;
#   - values.schema.json: a wrong type or an unknown value fails `helm install`
#     with a message naming the value, and nothing is installed;
#   - each combination of values below passes `helm lint --strict` and
#     `helm template | kubectl apply --dry-run=server` (Prometheus Operator's
#     ServiceMonitor/PodMonitor CRDs from its Go module, tests/cluster/prometheus-crds);
#   - `helm upgrade` from chart 0.1.0 (CRDs in crds/, never upgraded by Helm)
#     upgrades the CRDs, with --take-ownership once; `helm uninstall` keeps them and
#     the jobs.
# Needs KUBECONFIG (the cluster fixture) and a git checkout (the 0.1.0 chart).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
source "${root}/tests/tools/testlib.sh"
use_test_cluster build-helm
NS_PREFIX=helm
chart="${root}/deploy/helm/kubetrain"
# The last commit with chart 0.1.0 (CRDs in crds/, no State column description).
previous=9774966a199df945ca270f1f9bd1f3389cc6d662
work="$(mktemp -d)"
up_ns=""
cleanup() {
  [[ -n "${up_ns}" ]] && helm uninstall kt-up -n "${up_ns}" >/dev/null 2>&1
  delete_namespaces
  rm -rf "${work}"
}
trap cleanup EXIT
h() { helm "$@" 2>&1 | grep -v 'found symbolic link in path'; return "${PIPESTATUS[0]}"; }

# Every value is in the README's table (a leaf: not a map, or an empty one).
missing="$(python3 - "${chart}" <<'PY'
import re, sys, yaml
chart = sys.argv[1]
documented = set(re.findall(r"^\| `([^`]+)` \|", open(chart + "/README.md").read(), re.M))
def leaves(d, p=""):  # a documented map (resources) is one value
    for k, v in d.items():
        if isinstance(v, dict) and v and p + k not in documented: yield from leaves(v, p + k + ".")
        else: yield p + k
values = set(leaves(yaml.safe_load(open(chart + "/values.yaml"))))
print(" ".join(sorted(values - documented)), "|", " ".join(sorted(documented - values)))
PY
)"
check "README.md's table lists every value, and only those (missing | extra)" "${missing}" " | "

# The schema, at `helm install`: nothing is created.
new_ns schema
got="$(helm install kt-bad "${chart}" -n "${ns}" --set replicaCount=two 2>&1)"
check "helm install with replicaCount=two fails" "$?" 1
[[ "${got}" == *"- at '/replicaCount': got string, want integer"* ]] ||
  fail "the schema's message does not name replicaCount and the type: ${got}"
got="$(helm install kt-bad "${chart}" -n "${ns}" --set replicas=2 2>&1)"
[[ "${got}" == *"additional properties 'replicas' not allowed"* ]] ||
  fail "an unknown value is not refused by name: ${got}"
got="$(helm install kt-bad "${chart}" -n "${ns}" --set logLevel=verbose 2>&1)"
[[ "${got}" == *"/logLevel"*"value must be one of"* ]] || fail "logLevel=verbose is not refused: ${got}"
got="$(helm install kt-bad "${chart}" -n "${ns}" --set tfjob.enabled=true --set tfjob.mode=everything 2>&1)"
[[ "${got}" == *"/tfjob/mode"*"value must be one of 'managed', 'all'"* ]] || fail "tfjob.mode=everything is not refused: ${got}"
check "nothing was installed" "$(helm list -n "${ns}" -a -q)" ""

# Values combinations: lint --strict, then a server-side dry run of what they render
# (every namespaced object names its namespace).
kubectl apply --server-side -f "$("${root}/tests/cluster/prometheus-crds")" >/dev/null ||
  fail "Prometheus Operator's CRDs rejected"
"${root}/tests/tools/wait-crds" crd/servicemonitors.monitoring.coreos.com crd/podmonitors.monitoring.coreos.com >/dev/null
new_ns combos
combos_ns="${ns}"
new_ns watched-a
new_ns watched-b
watched="${namespaces[-2]},${namespaces[-1]}"
ns="${combos_ns}"
declare -A combos=(
  [default]=""
  [single]="--set replicaCount=1 --set leaderElection.enabled=false"
  [production]="--set imagePullSecrets[0].name=regcred --set podAnnotations.team=ml \
--set priorityClassName=system-cluster-critical --set resources.requests.cpu=200m --set resources.limits.memory=512Mi \
--set-json topologySpreadConstraints=[{\"maxSkew\":1,\"topologyKey\":\"kubernetes.io/hostname\",\"whenUnsatisfiable\":\"ScheduleAnyway\"}] \
--set extraArgs[0]=--progress-qps=5 --set metrics.serviceMonitor.enabled=true --set metrics.serviceMonitor.labels.release=prom \
--set metrics.podMonitor.enabled=true --set podDisruptionBudget.maxUnavailable=50%"
  [namespaced]="--set watchNamespaces={${watched}} --set kueue.enabled=true --set gangScheduling.enabled=true \
--set tfjob.enabled=true"
  [tfjob]="--set tfjob.enabled=true --set tfjob.mode=all --set tfjob.installCRD=true"
  [minimal]="--set crds.install=false --set networkPolicy=false --set operatorNetworkPolicy.enabled=false \
--set rbac.aggregateToDefaultRoles=false --set podDisruptionBudget.enabled=false --set metrics.service.enabled=true"
)
# What each renders, by kind (a count of each kind, sorted).
declare -A want_kinds=(
  [default]="ClusterRole=3 ClusterRoleBinding=1 CustomResourceDefinition=2 Deployment=1 NetworkPolicy=1 PodDisruptionBudget=1 Role=1 RoleBinding=1 ServiceAccount=1"
  [single]="ClusterRole=3 ClusterRoleBinding=1 CustomResourceDefinition=2 Deployment=1 NetworkPolicy=1 ServiceAccount=1"
  [production]="ClusterRole=3 ClusterRoleBinding=1 CustomResourceDefinition=2 Deployment=1 NetworkPolicy=1 PodDisruptionBudget=1 PodMonitor=1 Role=1 RoleBinding=1 Service=1 ServiceAccount=1 ServiceMonitor=1"
  [namespaced]="ClusterRole=3 ClusterRoleBinding=1 CustomResourceDefinition=2 Deployment=1 NetworkPolicy=1 PodDisruptionBudget=1 Role=3 RoleBinding=3 ServiceAccount=1"
  [minimal]="ClusterRole=1 ClusterRoleBinding=1 Deployment=1 Role=1 RoleBinding=1 Service=1 ServiceAccount=1"
  [tfjob]="ClusterRole=3 ClusterRoleBinding=1 CustomResourceDefinition=3 Deployment=1 NetworkPolicy=1 PodDisruptionBudget=1 Role=1 RoleBinding=1 ServiceAccount=1"
)
kinds() { python3 -c '
import collections, sys, yaml
c = collections.Counter(d["kind"] for d in yaml.safe_load_all(sys.stdin) if d)
print(" ".join("%s=%d" % kv for kv in sorted(c.items())))'; }
for combo in default single production namespaced minimal tfjob; do
  read -r -a args <<<"${combos[${combo}]}"
  h lint --strict "${chart}" "${args[@]}" >"${work}/lint" || { fail "${combo}: helm lint --strict"; cat "${work}/lint"; }
  h template kt-combo "${chart}" -n "${ns}" "${args[@]}" >"${work}/${combo}.yaml" || fail "${combo}: helm template"
  check "${combo}: the objects it renders" "$(kinds <"${work}/${combo}.yaml")" "${want_kinds[${combo}]}"
  kubectl apply --dry-run=server -f "${work}/${combo}.yaml" >"${work}/apply" 2>&1 ||
    { fail "${combo}: kubectl apply --dry-run=server"; grep -v -i 'configured\|created\|unchanged' "${work}/apply"; }
done
check "production: the pods' spec as the values say" "$(python3 -c '
import sys, yaml
d = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] == "Deployment"][0]["spec"]["template"]
s = d["spec"]
print(d["metadata"]["annotations"]["team"], s["imagePullSecrets"][0]["name"], s["priorityClassName"],
      s["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"],
      s["containers"][0]["args"][-1], s["containers"][0]["resources"]["requests"]["cpu"])' "${work}/production.yaml")" \
  "ml regcred system-cluster-critical kt-combo --progress-qps=5 200m"
check "the chart's CRDs are crds/ (but for labels and the keep annotation)" "$(python3 - "${work}/tfjob.yaml" "${root}/crds" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "CustomResourceDefinition":
        md = d["metadata"]
        keep = md.pop("annotations")["helm.sh/resource-policy"]
        md.pop("labels")
        sub = "tfjob/" if md["name"] == "tfjobs.kubeflow.org" else ""
        print(md["name"], keep, d == yaml.safe_load(open("%s/%s%s.yaml" % (sys.argv[2], sub, md["name"]))))
PY
)" "trainingjobs.kubetrain.io keep True
trainingsweeps.kubetrain.io keep True
tfjobs.kubeflow.org keep True"
# TFJobs: the mode is the operator's flag, the RBAC follows tfjob.enabled, the CRD only by choice.
tfjob_shape() {  # tfjob_shape FILE: the --tfjob args, the tfjobs rules' resources, the TFJob CRD
  python3 - "$1" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
dep = [d for d in docs if d["kind"] == "Deployment"][0]
args = [a for a in dep["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--tfjob")]
res = sorted({"%s:%s" % (r, ",".join(rule["verbs"])) for d in docs if d["kind"] in ("ClusterRole", "Role")
              and not d["metadata"]["name"].endswith(("-edit", "-view"))
              for rule in d.get("rules") or [] if "kubeflow.org" in rule["apiGroups"] for r in rule["resources"]})
crd = [d["metadata"]["name"] for d in docs if d["kind"] == "CustomResourceDefinition" and "kubeflow" in d["metadata"]["name"]]
print(" ".join(args) or "-", " ".join(res) or "-", " ".join(crd) or "-")
PY
}
check "tfjob: --tfjob=all, the TFJob RBAC and CRD" "$(tfjob_shape "${work}/tfjob.yaml")" \
  "--tfjob=all tfjobs/finalizers:update tfjobs/status:get,update,patch tfjobs:get,list,watch,patch,delete tfjobs.kubeflow.org"
check "tfjob: the namespaced install's Roles have the TFJob rules (mode managed by default), no CRD" \
  "$(tfjob_shape "${work}/namespaced.yaml")" \
  "--tfjob=managed tfjobs/finalizers:update tfjobs/status:get,update,patch tfjobs:get,list,watch,patch,delete -"
check "tfjob: off by default: no flag, no rule, no CRD" "$(tfjob_shape "${work}/default.yaml")" "- - -"

# helm upgrade from chart 0.1.0 changes the CRD. The 0.1.0 chart installs its CRDs from
# crds/ (here, where they exist already, Helm skips them) and never upgrades them. What
# the upgrade changes is the printer columns (STATE's description): the live CRDs get
# 0.1.0's columns first. Only the columns: other tests share these CRDs while this
# one runs, and an older schema would prune the fields they write.
git -C "${root}" archive "${previous}" deploy/helm/kubetrain crds | tar -x -C "${work}" ||
  { fail "the 0.1.0 chart from git (${previous})"; exit 1; }
check "the previous chart is 0.1.0" "$(awk '/^version:/ {print $2}' "${work}/deploy/helm/kubetrain/Chart.yaml")" 0.1.0
state_description() {
  kubectl get crd trainingjobs.kubetrain.io \
    -o jsonpath='{.spec.versions[0].additionalPrinterColumns[?(@.name=="State")].description}'
}
kubectl apply -k "${root}/crds" >/dev/null || fail "applying crds/"
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
for plural in trainingjobs trainingsweeps; do
  kubectl patch crd "${plural}.kubetrain.io" --type json -p "$(python3 -c '
import json, sys, yaml
crd = yaml.safe_load(open(sys.argv[1]))
print(json.dumps([{"op": "replace", "path": "/spec/versions/0/additionalPrinterColumns",
                   "value": crd["spec"]["versions"][0]["additionalPrinterColumns"]}]))' \
    "${work}/crds/${plural}.kubetrain.io.yaml")" >/dev/null || fail "giving ${plural} 0.1.0's printer columns"
done
check "0.1.0's printer columns: STATE has no description" \
  "$(kubectl get crd trainingjobs.kubetrain.io -o jsonpath='{.spec.versions[0].additionalPrinterColumns[0].name}')/$(state_description)" "State/"
new_ns upgrade
up_ns="${ns}"
up_args=(-n "${up_ns}" --set replicaCount=0)  # no pods: the image is not pulled here
h install kt-up "${work}/deploy/helm/kubetrain" "${up_args[@]}" >/dev/null || fail "helm install of 0.1.0"
cat <<JOB | k apply -f - >/dev/null || fail "creating a job"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: survivor}
spec:
  runPolicy: {suspend: true}
  replicaSpecs:
    Worker:
      template: {spec: {containers: [{name: trainer, image: kubetrain-trainer}]}}
JOB
got="$(h upgrade kt-up "${chart}" "${up_args[@]}")"
check "helm upgrade from 0.1.0 without --take-ownership fails" "$?" 1
[[ "${got}" == *'CustomResourceDefinition "trainingjobs.kubetrain.io"'*"exists and cannot be imported into the current release"* ]] ||
  fail "its message does not say the CRD must be adopted: ${got}"
check "... and leaves the CRD as it was" "$(state_description)" ""
got="$(h upgrade kt-up "${chart}" "${up_args[@]}" --take-ownership)"
check "helm upgrade --take-ownership from 0.1.0" "$?" 0
[[ "$(state_description)" == "The job's state as its conditions say it:"* ]] ||
  fail "helm upgrade did not upgrade the CRD: State's description is '$(state_description)'"
check "the release owns the CRDs and keeps them" \
  "$(kubectl get crd trainingjobs.kubetrain.io trainingsweeps.kubetrain.io -o jsonpath='{range .items[*]}{.metadata.annotations.meta\.helm\.sh/release-name}/{.metadata.annotations.helm\.sh/resource-policy} {end}')" \
  "kt-up/keep kt-up/keep "
[[ "${got}" == *"kubectl get tj -w"* ]] || fail "helm upgrade did not print NOTES.txt: ${got}"
h upgrade kt-up "${chart}" "${up_args[@]}" --set logLevel=debug >/dev/null
check "a later upgrade needs no flag" "$?" 0
h uninstall kt-up -n "${up_ns}" >/dev/null
check "helm uninstall" "$?" 0
up_ns=""
check "helm uninstall keeps the CRDs and the jobs" \
  "$(kubectl get crd trainingjobs.kubetrain.io -o name)/$(k get tj survivor -o name)" \
  "customresourcedefinition.apiextensions.k8s.io/trainingjobs.kubetrain.io/trainingjob.kubetrain.io/survivor"
((failures == 0)) && echo "helm test passed"
((failures == 0))

#!/usr/bin/env bash
# The Helm chart and the kustomize base install on the real control plane and
# grant the operator exactly what it needs (checked with `kubectl auth can-i`
# as the operator's ServiceAccount), and namespace users with the built-in
# edit/view roles what they need (aggregated ClusterRoles, checked with
# `kubectl auth can-i --as` for each install). Needs KUBECONFIG (the cluster fixture).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
source "${root}/tests/tools/testlib.sh"
use_test_cluster build-helm
chart="${root}/deploy/helm/kubetrain"
ns=kubetrain-helm
trap 'kubectl delete namespace "${ns}" kt-users --wait=false >/dev/null 2>&1' EXIT

for f in "${root}"/crds/*.kubetrain.io.yaml; do
  check "the chart ships $(basename "${f}") as crds/ has it" \
    "$(cmp -s "${f}" "${chart}/files/$(basename "${f}")"; echo $?)" 0
done
check "helm lint" "$(helm lint "${chart}" >/dev/null 2>&1; echo $?)" 0
check "two replicas without leader election are refused" \
  "$(helm template kt "${chart}" --set replicaCount=2 --set leaderElection.enabled=false 2>&1 | grep -c 'needs leaderElection.enabled')" 1

# The operator's own NetworkPolicy: ingress to the health port from anywhere and
# to the metrics port from the monitoring namespace(s), nothing else; each
# install can drop it.
policy_shape() {  # reads YAML documents, prints the NetworkPolicy's ingress rules in one line
  python3 -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d.get("kind") == "NetworkPolicy":
        rules = []
        for r in d["spec"].get("ingress") or []:
            ports = ",".join(str(p["port"]) for p in r.get("ports", []))
            srcs = ",".join(f["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                            for f in r.get("from", []))
            rules.append(ports + "<-" + (srcs or "*"))
        print(d["spec"]["policyTypes"], " ".join(rules))'
}
check "helm: operator NetworkPolicy by default" \
  "$(helm template kt "${chart}" -n "${ns}" 2>/dev/null | policy_shape)" "['Ingress'] 8081<-* 8080<-monitoring"
check "helm: its ports follow the values, metrics from the listed namespaces" \
  "$(helm template kt "${chart}" -n "${ns}" --set healthPort=9441 --set metricsPort=9440 \
      --set-json 'operatorNetworkPolicy.metricsFromNamespaces=["prom","ops"]' 2>/dev/null | policy_shape)" \
  "['Ingress'] 9441<-* 9440<-prom,ops"
check "helm: healthFromAnywhere=false leaves only the metrics rule" \
  "$(helm template kt "${chart}" -n "${ns}" --set operatorNetworkPolicy.healthFromAnywhere=false 2>/dev/null | policy_shape)" \
  "['Ingress'] 8080<-monitoring"
check "helm: operatorNetworkPolicy.enabled=false renders none" \
  "$(helm template kt "${chart}" -n "${ns}" --set operatorNetworkPolicy.enabled=false 2>/dev/null | policy_shape)" ""
check "kustomize: operator NetworkPolicy in the base" \
  "$(kubectl kustomize "${root}/deploy/kustomize/base" | policy_shape)" "['Ingress'] 8081<-* 8080<-monitoring"
overlay="$(mktemp -d)"
printf 'resources: [%s]\ncomponents: [%s]\n' \
  "$(realpath --relative-to="${overlay}" "${root}/deploy/kustomize/base")" \
  "$(realpath --relative-to="${overlay}" "${root}/deploy/kustomize/components/no-network-policy")" \
  >"${overlay}/kustomization.yaml"
check "kustomize: components/no-network-policy drops it" \
  "$(kubectl kustomize "${overlay}" | policy_shape)" ""
check "kustomize: ... and keeps the deployment" \
  "$(kubectl kustomize "${overlay}" | grep -c '^kind: Deployment')" 1
# The TFJob components: the operator's flag and the TFJob RBAC, no CRD.
tfjob_overlay() {  # tfjob_overlay COMPONENT: the base with it, rendered
  printf 'resources: [%s]\ncomponents: [%s]\n' \
    "$(realpath --relative-to="${overlay}" "${root}/deploy/kustomize/base")" \
    "$(realpath --relative-to="${overlay}" "${root}/deploy/kustomize/components/$1")" \
    >"${overlay}/kustomization.yaml"
  kubectl kustomize "${overlay}" | python3 -c '
import sys, yaml
docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
dep = [d for d in docs if d["kind"] == "Deployment"][0]
args = [a for a in dep["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("--tfjob")]
res = sorted({"%s:%s" % (r, ",".join(rule["verbs"])) for d in docs if d["kind"] == "ClusterRole"
              for rule in d["rules"] if "kubeflow.org" in rule["apiGroups"] for r in rule["resources"]})
bound = [d["subjects"][0]["name"] for d in docs if d["kind"] == "ClusterRoleBinding" and d["roleRef"]["name"] == "kubetrain-operator-tfjob"]
crds = sum(d["kind"] == "CustomResourceDefinition" for d in docs)
print(" ".join(args), " ".join(res), "bound to", " ".join(bound), "CRDs", crds)'
}
tfjob_rules="tfjobs/finalizers:update tfjobs/status:get,update,patch tfjobs:get,list,watch,patch,delete"
check "kustomize: components/tfjob: --tfjob=managed, the TFJob RBAC, no CRD" \
  "$(tfjob_overlay tfjob)" "--tfjob=managed ${tfjob_rules} bound to kubetrain-operator CRDs 0"
check "kustomize: components/tfjob-all: --tfjob=all, the same RBAC" \
  "$(tfjob_overlay tfjob-all)" "--tfjob=all ${tfjob_rules} bound to kubetrain-operator CRDs 0"
rm -rf "${overlay}"

# The jobs' NetworkPolicies admit the operator's pods and the monitoring namespaces given.
metrics_args="$(helm template kt "${chart}" -n "${ns}" \
  --set-json 'networkPolicyMetricsFrom=[{"kubernetes.io/metadata.name":"monitoring"},{"a":"1","b":"2"}]' 2>/dev/null |
  grep -E -- '--(operator-namespace|operator-pod-labels|network-policy-metrics-from)=' | tr -d ' ' | tr '\n' ' ')"
check "the operator's identity and monitoring namespaces for the jobs' NetworkPolicies" "${metrics_args}" \
  "---operator-namespace=${ns} ---operator-pod-labels=app.kubernetes.io/name=kubetrain-operator,app.kubernetes.io/instance=kt ---network-policy-metrics-from=kubernetes.io/metadata.name=monitoring ---network-policy-metrics-from=a=1,b=2 "

# Namespace users through the built-in roles: alice has `edit` in ${users}, bob
# `view`. Each install aggregates its own two ClusterRoles into them; checked one
# install at a time (the others' roles deleted first: other tests apply the base).
users=kt-users
user_roles=(kubetrain-edit kubetrain-view kt-kubetrain-edit kt-kubetrain-view kts-kubetrain-edit kts-kubetrain-view)
kubectl delete clusterrole "${user_roles[@]}" --ignore-not-found >/dev/null
kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" -f "${root}/crds/trainingsweeps.kubetrain.io.yaml" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
kubectl create namespace "${users}" >/dev/null 2>&1
kubectl -n "${users}" create rolebinding alice-edit --clusterrole=edit --user=alice >/dev/null 2>&1
kubectl -n "${users}" create rolebinding bob-view --clusterrole=view --user=bob >/dev/null 2>&1
user_can_is() {  # user_can_is ANSWER USER VERB RESOURCE: for wait_until (re-asks each poll)
  [[ "$(user_can "${@:2}")" == "$1" ]]
}
user_can() {  # user_can USER VERB RESOURCE[/SUBRESOURCE]
  local args=("$2" "${3%%/*}" -n "${users}" --as="$1")
  [[ "$3" == */* ]] && args+=(--subresource="${3#*/}")
  kubectl auth can-i "${args[@]}" 2>/dev/null
}
users_can() {  # users_can INSTALL: what alice (edit) and bob (view) may do
  local r
  wait_until "$1: edit may create trainingjobs" user_can_is yes alice create trainingjobs.kubetrain.io
  wait_until "$1: view may list trainingsweeps" user_can_is yes bob list trainingsweeps.kubetrain.io
  for r in trainingjobs.kubetrain.io trainingsweeps.kubetrain.io; do
    check "$1: edit may create, delete, patch, watch ${r%%.*}" \
      "$(user_can alice create "${r}")/$(user_can alice delete "${r}")/$(user_can alice patch "${r}")/$(user_can alice watch "${r}")" \
      yes/yes/yes/yes
    check "$1: view may get, list, watch ${r%%.*} and its status" \
      "$(user_can bob get "${r}")/$(user_can bob list "${r}")/$(user_can bob watch "${r}")/$(user_can bob get "${r}/status")" \
      yes/yes/yes/yes
    check "$1: view may not create, delete or patch ${r%%.*}" \
      "$(user_can bob create "${r}")/$(user_can bob delete "${r}")/$(user_can bob patch "${r}")" no/no/no
    check "$1: edit may not write ${r%%.*}/status (the operator's)" "$(user_can alice update "${r}/status")" no
  done
}
wait_until "no install: edit may not create trainingjobs" \
  user_can_is no alice create trainingjobs.kubetrain.io
check "no install: edit may not create trainingjobs" "$(user_can alice create trainingjobs.kubetrain.io)" no

kubectl create namespace "${ns}" >/dev/null
helm template kt "${chart}" -n "${ns}" --include-crds 2>/dev/null | kubectl apply -n "${ns}" -f - >/dev/null
check "chart applied" "$?" 0
users_can helm
# TFJobs join the users' roles only with the chart's own TFJob CRD
# (tfjob.installCRD). Read from the rules: the TFJob CRD need not be installed
# here, and can-i cannot resolve a resource the server does not serve.
user_tfjob_rows() {  # user_tfjob_rows USER: the tfjobs rows of its `kubectl auth can-i --list`, in one line
  kubectl auth can-i --list -n "${users}" --as="$1" 2>/dev/null |
    sed -nE 's/^(tfjobs\.kubeflow\.org[^ ]*) +\[\] +\[\] +(\[[^]]*\]).*/\1 \2/p' | sort | tr '\n' ' '
}
user_tfjob_rows_are() { [[ "$(user_tfjob_rows "$1")" == "$2" ]]; }  # for wait_until
check "helm: no TFJob rights for users without tfjob.installCRD" \
  "$(user_tfjob_rows alice)/$(user_tfjob_rows bob)" /
helm template kt "${chart}" -n "${ns}" --set tfjob.installCRD=true --show-only templates/user-roles.yaml 2>/dev/null |
  kubectl apply -f - >/dev/null
# edit includes view: it reads tfjobs/status and never writes it (the operator's).
edit_tfjobs="tfjobs.kubeflow.org [create delete deletecollection get list patch update watch] tfjobs.kubeflow.org/status [get list watch] "
view_tfjobs="tfjobs.kubeflow.org [get list watch] tfjobs.kubeflow.org/status [get list watch] "
wait_until "helm, tfjob.installCRD: edit may create, change and delete tfjobs" user_tfjob_rows_are alice "${edit_tfjobs}"
wait_until "helm, tfjob.installCRD: view may read tfjobs and their status" user_tfjob_rows_are bob "${view_tfjobs}"
check "helm, tfjob.installCRD: edit's TFJob rights (tfjobs/status read only: the operator's)" \
  "$(user_tfjob_rows alice)" "${edit_tfjobs}"
check "helm, tfjob.installCRD: view's TFJob rights (read only)" "$(user_tfjob_rows bob)" "${view_tfjobs}"
kubectl delete clusterrole kt-kubetrain-edit kt-kubetrain-view >/dev/null
wait_until "helm's roles gone: edit may not create trainingjobs" \
  user_can_is no alice create trainingjobs.kubetrain.io
check "helm: rbac.aggregateToDefaultRoles=false renders no user roles" \
  "$(helm template kt "${chart}" --set rbac.aggregateToDefaultRoles=false 2>/dev/null | grep -c 'aggregate-to-')" 0
check "deployment leads in its own namespace" \
  "$(kubectl -n "${ns}" get deploy kt-kubetrain -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -c -- "--leader-elect-namespace=${ns}")" 1
kubectl apply -k "${root}/deploy/kustomize/base" >/dev/null
check "kustomize base applied" "$?" 0
# Uninstalling the operator leaves the CRDs, and so every job, in place.
check "kustomize: the base holds no CRD (crds/ is installed on its own)" \
  "$(kubectl kustomize "${root}/deploy/kustomize/base" | grep -c '^kind: CustomResourceDefinition')" 0
deleted="$(kubectl delete -k "${root}/deploy/kustomize/base" --dry-run=server -o name 2>/dev/null)"
check "kubectl delete -k base deletes the operator" "$(grep -c '^deployment.apps/kubetrain-operator$' <<<"${deleted}")" 1
check "kubectl delete -k base deletes no CRD" "$(grep -c customresourcedefinition <<<"${deleted}")" 0
users_can kustomize
# The TFJob component's RBAC (the base's ServiceAccount), removed again on exit:
# the other tests run the operator as this ServiceAccount with the base's rules.
kubectl apply -k "${root}/deploy/kustomize/components/tfjob/rbac" >/dev/null
check "kustomize: the TFJob component's RBAC applied" "$?" 0
check "both installs' operator NetworkPolicies exist" \
  "$(kubectl -n "${ns}" get networkpolicy kt-kubetrain -o name)/$(kubectl -n kubetrain-system get networkpolicy kubetrain-operator -o name)" \
  "networkpolicy.networking.k8s.io/kt-kubetrain/networkpolicy.networking.k8s.io/kubetrain-operator"

can() {  # can SA VERB RESOURCE[/SUBRESOURCE] [NAMESPACE|-A]
  local args=("$2" "${3%%/*}" --as="system:serviceaccount:$1")
  [[ "$3" == */* ]] && args+=(--subresource="${3#*/}")
  [[ "${4:-}" == -A ]] && args+=(-A)
  [[ -n "${4:-}" && "${4}" != -A ]] && args+=(-n "$4")
  kubectl auth can-i "${args[@]}" 2>/dev/null
}
can_name() {  # can_name SA VERB RESOURCE NAMESPACE NAME
  kubectl auth can-i "$2" "$3/$5" -n "$4" --as="system:serviceaccount:$1" 2>/dev/null
}
for sa in "${ns}:kt-kubetrain" "kubetrain-system:kubetrain-operator"; do
  own="${sa%%:*}"
  lease="${sa#*:}"  # both install the Lease under the ServiceAccount's name
  echo "== ${sa}"
  check "watch trainingjobs everywhere" "$(can "${sa}" watch trainingjobs.kubetrain.io -A)" yes
  check "delete trainingjobs (TTL)" "$(can "${sa}" delete trainingjobs.kubetrain.io team-a)" yes
  check "update trainingjobs/status" "$(can "${sa}" update trainingjobs.kubetrain.io/status team-a)" yes
  check "not update trainingjob specs" "$(can "${sa}" update trainingjobs.kubetrain.io team-a)" no
  check "create pods" "$(can "${sa}" create pods team-a)" yes
  check "delete services" "$(can "${sa}" delete services team-a)" yes
  check "create secrets" "$(can "${sa}" create secrets team-a)" yes
  check "not update secrets" "$(can "${sa}" update secrets team-a)" no
  check "no delete secrets (garbage collection deletes the job's)" "$(can "${sa}" delete secrets team-a)" no
  check "no delete configmaps or networkpolicies" \
    "$(can "${sa}" delete configmaps team-a)/$(can "${sa}" delete networkpolicies.networking.k8s.io team-a)" no/no
  check "no get secrets anywhere" "$(can "${sa}" get secrets -A)" no
  check "no list secrets anywhere" "$(can "${sa}" list secrets -A)" no
  check "no watch secrets anywhere" "$(can "${sa}" watch secrets -A)" no
  check "no get secrets in a job namespace" "$(can "${sa}" get secrets team-a)" no
  check "create and update configmaps (the job's cluster JSON)" \
    "$(can "${sa}" create configmaps team-a)/$(can "${sa}" update configmaps team-a)" yes/yes
  check "no list configmaps anywhere" "$(can "${sa}" list configmaps -A)" no
  check "create networkpolicies (one per job)" \
    "$(can "${sa}" create networkpolicies.networking.k8s.io team-a)" yes
  check "get and patch networkpolicies (an older operator's brought to this one's spec)" \
    "$(can "${sa}" get networkpolicies.networking.k8s.io team-a)/$(can "${sa}" patch networkpolicies.networking.k8s.io team-a)" yes/yes
  check "no update or list networkpolicies" \
    "$(can "${sa}" update networkpolicies.networking.k8s.io team-a)/$(can "${sa}" list networkpolicies.networking.k8s.io -A)" no/no
  check "update trainingjobs/finalizers (blockOwnerDeletion)" \
    "$(can "${sa}" update trainingjobs.kubetrain.io/finalizers team-a)" yes
  check "create events" "$(can "${sa}" create events.events.k8s.io team-a)" yes
  check "update its lease" "$(can_name "${sa}" update leases.coordination.k8s.io "${own}" "${lease}")" yes
  check "not update another lease in its namespace" \
    "$(can_name "${sa}" update leases.coordination.k8s.io "${own}" someone-elses)" no
  check "not get another lease in its namespace" \
    "$(can_name "${sa}" get leases.coordination.k8s.io "${own}" someone-elses)" no
  check "no leases elsewhere" "$(can "${sa}" update leases.coordination.k8s.io kube-system)" no
  check "no nodes" "$(can "${sa}" list nodes)" no
  check "no deployments" "$(can "${sa}" create deployments.apps team-a)" no
done

# Helm with watchNamespaces: Roles in those namespaces only, nothing cluster-wide
# but what is cluster-scoped (with --kueue: flavors and priority classes).
ns_scoped=kubetrain-helm-ns
watched=(kt-rbac-a kt-rbac-b)
trap 'kubectl delete namespace "${ns}" "${ns_scoped}" "${users}" "${watched[@]}" --wait=false >/dev/null 2>&1
  kubectl delete -k "${root}/deploy/kustomize/components/tfjob/rbac" --ignore-not-found >/dev/null 2>&1' EXIT
kubectl create namespace "${ns_scoped}" >/dev/null
for w in "${watched[@]}"; do kubectl create namespace "${w}" >/dev/null; done
helm template kts "${chart}" -n "${ns_scoped}" --set "watchNamespaces={kt-rbac-a,kt-rbac-b}" \
  --set kueue.enabled=true --set tfjob.enabled=true 2>/dev/null | kubectl apply -f - >/dev/null  # Roles name their namespaces
check "namespaced chart applied" "$?" 0
sa="${ns_scoped}:kts-kubetrain"
echo "== ${sa} (watchNamespaces: ${watched[*]})"
check "deployment watches only its namespaces" \
  "$(kubectl -n "${ns_scoped}" get deploy kts-kubetrain -o jsonpath='{.spec.template.spec.containers[0].args}' | grep -o -- '--namespace=[a-z-]*' | tr '\n' ' ')" \
  "--namespace=kt-rbac-a --namespace=kt-rbac-b "
check "create pods in a watched namespace" "$(can "${sa}" create pods kt-rbac-b)" yes
check "watch trainingjobs in a watched namespace" "$(can "${sa}" watch trainingjobs.kubetrain.io kt-rbac-a)" yes
check "no pods in an unwatched namespace" "$(can "${sa}" create pods team-a)" no
check "no pods in kube-system" "$(can "${sa}" create pods kube-system)" no
check "no trainingjobs across namespaces" "$(can "${sa}" list trainingjobs.kubetrain.io -A)" no
check "kueue: priority classes (cluster-scoped)" "$(can "${sa}" get priorityclasses.scheduling.k8s.io)" yes
# Kueue's CRDs are not installed here, so can-i cannot resolve its resources: read the rules.
rules_in() { kubectl auth can-i --list -n "$1" --as="system:serviceaccount:${sa}" 2>/dev/null; }
check "kueue: workloads in a watched namespace only" \
  "$(rules_in kt-rbac-a | grep -c '^workloads.kueue.x-k8s.io ')/$(rules_in team-a | grep -c '^workloads.kueue.x-k8s.io ')" 1/0
check "kueue: resource flavors (cluster-scoped)" "$(rules_in team-a | grep -c '^resourceflavors.kueue.x-k8s.io ')" 1
# TFJobs (tfjob.enabled), read from the rules too: the TFJob CRD may not be installed.
tfjob_rows() {  # tfjob_rows SA NAMESPACE: its tfjobs rows of `kubectl auth can-i --list`, in one line
  kubectl auth can-i --list -n "$2" --as="system:serviceaccount:$1" 2>/dev/null |
    sed -nE 's/^(tfjobs\.kubeflow\.org[^ ]*) +\[\] +\[\] +(\[[^]]*\]).*/\1 \2/p' | sort | tr '\n' ' '
}
tfjob_can="tfjobs.kubeflow.org [get list watch patch delete] tfjobs.kubeflow.org/finalizers [update] tfjobs.kubeflow.org/status [get update patch] "
check "tfjob: tfjobs in a watched namespace" "$(tfjob_rows "${sa}" kt-rbac-a)" "${tfjob_can}"
check "tfjob: no tfjobs in an unwatched namespace" "$(tfjob_rows "${sa}" team-a)" ""
check "tfjob: the kustomize component's rights in any namespace" \
  "$(tfjob_rows kubetrain-system:kubetrain-operator team-a)" "${tfjob_can}"
check "tfjob: none for the chart without tfjob.enabled" "$(tfjob_rows "${ns}:kt-kubetrain" team-a)" ""

# What each install may do, as docs/operations.md ("RBAC") shows it.
kubectl delete -k "${root}/deploy/kustomize/components/tfjob/rbac" >/dev/null  # the base's own rules below
for who in "kubetrain-system:kubetrain-operator team-a" "${ns}:kt-kubetrain team-a" "${sa} kt-rbac-a"; do
  read -r s where <<<"${who}"
  echo "== kubectl auth can-i --list -n ${where} as ${s}"
  kubectl auth can-i --list -n "${where}" --as="system:serviceaccount:${s}" 2>/dev/null |
    grep -v -E '\[/|^Resources|authorization.k8s.io|authentication.k8s.io'
  echo "----"
done

((failures == 0)) && echo "deploy test passed"
((failures == 0))

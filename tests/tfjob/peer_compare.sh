#!/usr/bin/env bash
# The peer comparison for the TFJob drop-in: every TFJob manifest of training-operator
# v1.9.3's module (its examples, its controller tests' fixtures and its SDK's
# end-to-end job, transcribed to YAML in tests/tfjob/v1_fixtures/) runs on one
# real control plane twice at once: under training-operator v1.9.3 (its
# --namespace cmp-v1) and under kubetrain's operator (--tfjob=all --namespace
# cmp-kt, as the ServiceAccount of deploy/kustomize/rbac plus
# components/tfjob/rbac, so the component's RBAC is proven enough). That is the
# namespace-by-namespace migration path of docs/migrating-from-tfjob.md: neither
# operator touches the other's namespace (checked). kwok drives every pod to
# Running, then the pods that decide each job's success exit 0 (evaluators
# first, then the chief or master, else worker 0, or every worker under
# AllWorkers); one job runs a second time and fails (worker 1 exits 1), one
# is also created suspended. peer_compare.py then
# compares, field by field, pods, Services and any other object the jobs own,
# the sequence of status conditions, replicaStatuses, the pods left at the end
# and the Argo CD health, and fails on any difference not listed, with its
# reason, in docs/migrating-from-tfjob.md ("What the peer comparison allows").
# Namespace cmp-mb, watched by both (a second v1.9.3 with --namespace cmp-mb;
# no v1 webhook, as after removing it): a job with runPolicy.managedBy
# kubetrain.io/operator is run by kubetrain alone, one with v1's own value by
# v1.9.3 alone (the managers of their pods say who wrote them).
#
# Usage: tests/tfjob/peer_compare.sh OPERATOR_BINARY
#   PEER_COMPARE_CRD=ours   use crds/tfjob/ (default: v1.9.3's CRD, what migrating clusters have)
#   PEER_COMPARE_SELF=1     v1.9.3 in both namespaces: the harness itself must find no difference
#   PEER_COMPARE_KEEP=DIR   keep the snapshots, watch streams and logs there
# Manual (not in CI): needs training-operator, which
# bench/controller/build-training-operator builds from its Go module (~10 min
# cold, cached under ~/.cache/kubetrain). Stops only the processes it started.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
operator="$(realpath "${1:?usage: peer_compare.sh OPERATOR_BINARY}")"
bin="$("${root}/tests/cluster/build")" || exit 2
export PATH="${bin}:${PATH}"
peer="$("${root}/bench/controller/build-training-operator")" || exit 2
moddir="$(go env GOMODCACHE)/github.com/kubeflow/training-operator@v1.9.3"
[[ -d ${moddir}/examples ]] || { echo "no ${moddir} (build-training-operator downloads it)" >&2; exit 2; }
work="$(mktemp -d /tmp/kubetrain-peer-compare.XXXXXX)"
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -TERM "${p}" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "${p}" 2>/dev/null; done
  "${root}/tests/cluster/down" "${work}/cluster" >/dev/null 2>&1
  if [[ -n ${PEER_COMPARE_KEEP:-} ]]; then mkdir -p "${PEER_COMPARE_KEEP}" && cp -r "${work}"/*.json "${work}"/*.log "${work}/jobs.yaml" "${PEER_COMPARE_KEEP}/" 2>/dev/null; fi
  rm -rf "${work}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
source "${root}/tests/tools/testlib.sh"
t0=${SECONDS}

KUBETRAIN_TEST_NODES=4 "${root}/tests/cluster/up" "${work}/cluster" >/dev/null || { echo "FAIL: no cluster"; exit 1; }
export KUBECONFIG="${work}/cluster/kubeconfig"
if [[ ${PEER_COMPARE_CRD:-v1} == ours ]]; then crd="${root}/crds/tfjob/tfjobs.kubeflow.org.yaml"; else crd="${peer}/crds/kubeflow.org_tfjobs.yaml"; fi
kubectl apply --server-side -f "${crd}" >/dev/null || { echo "FAIL: the TFJob CRD"; exit 1; }
"${root}/tests/tools/wait-crds" crd/tfjobs.kubeflow.org >/dev/null
for n in kubeflow cmp-v1 cmp-kt cmp-mb; do kubectl create namespace "${n}" >/dev/null; done
for n in cmp-v1 cmp-kt cmp-mb; do  # pods need the default ServiceAccount
  wait_until "${n}'s default ServiceAccount" kubectl -n "${n}" get sa default
done

# training-operator v1.9.3: its webhook Secret (its cert rotator fills it) and a
# certificate in its fixed webhook cert dir.
kubectl -n kubeflow create secret generic training-operator-webhook-cert >/dev/null
certs=/tmp/k8s-webhook-server/serving-certs
if [[ ! -s ${certs}/tls.crt ]]; then
  mkdir -p "${certs}"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=training-operator.kubeflow.svc \
    -keyout "${certs}/tls.key" -out "${certs}/tls.crt" 2>/dev/null
fi
start_peer() {  # start_peer NAMESPACE
  MY_POD_NAMESPACE=kubeflow "${peer}/bin/training-operator" --enable-scheme=tfjob --leader-elect=false \
    --namespace "$1" --metrics-bind-address "127.0.0.1:$(free_port)" \
    --health-probe-bind-address "127.0.0.1:$(free_port)" --webhook-server-port "$(free_port)" \
    >"${work}/operator-$1.log" 2>&1 &
  pids+=($!)
}
start_peer cmp-v1
start_peer cmp-mb
if [[ ${PEER_COMPARE_SELF:-0} == 1 ]]; then
  start_peer cmp-kt
else
  kubectl apply -k "${root}/crds" >/dev/null || { echo "FAIL: kubetrain's CRDs"; exit 1; }  # as installed
  "${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
  kubectl apply -k "${root}/deploy/kustomize/rbac" >/dev/null || { echo "FAIL: RBAC"; exit 1; }
  kubectl apply -k "${root}/deploy/kustomize/components/tfjob/rbac" >/dev/null || { echo "FAIL: TFJob RBAC"; exit 1; }
  operator_kubeconfig "${work}/operator-kubeconfig" || { echo "FAIL: no token"; exit 1; }
  "${operator}" --kubeconfig "${work}/operator-kubeconfig" --tfjob=all --namespace cmp-kt --namespace cmp-mb \
    --metrics-addr "127.0.0.1:$(free_port)" --health-addr "127.0.0.1:$(free_port)" --progress-qps 0 \
    >"${work}/operator-cmp-kt.log" 2>&1 &
  pids+=($!)
fi
for n in cmp-v1 cmp-kt; do
  kubectl get tfjobs -n "${n}" -w -o json --output-watch-events >"${work}/watch-${n}.json" 2>"${work}/watch-${n}.log" &
  pids+=($!)
done

files=()
while IFS= read -r f; do files+=("$f"); done < <(grep -rlE '^kind: "?TFJob"?' "${moddir}/examples" | sort)
files+=("${root}"/tests/tfjob/v1_fixtures/*.yaml)
"${root}/tests/tfjob/peer_compare.py" adapt "${work}" "${files[@]}" || exit 1
for n in cmp-v1 cmp-kt; do
  kubectl create -n "${n}" -f "${work}/jobs.yaml" >/dev/null || { echo "FAIL: the jobs in ${n}"; exit 1; }
done
kubectl create -n cmp-mb -f "${work}/managed-by.yaml" >/dev/null || { echo "FAIL: the jobs in cmp-mb"; exit 1; }

# plan_pods: "name exit" per pod of the plan; all_running NS: every planned pod
# Running and every job's Running condition True.
mapfile -t planned < <(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))
for j in p.values():
    for pod in j["pods"]: print(pod)' "${work}/plan.json")
jobs_n="$(python3 -c 'import json,sys; print(sum(j["scenario"] != "suspended" for j in json.load(open(sys.argv[1])).values()))' "${work}/plan.json")"
held_n="$(python3 -c 'import json,sys; print(sum(j["scenario"] == "suspended" for j in json.load(open(sys.argv[1])).values()))' "${work}/plan.json")"
all_running() {
  local running jobs held
  running="$(kubectl get pods -n "$1" --field-selector=status.phase=Running -o name | wc -l)"
  jobs="$(kubectl get tfjobs -n "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Running")].status}{"\n"}{end}' | grep -c '^True$')"
  held="$(kubectl get tfjobs -n "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Suspended")].status}{"\n"}{end}' | grep -c '^True$')"
  ((running >= ${#planned[@]} && jobs >= jobs_n && held >= held_n))
}
all_finished() {
  local done
  done="$(kubectl get tfjobs -n "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Succeeded")].status}{.status.conditions[?(@.type=="Failed")].status}{"\n"}{end}' | grep -c '^True$')"
  ((done >= jobs_n))
}
# pods_settled NS: the pods (name, phase, deleting) the same as at the previous
# poll for 3 s: the operators' clean-up after a job ends is done.
declare -A last_pods last_change
pods_settled() {
  local now; now="$(kubectl get pods -n "$1" -o jsonpath='{range .items[*]}{.metadata.name} {.status.phase} {.metadata.deletionTimestamp}{"\n"}{end}')"
  if [[ ${now} != "${last_pods[$1]:-}" ]]; then last_pods[$1]="${now}" last_change[$1]=${SECONDS}; fi
  ((SECONDS - ${last_change[$1]} >= 3))
}
snapshot() {  # snapshot PHASE
  local n
  for n in cmp-v1 cmp-kt; do
    kubectl get pods,services,configmaps,secrets,networkpolicies -n "${n}" -o json >"${work}/$1-${n}.json"
    kubectl get tfjobs -n "${n}" -o json >"${work}/tfjobs-$1-${n}.json"
  done
}

for n in cmp-v1 cmp-kt; do
  WAIT_SECONDS=180 wait_until "every pod Running and every job Running in ${n}" all_running "${n}" || {
    tail -n 30 "${work}/operator-${n}.log"; exit 1; }
done
echo "all ${#planned[@]} pods of ${jobs_n} jobs Running in both namespaces ($((SECONDS - t0)) s)"
# cmp-mb: who created each job's pods (their managedFields' managers).
managers() {  # managers JOB: the managers of its pods' fields, sorted, without kwok's and the scheduler's
  kubectl get pods -n cmp-mb -l "training.kubeflow.org/job-name=$1" -o json --show-managed-fields |
    python3 -c 'import json,sys; d=json.load(sys.stdin)["items"]
print(len(d), " ".join(sorted({m["manager"] for p in d for m in p["metadata"].get("managedFields", [])} - {"kwok", "kube-scheduler"})))'
}
pods_of() { [[ "$(managers "$1")" == "$2 "* ]]; }
if [[ ${PEER_COMPARE_SELF:-0} != 1 ]]; then
  wait_until "mb-kubetrain's pods" pods_of mb-kubetrain 4
  wait_until "mb-v1's pods" pods_of mb-v1 4
  check "managedBy kubetrain.io/operator: kubetrain alone created its pods" "$(managers mb-kubetrain)" "4 kubetrain"
  check "managedBy kubeflow.org/training-operator: v1.9.3 alone created its pods" "$(managers mb-v1)" "4 training-operator"
else  # by now v1.9.3 would have made mb-kubetrain's pods, were it to
  wait_until "mb-v1's pods" pods_of mb-v1 4
  check "v1.9.3 leaves a TFJob managedBy kubetrain.io/operator alone" "$(managers mb-kubetrain)/$(managers mb-v1)" "0 /4 training-operator"
fi
snapshot running
# End each job: the exit codes of the plan, the same pods in both namespaces.
python3 -c 'import json,sys
for j in json.load(open(sys.argv[1])).values():
    for pod, code in j["exits"]: print(pod, code)' "${work}/plan.json" >"${work}/exits"
for n in cmp-v1 cmp-kt; do
  while read -r pod code; do
    kubectl -n "${n}" annotate pod "${pod}" "kubetrain.io/test-exit-code=${code}" >/dev/null || fail "${n}: ending ${pod}"
  done <"${work}/exits"
done
for n in cmp-v1 cmp-kt; do
  WAIT_SECONDS=180 wait_until "every job Succeeded or Failed in ${n}" all_finished "${n}" || {
    tail -n 30 "${work}/operator-${n}.log"; exit 1; }
  WAIT_SECONDS=120 wait_until "${n}'s pods settled" pods_settled "${n}" || exit 1
done
echo "every job ended in both namespaces ($((SECONDS - t0)) s)"
snapshot final
for p in "${pids[@]: -2}"; do kill -TERM "${p}" 2>/dev/null; done  # the watches, then compare
# Neither operator wrote in the other's namespace: each job's objects are owned by
# a TFJob of their own namespace, and no pod in cmp-v1 carries kubetrain's labels.
check "kubetrain left cmp-v1 alone" \
  "$(python3 -c 'import json,sys; print(sum(1 for o in json.load(open(sys.argv[1]))["items"] if any(k.startswith("kubetrain.io/") for k in (o["metadata"].get("labels") or {}))))' "${work}/final-cmp-v1.json")" 0
"${root}/tests/tfjob/peer_compare.py" compare "${work}" "${root}/docs/migrating-from-tfjob.md" || failures=$((failures + 1))
echo "($((SECONDS - t0)) s)"
((failures == 0)) && echo "PASS: the peer comparison"
((failures == 0))

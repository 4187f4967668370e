#!/usr/bin/env bash
# TrainingJobs queued by a real Kueue (the ctest `kueue-cluster` fixture:
# tests/cluster/up with KUBETRAIN_KUEUE=1) through the Workload protocol, with
# the operator run with --kueue by this script (stopped by PID).
# Usage: kueue_test.sh OPERATOR_BINARY
# Each case has its own namespace, ClusterQueue and LocalQueue. Pods run on
# kwok nodes only because the ResourceFlavor's node labels and tolerations
# reach them through the admission: the templates have neither.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: kueue_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
work="$(mktemp -d)"
op_pid=""
NS_PREFIX=kq
T=90
WAIT_SECONDS=${T}
cluster_objects=()

# The ports are picked before the fork: a background subshell still running
# $(free_port) when killed would run this script's EXIT trap.
metrics_port="$(free_port)"
health_port="$(free_port)"
start_operator() {
  "${operator}" --kubeconfig "${work}/operator-kubeconfig" --metrics-addr "127.0.0.1:${metrics_port}" \
    --health-addr "127.0.0.1:${health_port}" --workers 4 --progress-qps 0 "$@" \
    >>"${work}/operator.log" 2>&1 &
  op_pid=$!
}
stop_operator() {
  [[ -n "${op_pid}" ]] || return 0
  kill -TERM "${op_pid}" 2>/dev/null
  wait "${op_pid}" 2>/dev/null
  op_pid=""
}
cleanup() {
  stop_operator
  delete_namespaces
  local o
  for o in "${cluster_objects[@]}"; do kubectl delete "${o}" --wait=false >/dev/null 2>&1; done
  if ((failures)); then echo "---- operator log (last 60 lines)"; tail -n 60 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

# queue NAME CPU: a ClusterQueue NAME-<ns> with CPU cores of quota (preempting
# lower priorities within it) and a LocalQueue NAME in the current namespace.
queue() {
  local cq="$1-${ns}"
  cluster_objects+=("clusterqueue/${cq}")
  cat <<Q | kubectl apply -f - >/dev/null || fail "creating queue $1"
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: ${cq}}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: kwok
      resources: [{name: cpu, nominalQuota: "$2"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: $1, namespace: ${ns}}
spec: {clusterQueue: ${cq}}
Q
  wait_until "ClusterQueue ${cq} active" \
    bash -c "[[ \$(kubectl get clusterqueue ${cq} -o jsonpath='{.status.conditions[?(@.type==\"Active\")].status}') == True ]]"
}

# job NAME LABELS-YAML [RUN-POLICY-YAML]: 1 PS + 4 workers, 1 CPU each; no
# node selector or toleration.
job() {
  cat <<JOB | k apply -f - >/dev/null || fail "creating job $1"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata:
  name: $1
  labels: {$2}
spec:
  runPolicy: {${3:-}}
  replicaSpecs:
    PS:
      replicas: 1
      template:
        spec:
          containers: [{name: trainer, image: kubetrain-trainer, resources: {requests: {cpu: "1"}}}]
    Worker:
      replicas: 4
      template:
        spec:
          containers: [{name: trainer, image: kubetrain-trainer, resources: {requests: {cpu: "1"}}}]
JOB
}
pods() { k get pods -l "kubetrain.io/job-name=$1" -o name 2>/dev/null | wc -l; }
running_pods() {
  k get pods -l "kubetrain.io/job-name=$1" --field-selector=status.phase=Running -o name 2>/dev/null | wc -l
}
has_running() { [[ "$(running_pods "$1")" == "$2" ]]; }
has_pods() { [[ "$(pods "$1")" == "$2" ]]; }
suspended_reason() { jpath "tj/$1" '{.status.conditions[?(@.type=="Suspended")].reason}'; }
is_suspended_for() {
  [[ "$(jpath "tj/$1" '{.status.conditions[?(@.type=="Suspended")].status}')" == True &&
     "$(suspended_reason "$1")" == "$2" ]]
}
state() { jpath "tj/$1" '{.status.state}'; }
is_state() { [[ "$(state "$1")" == "$2" ]]; }
workload_of() {  # the Workload owned by job $1
  k get workloads -o json | python3 -c '
import json, sys
for w in json.load(sys.stdin)["items"]:
    if any(o["kind"] == "TrainingJob" and o["name"] == sys.argv[1] for o in w["metadata"].get("ownerReferences", [])):
        print(w["metadata"]["name"])' "$1"
}
wl_cond() { k get workload "$1" -o "jsonpath={.status.conditions[?(@.type==\"$2\")].status}" 2>/dev/null; }
wl_is() { [[ "$(wl_cond "$1" "$2")" == "$3" ]]; }
finish() { k annotate pod "$1-worker-0" kubetrain.io/test-exit-code=0 >/dev/null || fail "finishing $1"; }

setup_flavor() {
  cluster_objects+=("resourceflavor/kwok")
  cat <<RF | kubectl apply -f - >/dev/null || fail "creating the ResourceFlavor"
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: kwok}
spec:
  nodeLabels: {type: kwok}
  tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
RF
  cluster_objects+=("priorityclass/kq-pc-low" "priorityclass/kq-pc-high")
  cat <<PC | kubectl apply -f - >/dev/null || fail "creating the PriorityClasses"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: kq-pc-low}
value: 50
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: kq-pc-high}
value: 500
PC
  cluster_objects+=("workloadpriorityclass/kq-low" "workloadpriorityclass/kq-high")
  cat <<PC | kubectl apply -f - >/dev/null || fail "creating the WorkloadPriorityClasses"
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: kq-low}
value: 100
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: WorkloadPriorityClass
metadata: {name: kq-high}
value: 1000
PC
}

# Quota for one 5-pod job: the second waits, suspended and saying so, until
# the first finishes; then it runs. The admission's flavor reaches the pods.
case_second_job_waits_for_the_first() {
  new_ns fifo
  queue q 5
  job a "kueue.x-k8s.io/queue-name: q"
  wait_until "a's 5 pods run" has_running a 5 || return
  job b "kueue.x-k8s.io/queue-name: q"
  wait_until "b waits for admission" is_suspended_for b WaitingForAdmission || return
  local wa wb
  wa="$(workload_of a)"; wb="$(workload_of b)"
  check "a's Workload is admitted" "$(wl_cond "${wa}" Admitted)" True
  check "b's Workload is not" "$(wl_cond "${wb}" Admitted)" ""
  check "b's Workload has a pod set per role" \
    "$(k get workload "${wb}" -o 'jsonpath={.spec.podSets[*].name}={.spec.podSets[*].count}')" "ps worker=1 4"
  check "b's Workload is owned by b (controller)" \
    "$(k get workload "${wb}" -o 'jsonpath={.metadata.ownerReferences[0].controller}')" true
  check "b has no pods" "$(pods b)" 0
  check "b's state" "$(state b)" Suspended
  local msg
  msg="$(jpath tj/b '{.status.conditions[?(@.type=="Suspended")].message}')"
  [[ "${msg}" == *"queue q"* ]] || fail "b's Suspended message names no queue: ${msg}"
  check "a's pods got the flavor's node selector" \
    "$(k get pod a-worker-0 -o 'jsonpath={.spec.nodeSelector.type}')" kwok
  check "a's pods got the flavor's toleration" \
    "$(k get pod a-worker-0 -o 'jsonpath={.spec.tolerations[?(@.key=="kwok.x-k8s.io/node")].operator}')" Exists
  check "a's pods carry their pod set" \
    "$(k get pod a-ps-0 -o 'jsonpath={.metadata.labels.kueue\.x-k8s\.io/podset}')" ps
  finish a
  wait_until "a succeeds" is_state a Succeeded || return
  wait_until "a's Workload is Finished" wl_is "${wa}" Finished True || return
  wait_until "b's 5 pods run" has_running b 5 || return
  check "b is no longer suspended" "$(jpath tj/b '{.status.conditions[?(@.type=="Suspended")].status}')" False
  finish b
  wait_until "b succeeds" is_state b Succeeded || return
  wait_until "b's Workload is Finished" wl_is "${wb}" Finished True
}

# A higher-priority job preempts a running lower one: the low job's pods are
# deleted, it waits (Evicted), and once the high job is done it runs again and
# completes, its restart budget (backoffLimit 0) untouched.
case_higher_priority_preempts_and_the_lower_resumes() {
  new_ns prio
  queue q 5
  job low "kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/priority-class: kq-low" "backoffLimit: 0"
  wait_until "low's 5 pods run" has_running low 5 || return
  local wl
  wl="$(workload_of low)"
  check "low's Workload has the class's priority" "$(k get workload "${wl}" -o 'jsonpath={.spec.priority}')" 100
  job high "kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/priority-class: kq-high"
  wait_until "low is evicted" is_suspended_for low Evicted || return
  wait_until "high's 5 pods run" has_running high 5 || return
  check "low has no pods" "$(pods low)" 0
  check "low's Workload was requeued" "$(wl_cond "${wl}" Requeued)" True
  check "low's Workload holds no quota" "$(wl_cond "${wl}" QuotaReserved)" False
  finish high
  wait_until "high succeeds" is_state high Succeeded || return
  wait_until "low runs again" has_running low 5 || return
  check "low counted no restart" "$(jpath tj/low '{.status.restarts}')" 0
  finish low
  wait_until "low succeeds" is_state low Succeeded
}

# Without a WorkloadPriorityClass label the Workload takes its pods'
# PriorityClass (scheduling.k8s.io), as Kueue's own integrations do: a job whose
# pods run at a higher PriorityClass preempts a running lower one. Before, such
# Workloads had no priority and the higher job waited behind the lower.
case_pod_priority_class_orders_the_queue() {
  new_ns podprio
  queue q 5
  job low "kueue.x-k8s.io/queue-name: q" "schedulingPolicy: {priorityClassName: kq-pc-low}"
  wait_until "low's 5 pods run" has_running low 5 || return
  local wl
  wl="$(workload_of low)"
  # (As the v1beta1 the operator writes: kubectl prefers v1beta2's priorityClassRef.)
  check "low's Workload has its pods' priority" \
    "$(k get workloads.v1beta1.kueue.x-k8s.io "${wl}" \
      -o 'jsonpath={.spec.priorityClassName}={.spec.priority} {.spec.priorityClassSource}')" \
    "kq-pc-low=50 scheduling.k8s.io/priorityclass"
  check "low's pods run at that class" "$(k get pod low-ps-0 -o 'jsonpath={.spec.priority}')" 50
  job high "kueue.x-k8s.io/queue-name: q" "schedulingPolicy: {priorityClassName: kq-pc-high}"
  wait_until "low is evicted by the higher PriorityClass" is_suspended_for low Evicted || return
  wait_until "high's 5 pods run" has_running high 5 || return
  check "high's Workload has its pods' priority" \
    "$(k get workload "$(workload_of high)" -o 'jsonpath={.spec.priority}')" 500
  finish high
  wait_until "high succeeds" is_state high Succeeded || return
  wait_until "low runs again" has_running low 5
}

# Kueue runs with waitForPodsReady (tests/cluster/kueue-up, timeout 20 s): it
# evicts an admitted Workload whose PodsReady condition is not True in time.
# The operator sets it once the job's pods all run, so a running job keeps its
# admission past the timeout. Before, every queued job was evicted after the timeout.
case_running_job_outlives_the_pods_ready_timeout() {
  new_ns ready
  queue q 5
  job r "kueue.x-k8s.io/queue-name: q"
  wait_until "r's 5 pods run" has_running r 5 || return
  local wl admitted
  wl="$(workload_of r)"
  wait_until "r's Workload is PodsReady" wl_is "${wl}" PodsReady True || return
  check "PodsReady's reason" \
    "$(k get workload "${wl}" -o 'jsonpath={.status.conditions[?(@.type=="PodsReady")].reason}')" Started
  admitted="$(k get workload "${wl}" -o 'jsonpath={.status.conditions[?(@.type=="Admitted")].lastTransitionTime}')"
  # Absence of an eviction can only be seen once the timeout has passed.
  local timeout="${KUBETRAIN_KUEUE_PODS_READY_TIMEOUT:-20s}"  # as tests/cluster/kueue-up has it
  local deadline=$(($(date -d "${admitted}" +%s) + ${timeout%s} + 5))
  WAIT_SECONDS=120 wait_until "the PodsReady timeout has passed since r's admission" \
    bash -c "(( \$(date +%s) > ${deadline} ))" || return
  check "r's Workload is still admitted" "$(wl_cond "${wl}" Admitted)" True
  check "r's Workload was not evicted" "$(wl_cond "${wl}" Evicted)" ""
  check "r still runs 5 pods" "$(running_pods r)" 5
  finish r
  wait_until "r succeeds" is_state r Succeeded
}

# Suspending a queued job gives its quota back: its Workload is deactivated
# (Kueue evicts it) so the next job is admitted; resuming reactivates it and it
# queues behind that job. Before, a suspended job kept its quota and the next
# job waited forever.
case_suspend_releases_the_quota_and_resume_queues_again() {
  new_ns susp
  queue q 5
  job a "kueue.x-k8s.io/queue-name: q"
  wait_until "a's 5 pods run" has_running a 5 || return
  job b "kueue.x-k8s.io/queue-name: q"
  wait_until "b waits for admission" is_suspended_for b WaitingForAdmission || return
  local wa
  wa="$(workload_of a)"
  k patch tj a --type merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null || fail "suspending a"
  wait_until "b's 5 pods run once a is suspended" has_running b 5 || return
  check "a has no pods" "$(pods a)" 0
  check "a's Workload is inactive" "$(k get workload "${wa}" -o 'jsonpath={.spec.active}')" false
  check "a's Workload holds no quota" "$(wl_cond "${wa}" QuotaReserved)" False
  k patch tj a --type merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null || fail "resuming a"
  wait_until "a waits for admission again" is_suspended_for a WaitingForAdmission || return
  wait_until "a's Workload is active again" \
    bash -c "[[ \$(kubectl -n ${ns} get workload ${wa} -o 'jsonpath={.spec.active}') == true ]]" || return
  check "a has no pods while b runs" "$(pods a)" 0
  finish b
  wait_until "b succeeds" is_state b Succeeded || return
  wait_until "a's 5 pods run again" has_running a 5 || return
  finish a
  wait_until "a succeeds" is_state a Succeeded
}

suspended_message() { jpath "tj/$1" '{.status.conditions[?(@.type=="Suspended")].message}'; }
says_label_removed() { [[ "$(suspended_message "$1")" == *"label was removed"* ]]; }
wl_queue() { k get workload "$1" -o 'jsonpath={.spec.queueName}' 2>/dev/null; }
wl_in_queue() { [[ "$(wl_queue "$1")" == "$2" ]]; }

# Issue 27: removing the queue label of a queued job does not let it run: it
# waits in its Workload's queue, runs once that Workload is admitted, and
# finishes it. Before, it ran at once (bypassing the queue) while its
# Workload stayed and held quota until the job was deleted.
case_removed_queue_label_keeps_the_job_queued() {
  new_ns unlabel
  queue q 5
  job a "kueue.x-k8s.io/queue-name: q"
  wait_until "a's 5 pods run" has_running a 5 || return
  job b "kueue.x-k8s.io/queue-name: q"
  wait_until "b waits for admission" is_suspended_for b WaitingForAdmission || return
  local wb
  wb="$(workload_of b)"
  k label tj b kueue.x-k8s.io/queue-name- >/dev/null || fail "removing b's label"
  wait_until "b says its label was removed and still waits" says_label_removed b || return
  check "b has no pods" "$(pods b)" 0
  check "b is still suspended" "$(jpath tj/b '{.status.conditions[?(@.type=="Suspended")].status}')" True
  check "b's Workload stays in q" "$(wl_queue "${wb}")" q
  finish a
  wait_until "a succeeds" is_state a Succeeded || return
  wait_until "b's 5 pods run once its Workload is admitted" has_running b 5 || return
  finish b
  wait_until "b succeeds" is_state b Succeeded || return
  wait_until "b's Workload is Finished though b has no label" wl_is "${wb}" Finished True
}

# Issue 27: a changed queue label moves a Workload that is not admitted to the
# new queue (jobframework's QueueNameChange), where it is admitted. Before, it
# stayed in the old queue, behind a job that held all of its quota.
case_changed_queue_label_moves_the_workload() {
  new_ns move
  queue q 5
  queue r 5
  job a "kueue.x-k8s.io/queue-name: q"
  wait_until "a's 5 pods run" has_running a 5 || return
  job b "kueue.x-k8s.io/queue-name: q"
  wait_until "b waits for admission" is_suspended_for b WaitingForAdmission || return
  local wa wb
  wa="$(workload_of a)"; wb="$(workload_of b)"
  k label tj b kueue.x-k8s.io/queue-name=r --overwrite >/dev/null || fail "relabelling b"
  wait_until "b's Workload moves to r" wl_in_queue "${wb}" r || return
  wait_until "b's 5 pods run in r while a still runs" has_running b 5 || return
  check "b's admission is r's ClusterQueue" \
    "$(k get workload "${wb}" -o 'jsonpath={.status.admission.clusterQueue}')" "r-${ns}"
  # An admitted job's label change does not move its Workload under it.
  k label tj a kueue.x-k8s.io/queue-name=r --overwrite >/dev/null || fail "relabelling a"
  check "a keeps running" "$(running_pods a)" 5
  check "a's admitted Workload stays in q" "$(wl_queue "${wa}")" q
  finish a
  finish b
  wait_until "a succeeds" is_state a Succeeded || return
  wait_until "b succeeds" is_state b Succeeded
}

# Deleting an admitted job gives its quota to a job of another namespace that
# shares the ClusterQueue: the Workload goes with the job (garbage collection)
# and the operator drops its finalizer. (Deleting the whole namespace instead
# leaves the other job pending until the queue's next event: Kueue v0.15 finds
# a deleted Workload's ClusterQueue through its LocalQueue, gone with the
# namespace, and so requeues nothing. See the user guide.)
case_deleted_job_releases_its_quota_to_another_namespace() {
  new_ns gone
  local first="${ns}" cq="q-${ns}"
  queue q 5
  job a "kueue.x-k8s.io/queue-name: q"
  wait_until "a's 5 pods run" has_running a 5 || return
  local wa
  wa="$(workload_of a)"
  new_ns next
  cat <<Q | k apply -f - >/dev/null || fail "creating the LocalQueue"
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: ${ns}}
spec: {clusterQueue: ${cq}}
Q
  job b "kueue.x-k8s.io/queue-name: q"
  wait_until "b waits for admission" is_suspended_for b WaitingForAdmission || return
  kubectl -n "${first}" delete tj a --wait=false >/dev/null || fail "deleting a"
  wait_until "b's 5 pods run once a is deleted" has_running b 5 || return
  wait_until "a's Workload is gone (finalizer released)" \
    bash -c "! kubectl -n ${first} get workload ${wa} >/dev/null 2>&1"
  finish b
  wait_until "b succeeds" is_state b Succeeded
}

# A job without the queue label is not Kueue's: it runs at once, no Workload.
case_unlabelled_job_is_untouched() {
  new_ns free
  queue q 5
  job busy "kueue.x-k8s.io/queue-name: q"
  wait_until "busy's 5 pods run" has_running busy 5 || return
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: free}
spec:
  replicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer, resources: {requests: {cpu: "1"}}}]
JOB
  wait_until "free's pods run although the queue is full" has_running free 2 || return
  check "free has no Workload" "$(workload_of free)" ""
  check "free's pods carry no pod set label" \
    "$(k get pod free-worker-0 -o 'jsonpath={.metadata.labels.kueue\.x-k8s\.io/podset}')" ""
}

# The Workload RBAC and --kueue come only with the feature: Helm's
# kueue.enabled, kustomize's components/kueue.
case_packaging_only_when_on() {
  local chart="${root}/deploy/helm/kubetrain" helm off on
  helm="$("${root}/tests/cluster/build-helm")/helm"
  off="$("${helm}" template kt "${chart}")"
  on="$("${helm}" template kt "${chart}" --set kueue.enabled=true)"
  check "helm: no --kueue by default" "$(grep -c -- '- --kueue' <<<"${off}")" 0
  check "helm: no Workload RBAC by default" "$(grep -c 'workloads/status' <<<"${off}")" 0
  check "helm: --kueue when enabled" "$(grep -c -- '- --kueue' <<<"${on}")" 1
  check "helm: Workload RBAC when enabled" "$(grep -c 'workloads/status' <<<"${on}")" 1
  mkdir -p "${work}/overlay"
  local rel
  rel="$(realpath --relative-to="${work}/overlay" "${root}/deploy/kustomize")"
  printf 'resources: [%s/base]
components: [%s/components/kueue]
' "${rel}" "${rel}" \
    >"${work}/overlay/kustomization.yaml"
  local k
  k="$(kubectl kustomize "${work}/overlay")" || { fail "the kueue component does not render"; return; }
  check "kustomize component: --kueue" "$(grep -c -- '- --kueue' <<<"${k}")" 1
  check "kustomize component: Workload RBAC" "$(grep -c 'workloads/status' <<<"${k}")" 1
  check "kustomize base alone: no Workload RBAC" \
    "$(kubectl kustomize "${root}/deploy/kustomize/base" | grep -c 'kueue.x-k8s.io')" 0
}

# The CRD, and the operator as its ServiceAccount with the base RBAC plus the
# Kueue component's: the test proves those rules are enough.
kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
kubectl apply -k "${root}/deploy/kustomize/rbac" >/dev/null || { echo "RBAC rejected"; exit 1; }
kubectl apply -f "${root}/deploy/kustomize/components/kueue/rbac.yaml" >/dev/null \
  || { echo "Kueue RBAC rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
# A WorkloadPriorityClass that does not exist: the job says so in its status
# and is queued once the class is created.
case_missing_priority_class_says_so_then_queues() {
  new_ns wpc
  queue q 5
  local class="kq-later-${ns##*-}"
  job j "kueue.x-k8s.io/queue-name: q, kueue.x-k8s.io/priority-class: ${class}"
  wait_until "j says its Workload cannot be made" is_suspended_for j WorkloadNotCreated || return
  check "j has no pods" "$(pods j)" 0
  cluster_objects+=("workloadpriorityclass/${class}")
  printf 'apiVersion: kueue.x-k8s.io/v1beta1\nkind: WorkloadPriorityClass\nmetadata: {name: %s}\nvalue: 10\n' \
    "${class}" | kubectl apply -f - >/dev/null
  wait_until "j runs once the class exists" has_running j 5
}

# With neither a WorkloadPriorityClass label nor a PriorityClass in the job,
# the Workload takes the cluster's globalDefault PriorityClass, as the pods do.
# The class is deleted at the end: a cluster-wide default would change every
# other case's pods.
case_global_default_priority_class_is_the_workloads() {
  new_ns gdefault
  queue q 5
  local class="kq-pc-default-${ns##*-}"
  cluster_objects+=("priorityclass/${class}")
  printf 'apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: %s}\nvalue: 7\nglobalDefault: true\n' \
    "${class}" | kubectl apply -f - >/dev/null || fail "creating the default PriorityClass"
  job d "kueue.x-k8s.io/queue-name: q"
  local wl=""
  wait_until "d's 5 pods run" has_running d 5 && wl="$(workload_of d)"
  check "d's Workload has the default class's priority" \
    "$(k get workloads.v1beta1.kueue.x-k8s.io "${wl}" \
      -o 'jsonpath={.spec.priorityClassName}={.spec.priority} {.spec.priorityClassSource}')" \
    "${class}=7 scheduling.k8s.io/priorityclass"
  check "d's pods run at that class" "$(k get pod d-ps-0 -o 'jsonpath={.spec.priority}' 2>/dev/null)" 7
  kubectl delete priorityclass "${class}" >/dev/null || fail "deleting the default PriorityClass"
}

# Last (it restarts the operator without --kueue): a job asking for a queue
# runs unqueued, and an event says why.
case_without_kueue_flag_the_job_runs_with_a_warning() {
  stop_operator
  start_operator
  new_ns off
  queue q 5
  job busy "kueue.x-k8s.io/queue-name: q"
  # (Its pods stay Pending: without an admission nothing tolerates the kwok taint.)
  wait_until "the labelled job's pods are created at once" has_pods busy 5 || return
  check "no Workload" "$(workload_of busy)" ""
  wait_until "a KueueIntegrationDisabled warning" \
    bash -c "kubectl -n ${ns} get events.events.k8s.io -o jsonpath='{.items[*].reason}' | grep -q KueueIntegrationDisabled"
}

setup_flavor
start_operator --kueue
cases=(case_packaging_only_when_on case_second_job_waits_for_the_first
  case_higher_priority_preempts_and_the_lower_resumes case_pod_priority_class_orders_the_queue
  case_running_job_outlives_the_pods_ready_timeout
  case_suspend_releases_the_quota_and_resume_queues_again
  case_removed_queue_label_keeps_the_job_queued case_changed_queue_label_moves_the_workload
  case_deleted_job_releases_its_quota_to_another_namespace
  case_unlabelled_job_is_untouched
  case_missing_priority_class_says_so_then_queues case_global_default_priority_class_is_the_workloads
  case_without_kueue_flag_the_job_runs_with_a_warning)
[[ $# -gt 1 ]] && cases=("${@:2}")
run_cases "${cases[@]}"

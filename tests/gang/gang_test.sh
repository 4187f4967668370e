#!/usr/bin/env bash
# Gang scheduling against a real control plane with scheduler-plugins as a
# second scheduler (the ctest `gang-cluster` fixture: KUBETRAIN_GANG_SCHEDULER=1,
# no nodes of its own). The test adds two kwok nodes with 2 CPUs each: room for
# 4 pods of 1 CPU. Usage: gang_test.sh OPERATOR_BINARY [CASE...]. The operator
# runs as its ServiceAccount with the base RBAC plus the gang-scheduling
# component's, and is stopped by PID.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: gang_test.sh OPERATOR_BINARY [CASE...]}"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
: "${KUBECONFIG:?KUBECONFIG must point at the gang test cluster}"
: "${KUBETRAIN_TEST_CLUSTER_DIR:?the gang test cluster dir}"
scheduler="$(cat "${KUBETRAIN_TEST_CLUSTER_DIR}/gang-scheduler-name")" || exit 1
work="$(mktemp -d)"
op_pid=""
NS_PREFIX=gang
T=90
WAIT_SECONDS=${T}
source "${root}/tests/tools/testlib.sh"

cleanup() {
  if [[ -n "${op_pid}" ]]; then kill "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; fi
  delete_namespaces
  if ((failures)); then
    echo "---- operator log (last 40 lines)"
    tail -n 40 "${work}/operator.log"
    echo "---- gang scheduler log (last 20 lines)"
    tail -n 20 "${KUBETRAIN_TEST_CLUSTER_DIR}/logs/scheduler-plugins.log"
  fi
  rm -rf "${work}"
}
trap cleanup EXIT

# job NAME PODS GANG: 1 PS and PODS-1 workers of 1 CPU each, on the test's
# nodes; GANG=1 names the gang scheduler and a gang of every pod.
job() {
  local policy=""
  [[ "$3" == 1 ]] && policy="runPolicy: {schedulingPolicy: {schedulerName: ${scheduler}, minAvailable: $2}}"
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  ${policy}
  replicaSpecs:
    PS:
      replicas: 1
      template: &pod
        spec:
          nodeSelector: {kubetrain.io/gang-test: "true"}
          containers:
            - name: trainer
              image: kubetrain-trainer
              resources: {requests: {cpu: "1", memory: 100Mi}}
    Worker:
      replicas: $(($2 - 1))
      template: *pod
JOB
}

bound() {  # bound JOB: how many of its pods have a node
  k get pods -l "kubetrain.io/job-name=$1" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' |
    grep -c .
}
refused() {  # refused JOB: how many of its pods the scheduler marked Unschedulable
  k get pods -l "kubetrain.io/job-name=$1" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="PodScheduled")].reason}{"\n"}{end}' |
    grep -c '^Unschedulable$'
}
pods_of() { k get pods -l "kubetrain.io/job-name=$1" -o name | grep -c .; }
group() { echo "$1-$(jpath "tj/$1" '{.metadata.uid}')"; }  # group JOB: its PodGroup's name
condition() {  # condition JOB TYPE FIELD
  jpath "tj/$1" "{.status.conditions[?(@.type==\"$2\")].$3}"
}

case_a_gang_that_does_not_fit_binds_none_and_says_why() {
  new_ns nofit
  job g5 5 1
  local g
  g="$(group g5)"
  wait_until "the PodGroup ${g}" k get podgroup "${g}"
  check "PodGroup minMember and minResources" \
    "$(jpath "podgroup/${g}" '{.spec.minMember} {.spec.minResources.cpu} {.spec.minResources.memory}')" \
    "5 5 524288000"
  check "PodGroup owned by the job" \
    "$(jpath "podgroup/${g}" '{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}')" \
    "TrainingJob/g5"
  check "pods carry the group and the scheduler" \
    "$(jpath pod/g5-worker-3 '{.metadata.labels.scheduling\.x-k8s\.io/pod-group} {.spec.schedulerName}')" \
    "${g} ${scheduler}"
  wait_until "the scheduler refused all 5 pods" bash -c "[[ \$(kubectl -n ${ns} get pods -l kubetrain.io/job-name=g5 -o jsonpath='{range .items[*]}{.status.conditions[?(@.type==\"PodScheduled\")].reason}{\"\\n\"}{end}' | grep -c '^Unschedulable$') == 5 ]]"
  check "none of the 5 pods is bound" "$(bound g5)" 0
  wait_until "the job says it is unschedulable" bash -c \
    "[[ \$(kubectl -n ${ns} get tj g5 -o jsonpath='{.status.conditions[?(@.type==\"Unschedulable\")].status}') == True ]]"
  # The count in the message may trail the pods by --status-coalesce (it waits like a count).
  wait_until "the condition counts the gang" bash -c \
    "kubectl -n ${ns} get tj g5 -o jsonpath='{.status.conditions[?(@.type==\"Unschedulable\")].message}' | grep -q '^5 of 5 pods cannot be scheduled (gang of 5 for scheduler ${scheduler}'"
  echo "  condition: $(condition g5 Unschedulable message)"
  wait_until "an Unschedulable event on the job" bash -c \
    "kubectl -n ${ns} get events.events.k8s.io -o json | jq -e '[.items[] | select(.reason == \"Unschedulable\" and .regarding.kind == \"TrainingJob\")] | length > 0'"
  check "still none bound" "$(bound g5)" 0
  k delete tj g5 >/dev/null
  wait_until "the PodGroup goes with the job" bash -c "! kubectl -n ${ns} get podgroup ${g} >/dev/null 2>&1"
  wait_until "its pods go" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
}

case_without_a_gang_four_of_five_bind() {
  new_ns nogang
  job n5 5 0
  wait_until "4 pods bound" bash -c "[[ \$(kubectl -n ${ns} get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 4 ]]"
  wait_until "the fifth refused" bash -c "[[ \$(kubectl -n ${ns} get pods -o jsonpath='{range .items[*]}{.status.conditions[?(@.type==\"PodScheduled\")].reason}{\"\\n\"}{end}' | grep -c '^Unschedulable$') == 1 ]]"
  check "no PodGroup" "$(k get podgroups -o name | grep -c .)" 0
  wait_until "the job says one pod is unschedulable" bash -c \
    "kubectl -n ${ns} get tj n5 -o jsonpath='{.status.conditions[?(@.type==\"Unschedulable\")].message}' | grep -q '^1 of 5 pods cannot be scheduled; '"
  check "4 bound, holding the room" "$(bound n5)" 4
  k delete tj n5 >/dev/null
  wait_until "its pods go" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
}

case_two_gangs_on_room_for_one_never_deadlock() {
  new_ns twogangs
  job a 3 1
  job b 3 1
  wait_until "one gang fully bound" bash -c \
    "[[ \$(kubectl -n ${ns} get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 3 ]]"
  local first second
  if [[ "$(bound a)" == 3 ]]; then first=a second=b; else first=b second=a; fi
  check "the first gang (${first}) has all 3 pods" "$(bound "${first}")" 3
  check "the other (${second}) has none: no half-placed gang" "$(bound "${second}")" 0
  wait_until "${first} running" bash -c \
    "[[ \$(kubectl -n ${ns} get tj ${first} -o jsonpath='{.status.state}') == Running ]]"
  wait_until "${second} says it is unschedulable" bash -c \
    "[[ \$(kubectl -n ${ns} get tj ${second} -o jsonpath='{.status.conditions[?(@.type==\"Unschedulable\")].status}') == True ]]"
  check "still none of ${second} bound" "$(bound "${second}")" 0
  # The first finishes (kwok ends its pods with exit code 0): the second runs.
  for p in $(k get pods -l "kubetrain.io/job-name=${first}" -o name); do
    k annotate "${p}" kubetrain.io/test-exit-code=0 >/dev/null
  done
  wait_until "${first} succeeded" bash -c \
    "[[ \$(kubectl -n ${ns} get tj ${first} -o jsonpath='{.status.state}') == Succeeded ]]"
  wait_until "${second} fully bound" bash -c "[[ \$(kubectl -n ${ns} get pods -l kubetrain.io/job-name=${second} -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 3 ]]"
  wait_until "${second} running" bash -c \
    "[[ \$(kubectl -n ${ns} get tj ${second} -o jsonpath='{.status.state}') == Running ]]"
  check "${second} no longer unschedulable" "$(condition "${second}" Unschedulable status)" False
  k delete tj a b >/dev/null
  wait_until "their pods go" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
}

case_suspend_keeps_the_group_and_resume_updates_it() {
  new_ns suspend
  job s 3 1
  wait_until "3 pods bound" bash -c "[[ \$(kubectl -n ${ns} get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 3 ]]"
  local g
  g="$(group s)"
  k patch tj s --type=merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
  wait_until "its pods go" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
  check "the PodGroup stays" "$(jpath "podgroup/${g}" '{.spec.minMember}')" 3
  # Reshaped while suspended: 4 pods, a gang of 4.
  k patch tj s --type=merge -p '{"spec":{"replicaSpecs":{"Worker":{"replicas":3}},"runPolicy":{"suspend":false,"schedulingPolicy":{"minAvailable":4}}}}' >/dev/null
  wait_until "the group follows the job" bash -c \
    "[[ \$(kubectl -n ${ns} get podgroup ${g} -o jsonpath='{.spec.minMember} {.spec.minResources.cpu}') == '4 4' ]]"
  wait_until "all 4 bound" bash -c "[[ \$(kubectl -n ${ns} get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 4 ]]"
  k delete tj s >/dev/null
  wait_until "its pods go" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
}

# Once training is over only the evaluator runs on; a
# recreated evaluator alone can never make a gang of 3, so it must not be one.
case_an_evaluator_recreated_after_training_is_scheduled() {
  new_ns evalgang
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: ev}
spec:
  runPolicy: {schedulingPolicy: {schedulerName: ${scheduler}, minAvailable: 3}}
  replicaSpecs:
    PS:
      replicas: 1
      template: &pod
        spec:
          nodeSelector: {kubetrain.io/gang-test: "true"}
          containers:
            - name: trainer
              image: kubetrain-trainer
              resources: {requests: {cpu: "1", memory: 100Mi}}
    Worker: {replicas: 1, template: *pod}
    Evaluator: {replicas: 1, restartPolicy: OnFailure, template: *pod}
JOB
  wait_until "3 pods bound" bash -c "[[ \$(kubectl -n ${ns} get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 3 ]]"
  check "the first evaluator is in the gang" \
    "$(jpath pod/ev-evaluator-0 '{.metadata.labels.scheduling\.x-k8s\.io/pod-group}' | grep -c .)" 1
  k annotate pod ev-worker-0 kubetrain.io/test-exit-code=0 >/dev/null
  wait_until "training over: the job waits for its evaluator" bash -c \
    "[[ \$(kubectl -n ${ns} get tj ev -o jsonpath='{.status.conditions[?(@.type==\"Running\")].reason}') == WaitingForEvaluator ]]"
  local first
  first="$(jpath pod/ev-evaluator-0 '{.metadata.uid}')"
  k annotate pod ev-evaluator-0 kubetrain.io/test-exit-code=1 >/dev/null
  wait_until "a new evaluator pod" bash -c \
    "uid=\$(kubectl -n ${ns} get pod ev-evaluator-0 -o jsonpath='{.metadata.uid}' 2>/dev/null); [[ -n \$uid && \$uid != ${first} ]]"
  wait_until "the new evaluator is scheduled" bash -c \
    "[[ -n \$(kubectl -n ${ns} get pod ev-evaluator-0 -o jsonpath='{.spec.nodeName}') ]]" ||
    echo "  evaluator: $(jpath pod/ev-evaluator-0 '{.status.conditions[?(@.type=="PodScheduled")].message}')"
  check "the new evaluator is outside the gang" \
    "$(jpath pod/ev-evaluator-0 '{.metadata.labels.scheduling\.x-k8s\.io/pod-group}' | grep -c .)" 0
  k annotate pod ev-evaluator-0 kubetrain.io/test-exit-code=0 >/dev/null
  wait_until "the job succeeds" bash -c \
    "[[ \$(kubectl -n ${ns} get tj ev -o jsonpath='{.status.conditions[?(@.type==\"Succeeded\")].status}') == True ]]"
  k delete tj ev >/dev/null
  wait_until "its pods go" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
}

# A job deleted and created again under its name gets a PodGroup of its own:
# the earlier job's group, which the garbage collector is deleting (held here
# by a finalizer, so the window cannot close before the new job meets it), is
# never the new pods' group. Named after the job, the new pods joined the
# dying group and stayed unschedulable once it was gone.
case_a_recreated_job_never_adopts_the_group_being_deleted() {
  new_ns recreate
  job r 3 1
  local old
  old="$(group r)"
  wait_until "the PodGroup ${old}" k get podgroup "${old}"
  wait_until "3 pods bound" bash -c "[[ \$(kubectl -n ${ns} get pods -l kubetrain.io/job-name=r -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 3 ]]"
  k patch podgroup "${old}" --type=merge -p '{"metadata":{"finalizers":["kubetrain.io/test-hold"]}}' >/dev/null
  k delete tj r --wait=false >/dev/null
  wait_until "the old job is gone" bash -c "! kubectl -n ${ns} get tj r >/dev/null 2>&1"
  wait_until "the old group is being deleted" bash -c \
    "[[ -n \$(kubectl -n ${ns} get podgroup ${old} -o jsonpath='{.metadata.deletionTimestamp}') ]]"
  wait_until "the old pods go" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
  job r 3 1
  local new
  new="$(group r)"
  [[ "${new}" != "${old}" ]] || fail "the re-created job has the old UID"
  wait_until "the new job's PodGroup ${new}" k get podgroup "${new}"
  check "the new group is the new job's" \
    "$(jpath "podgroup/${new}" '{.metadata.ownerReferences[0].uid}')" "$(jpath tj/r '{.metadata.uid}')"
  wait_until "3 new pods" bash -c "[[ \$(kubectl -n ${ns} get pods -l kubetrain.io/job-name=r -o name | grep -c .) == 3 ]]"
  check "the new pods are in the new group" \
    "$(k get pods -l kubetrain.io/job-name=r -o jsonpath='{range .items[*]}{.metadata.labels.scheduling\.x-k8s\.io/pod-group}{"\n"}{end}' | sort -u)" \
    "${new}"
  k patch podgroup "${old}" --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]' >/dev/null
  wait_until "the old group is gone" bash -c "! kubectl -n ${ns} get podgroup ${old} >/dev/null 2>&1"
  wait_until "all 3 new pods bound" bash -c "[[ \$(kubectl -n ${ns} get pods -l kubetrain.io/job-name=r -o jsonpath='{range .items[*]}{.spec.nodeName}{\"\\n\"}{end}' | grep -c .) == 3 ]]"
  k delete tj r >/dev/null
  wait_until "its pods go" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
}

# The test's nodes: room for 4 pods of 1 CPU.
for i in 0 1; do
  cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: gang-node-${i}
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, kubetrain.io/gang-test: "true", kubernetes.io/hostname: gang-node-${i}, kubernetes.io/os: linux}
status:
  allocatable: {cpu: "2", memory: 8Gi, pods: "110"}
  capacity: {cpu: "2", memory: 8Gi, pods: "110"}
---
NODE
done | kubectl apply -f - >/dev/null || { echo "nodes rejected"; exit 1; }
kubectl wait --for=condition=Ready node -l kubetrain.io/gang-test=true --timeout="${T}s" >/dev/null || exit 1
check "node capacity kept" "$(kubectl get node gang-node-0 -o jsonpath='{.status.allocatable.cpu}')" 2

kubectl apply -k "${root}/deploy/kustomize/rbac" >/dev/null || { echo "rbac rejected"; exit 1; }
kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" >/dev/null || { echo "CRD rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
sa=system:serviceaccount:kubetrain-system:kubetrain-operator
check "the base RBAC grants no podgroups" "$(kubectl auth can-i create podgroups.scheduling.x-k8s.io -n x --as="${sa}")" no
kubectl apply -f "${root}/deploy/kustomize/components/gang-scheduling/rbac.yaml" >/dev/null
check "the gang-scheduling component grants create and patch on podgroups" \
  "$(kubectl auth can-i create podgroups.scheduling.x-k8s.io -n x --as="${sa}")/$(kubectl auth can-i patch podgroups.scheduling.x-k8s.io -n x --as="${sa}")" yes/yes
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
# Jobs name the gang scheduler themselves (schedulerName + minAvailable); the
# operator's --gang-scheduler-name is not set, so the no-gang case has none.
"${operator}" --kubeconfig "${work}/operator-kubeconfig" \
  --metrics-addr "127.0.0.1:$(free_port)" --health-addr "127.0.0.1:$(free_port)" \
  >>"${work}/operator.log" 2>&1 &
op_pid=$!
cases=(case_a_gang_that_does_not_fit_binds_none_and_says_why case_without_a_gang_four_of_five_bind
  case_two_gangs_on_room_for_one_never_deadlock case_suspend_keeps_the_group_and_resume_updates_it
  case_an_evaluator_recreated_after_training_is_scheduled
  case_a_recreated_job_never_adopts_the_group_being_deleted)
[[ $# -gt 1 ]] && cases=("${@:2}")
run_cases "${cases[@]}"

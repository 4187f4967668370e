#!/usr/bin/env bash
# Integration tests of kubetrain-operator against the real control plane (the
# ctest `cluster` fixture), with kwok driving pod phases: one case per
# lifecycle rule of the TrainingJob controller. Usage: controller_test.sh OPERATOR_BINARY
# Each case runs in its own namespace; the operator is started and stopped by
# PID by this script. Exits non-zero if any case fails.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: controller_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
work="$(mktemp -d)"
op_pid=""
NS_PREFIX=ctl
T=60  # seconds any single wait may take
WAIT_SECONDS=${T}

metrics_port="$(free_port)"
health_port="$(free_port)"
start_operator() {  # start_operator [EXTRA-FLAG...]
  "${operator}" --kubeconfig "${work}/operator-kubeconfig" --leader-elect \
    --leader-elect-namespace kubetrain-system --metrics-addr "127.0.0.1:${metrics_port}" \
    --health-addr "127.0.0.1:${health_port}" --workers 4 "$@" \
    >>"${work}/operator.log" 2>&1 &
  op_pid=$!
}
stop_operator() {  # stop_operator [SIGNAL]
  [[ -n "${op_pid}" ]] || return 0
  kill "-${1:-TERM}" "${op_pid}" 2>/dev/null
  wait "${op_pid}" 2>/dev/null
  op_pid=""
}
cleanup() {
  stop_operator
  delete_namespaces
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

wait_cond() {  # wait_cond JOB CONDITION
  k wait --for="condition=$2" "tj/$1" --timeout="${T}s" >/dev/null || fail "$1 never reached $2"
}
pod_count() { k get pods -l "kubetrain.io/job-name=$1" -o name | wc -l; }
has_pods() { [[ "$(pod_count "$1")" == "$2" ]]; }

# template [ANNOTATIONS-YAML]: a pod template that runs on kwok nodes.
template() {
  cat <<TPL
      template:
        metadata:
          annotations: {${1:-}}
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
TPL
}
# job NAME RUN-POLICY-YAML PS-REPLICAS WORKER-REPLICAS WORKER-POLICY [WORKER-ANNOTATIONS]
job() {
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  runPolicy: {$2}
  replicaSpecs:
    PS:
      replicas: $3
      restartPolicy: Never
$(template)
    Worker:
      replicas: $4
      restartPolicy: $5
$(template "${6:-}")
JOB
}

case_env_contract() {
  new_ns env
  job j "" 1 2 Never
  wait_until "3 running pods" bash -c "[[ \$(kubectl -n ${ns} get pods --field-selector=status.phase=Running -o name | wc -l) == 3 ]]"
  local d="j.${ns}.svc.cluster.local:2222"  # serviceMode JobWide (the default)
  local cc="{\"ps\":[\"j-ps-0.${d}\"],\"worker\":[\"j-worker-0.${d}\",\"j-worker-1.${d}\"]}"
  # The host list is in the job's auth Secret once (no ConfigMap); the pod
  # references it, and TF_CONFIG is expanded from it by the kubelet ($(CLUSTER_CONFIG)).
  # The Secret is named by the job's UID (a same-named later job never meets it).
  local secret="j-auth-$(jpath tj/j '{.metadata.uid}')"
  check "CLUSTER_CONFIG of worker-1 comes from the job's Secret" \
    "$(jpath pod/j-worker-1 '{.spec.containers[0].env[?(@.name=="CLUSTER_CONFIG")].valueFrom.secretKeyRef.name}/{.spec.containers[0].env[?(@.name=="CLUSTER_CONFIG")].valueFrom.secretKeyRef.key}')" \
    "${secret}/cluster"
  check "the Secret holds CLUSTER_CONFIG" "$(jpath "secret/${secret}" '{.data.cluster}' | base64 -d)" "${cc}"
  check "Secret controlled by the job" "$(jpath "secret/${secret}" '{.metadata.ownerReferences[0].kind},{.metadata.ownerReferences[0].controller}')" "TrainingJob,true"
  check "no ConfigMap for a new job" "$(k get configmap -l kubetrain.io/job-name=j -o name | wc -l)" 0
  check "POD_NAME of ps-0" "$(jpath pod/j-ps-0 '{.spec.containers[0].env[?(@.name=="POD_NAME")].value}')" ps-0
  check "TF_CONFIG of worker-1 expands CLUSTER_CONFIG" \
    "$(jpath pod/j-worker-1 '{.spec.containers[0].env[?(@.name=="TF_CONFIG")].value}')" \
    '{"cluster":$(CLUSTER_CONFIG),"environment":"cloud","task":{"index":1,"type":"worker"}}'
  check "auth key comes from the job's secret" \
    "$(jpath pod/j-worker-0 '{.spec.containers[0].env[?(@.name=="KUBETRAIN_AUTH_KEY")].valueFrom.secretKeyRef.name}')" "${secret}"
  check "secret holds 64 hex characters" "$(jpath "secret/${secret}" '{.data.key}' | base64 -d | tr -d '0-9a-f' | wc -c)" 0
  check "secret key length" "$(jpath "secret/${secret}" '{.data.key}' | base64 -d | wc -c)" 64
  check "labels" "$(jpath pod/j-worker-1 '{.metadata.labels.kubetrain\.io/job-name},{.metadata.labels.kubetrain\.io/replica-type},{.metadata.labels.kubetrain\.io/replica-index}')" "j,worker,1"
  check "pod controlled by the job" "$(jpath pod/j-ps-0 '{.metadata.ownerReferences[0].kind},{.metadata.ownerReferences[0].controller}')" "TrainingJob,true"
  # The job-wide Service comes once the pods run, so the endpoint controllers
  # write its Endpoints and EndpointSlice once, with every pod: it is newer
  # than each pod's last update (resourceVersions are etcd revisions here;
  # kwok pods are not updated after turning Running).
  wait_until "the job's Service" k get svc j
  local svc_rv pod_rvs newest=0
  svc_rv="$(jpath svc/j '{.metadata.resourceVersion}')"
  pod_rvs="$(jpath pods '{.items[*].metadata.resourceVersion}')"
  for rv in ${pod_rvs}; do ((rv > newest)) && newest=${rv}; done
  check "the Service comes after every pod runs" "$((svc_rv > newest))" 1
  check "one headless service for the job" "$(jpath svc/j '{.spec.clusterIP}')" None
  check "no per-replica services" "$(k get svc -l kubetrain.io/job-name=j -o name)" service/j
  check "pod hostname and subdomain" "$(jpath pod/j-worker-1 '{.spec.hostname}.{.spec.subdomain}')" j-worker-1.j
  check "restartPolicy forced to Never" "$(jpath pod/j-worker-0 '{.spec.restartPolicy}')" Never
  check "port on the main container" "$(jpath pod/j-worker-0 '{.spec.containers[0].ports[0].containerPort}')" 2222
  wait_cond j Running
  check "status active workers" "$(jpath tj/j '{.status.replicaStatuses.Worker.active}')" 2
  # Deleting the job removes pods, services and the secret through the garbage collector.
  k delete tj j --wait=false >/dev/null
  wait_until "children collected" bash -c "[[ -z \$(kubectl -n ${ns} get pods,services,secrets,configmaps -l kubetrain.io/job-name=j -o name) ]]"
  check "children collected after the job was deleted" "$(k get pods,svc,secret,configmap -l kubetrain.io/job-name=j -o name | wc -l)" 0
}

case_per_replica_services() {
  new_ns perreplica
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: j}
spec:
  serviceMode: PerReplica
  replicaSpecs:
    PS:
      replicas: 1
$(template)
    Worker:
      replicas: 1
$(template)
JOB
  wait_cond j Running
  # Each replica's Service comes once its pod runs (then the endpoint
  # controllers write its Endpoints and EndpointSlice once): newer than its pod.
  local r svc_rv pod_rv
  for r in ps-0 worker-0; do
    wait_until "Service j-${r}" k get svc "j-${r}" || return
    svc_rv="$(jpath "svc/j-${r}" '{.metadata.resourceVersion}')"
    pod_rv="$(jpath "pod/j-${r}" '{.metadata.resourceVersion}')"
    check "Service j-${r} comes after its pod runs" "$((svc_rv > pod_rv))" 1
  done
  check "no job-wide Service" "$(k get svc j -o name 2>/dev/null)" ""
  check "per-replica host names" \
    "$(jpath secret/"j-auth-$(jpath tj/j '{.metadata.uid}')" '{.data.cluster}' | base64 -d)" \
    "{\"ps\":[\"j-ps-0.${ns}.svc.cluster.local:2222\"],\"worker\":[\"j-worker-0.${ns}.svc.cluster.local:2222\"]}"
}

case_success_cleans_ps() {
  new_ns success
  # Worker 0 decides (ChiefOrWorker0); worker 1 and the PS never exit by themselves.
  job j "" 2 2 Never
  wait_until "all pods running" bash -c "[[ \$(kubectl -n ${ns} get pods --field-selector=status.phase=Running -o name | wc -l) == 4 ]]"
  k annotate pod j-worker-0 kubetrain.io/test-exit-code=0 >/dev/null
  wait_cond j Succeeded
  no_running() { [[ -z "$(k get pods -l kubetrain.io/job-name=j --field-selector=status.phase=Running -o name)" ]]; }
  wait_until "running pods deleted" no_running
  check "PS pods removed after success (cleanPodPolicy Running)" \
    "$(k get pods -l kubetrain.io/replica-type=ps -o name | wc -l)" 0
  check "the finished worker-0 is kept for its logs" "$(k get pods -o name)" "pod/j-worker-0"
  check "completionTime set" "$(jpath tj/j '{.status.completionTime}' | cut -c1-2)" 20
  check "succeeded reason" "$(jpath tj/j '{.status.conditions[?(@.type=="Succeeded")].reason}')" TrainingJobSucceeded
}

case_evaluator_keeps_the_job_running() {
  new_ns evaluator
  # Worker 0 decides; the evaluator is still evaluating the final checkpoint when it
  # succeeds: the job must wait for it, without killing it.
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: j}
spec:
  replicaSpecs:
    PS:
      replicas: 1
      restartPolicy: Never
$(template)
    Worker:
      replicas: 1
      restartPolicy: Never
$(template)
    Evaluator:
      replicas: 1
      restartPolicy: OnFailure
$(template)
JOB
  wait_until "all pods running" bash -c "[[ \$(kubectl -n ${ns} get pods --field-selector=status.phase=Running -o name | wc -l) == 3 ]]"
  k annotate pod j-worker-0 kubetrain.io/test-exit-code=0 >/dev/null
  wait_until "waiting for the evaluator" bash -c "[[ \$(kubectl -n ${ns} get tj j -o jsonpath='{.status.conditions[?(@.type==\"Running\")].reason}') == WaitingForEvaluator ]]"
  check "the job is still Running" "$(jpath tj/j '{.status.state}')" Running
  check "the status says why" "$(jpath tj/j '{.status.conditions[?(@.type=="Running")].message}')" \
    "training succeeded (Worker 0 succeeded); waiting for 1 of 1 evaluators to evaluate the final checkpoint and exit 0"
  ps_gone() { [[ -z "$(k get pods -l kubetrain.io/replica-type=ps -o name)" ]]; }
  wait_until "the PS deleted (cleanPodPolicy Running)" ps_gone
  check "the evaluator still runs" "$(jpath pod/j-evaluator-0 '{.status.phase}/{.metadata.deletionTimestamp}')" "Running/"
  check "not succeeded yet" "$(jpath tj/j '{.status.conditions[?(@.type=="Succeeded")].status}')" ""
  # A failed evaluator is restarted, training is not.
  local uid; uid="$(jpath pod/j-evaluator-0 '{.metadata.uid}')"
  k annotate pod j-evaluator-0 kubetrain.io/test-exit-code=137 >/dev/null
  wait_until "evaluator recreated" bash -c "u=\$(kubectl -n ${ns} get pod j-evaluator-0 -o jsonpath='{.metadata.uid}' 2>/dev/null); [[ -n \$u && \$u != ${uid} ]]"
  check "evaluator restart counted" "$(jpath tj/j '{.status.replicaStatuses.Evaluator.restarts}')" 1
  check "no PS recreated" "$(k get pods -l kubetrain.io/replica-type=ps -o name | wc -l)" 0
  wait_until "new evaluator running" bash -c "[[ \$(kubectl -n ${ns} get pod j-evaluator-0 -o jsonpath='{.status.phase}') == Running ]]"
  k annotate pod j-evaluator-0 kubetrain.io/test-exit-code=0 \
    kubetrain.io/test-termination-message='{"task":"evaluator-0","step":400,"eval":{"auc":0.8}}' >/dev/null
  wait_cond j Succeeded
  check "success message" "$(jpath tj/j '{.status.conditions[?(@.type=="Succeeded")].message}')" \
    "training succeeded (Worker 0 succeeded) and the evaluator evaluated the final checkpoint"
  check "the evaluator's metrics in the status" "$(jpath tj/j '{.status.metrics.evaluator.step}')" 400
}

case_exit_code_restart() {
  new_ns restart
  # Every pod the apiserver ever held, by name and UID, to count creates.
  kubectl -n "${ns}" get pods -w -o jsonpath='{.metadata.name} {.metadata.uid}{"\n"}' \
    >"${work}/restart.pods" 2>/dev/null &
  local watch_pid=$!
  wait_until "watch established" bash -c "kubectl -n ${ns} get pods >/dev/null"
  job j "" 1 1 ExitCode
  wait_until "worker running" bash -c "[[ \$(kubectl -n ${ns} get pod j-worker-0 -o jsonpath='{.status.phase}') == Running ]]"
  local uid; uid="$(jpath pod/j-worker-0 '{.metadata.uid}')"
  k annotate pod j-worker-0 kubetrain.io/test-exit-code=137 >/dev/null
  wait_until "worker-0 recreated" bash -c "u=\$(kubectl -n ${ns} get pod j-worker-0 -o jsonpath='{.metadata.uid}' 2>/dev/null); [[ -n \$u && \$u != ${uid} ]]"
  wait_until "restart counted" bash -c "[[ \$(kubectl -n ${ns} get tj j -o jsonpath='{.status.replicaStatuses.Worker.restarts}') == 1 ]]"
  check "retryable exit code restarts the replica" "$(jpath tj/j '{.status.replicaStatuses.Worker.restarts}')" 1
  check "last failure exit code" "$(jpath tj/j '{.status.replicaStatuses.Worker.lastFailure.exitCode}')" 137
  wait_until "new worker running" bash -c "[[ \$(kubectl -n ${ns} get pod j-worker-0 -o jsonpath='{.status.phase}') == Running ]]"
  k annotate pod j-worker-0 kubetrain.io/test-exit-code=2 kubetrain.io/test-termination-message='bad flag --lr' >/dev/null
  wait_cond j Failed
  check "permanent exit code fails the job" "$(jpath tj/j '{.status.conditions[?(@.type=="Failed")].reason}')" ReplicaFailed
  check "failure message names the exit code" \
    "$(jpath tj/j '{.status.replicaStatuses.Worker.lastFailure.exitCode}/{.status.replicaStatuses.Worker.lastFailure.message}')" \
    "2/bad flag --lr"
  kill "${watch_pid}" 2>/dev/null
  wait "${watch_pid}" 2>/dev/null
  # ps-0 once; worker-0 twice: the first pod and the one restart (exit 2 is permanent).
  check "pods created per replica (one create per start)" \
    "$(awk 'NF == 2' "${work}/restart.pods" | sort -u | awk '{print $1}' | sort | uniq -c | awk '{print $2 "=" $1}' | tr '\n' ' ')" \
    "j-ps-0=1 j-worker-0=2 "
}

case_backoff_limit() {
  new_ns backoff
  job j "backoffLimit: 2" 1 1 OnFailure '"kubetrain.io/test-exit-code": "139", "kubetrain.io/test-termination-message": "segfault"'
  wait_cond j Failed
  check "reason BackoffLimitExceeded" "$(jpath tj/j '{.status.conditions[?(@.type=="Failed")].reason}')" BackoffLimitExceeded
  check "restarts stop at the limit" "$(jpath tj/j '{.status.replicaStatuses.Worker.restarts}')" 2
  check "last failure kept" "$(jpath tj/j '{.status.replicaStatuses.Worker.lastFailure.exitCode},{.status.replicaStatuses.Worker.lastFailure.message}')" "139,segfault"
  wait_until "running PS cleaned up" bash -c "[[ -z \$(kubectl -n ${ns} get pod j-ps-0 -o name 2>/dev/null) ]]"
  check "event recorded" "$(k get events.events.k8s.io --field-selector reason=BackoffLimitExceeded -o name | wc -l | tr -d ' ')" 1
}

case_deadline() {
  new_ns deadline
  job j "activeDeadlineSeconds: 3" 1 1 Never
  wait_cond j Failed
  check "reason DeadlineExceeded" "$(jpath tj/j '{.status.conditions[?(@.type=="Failed")].reason}')" DeadlineExceeded
  wait_until "pods removed at the deadline" has_pods j 0
}

case_ttl() {
  new_ns ttl
  job j "ttlSecondsAfterFinished: 2" 1 1 Never '"kubetrain.io/test-exit-code": "0"'
  wait_until "job deleted after its TTL" bash -c "! kubectl -n ${ns} get tj j >/dev/null 2>&1"
  wait_until "children collected" bash -c "[[ -z \$(kubectl -n ${ns} get pods,services,secrets -l kubetrain.io/job-name=j -o name) ]]"
  check "job gone after ttlSecondsAfterFinished" "$(k get tj -o name | wc -l)" 0
}

case_suspend_resume() {
  new_ns suspend
  job j "suspend: true" 1 2 Never
  wait_cond j Suspended
  check "a suspended job has no pods" "$(pod_count j)" 0
  k patch tj j --type merge -p '{"spec":{"runPolicy":{"suspend":false}}}' >/dev/null
  wait_until "pods created on resume" has_pods j 3
  wait_cond j Running
  k patch tj j --type merge -p '{"spec":{"runPolicy":{"suspend":true}}}' >/dev/null
  wait_until "pods deleted on suspend" has_pods j 0
  check "Suspended again" "$(jpath tj/j '{.status.conditions[?(@.type=="Suspended")].status}')" True
}

case_operator_restart_mid_creation() {
  new_ns restart-op
  stop_operator
  # Every pod the apiserver ever held, by name and UID: a pod created twice
  # shows up as one name with two UIDs (a listing at the end could not tell).
  kubectl -n "${ns}" get pods -w -o jsonpath='{.metadata.name} {.metadata.uid}{"\n"}' \
    >"${work}/restart-op.pods" 2>/dev/null &
  local watch_pid=$!
  wait_until "watch established" bash -c "kubectl -n ${ns} get pods >/dev/null"
  job j "" 1 12 Never
  start_operator
  wait_until "first pods created" bash -c "(( \$(kubectl -n ${ns} get pods -o name | wc -l) >= 1 ))"
  stop_operator KILL
  start_operator
  wait_until "13 pods" has_pods j 13
  k annotate pod j-worker-0 kubetrain.io/test-exit-code=0 >/dev/null
  wait_cond j Succeeded
  kill "${watch_pid}" 2>/dev/null
  wait "${watch_pid}" 2>/dev/null
  check "13 pods were ever created" "$(awk 'NF == 2' "${work}/restart-op.pods" | sort -u | wc -l | tr -d ' ')" 13
  check "no pod was ever created twice (AlreadyExists is success)" \
    "$(awk 'NF == 2' "${work}/restart-op.pods" | sort -u | awk '{print $1}' | uniq -d | wc -l | tr -d ' ')" 0
}

case_invalid_spec() {
  new_ns invalid
  # A container name the apiserver rejects (the CRD passes templates through).
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: bad-name}
spec:
  replicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers: [{name: Not_A_DNS_Label, image: kubetrain-trainer}]
JOB
  # No containers at all: caught by the planner.
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: empty}
spec:
  replicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers: []
JOB
  wait_cond bad-name Failed
  wait_cond empty Failed
  check "rejected child fails the job as InvalidSpec" \
    "$(jpath tj/bad-name '{.status.conditions[?(@.type=="Failed")].reason}')" InvalidSpec
  check "the message carries the apiserver's reason" \
    "$(jpath tj/bad-name '{.status.conditions[?(@.type=="Failed")].message}' | grep -c 'Not_A_DNS_Label')" 1
  check "a template without containers is InvalidSpec" \
    "$(jpath tj/empty '{.status.conditions[?(@.type=="Failed")].reason}')" InvalidSpec
  check "no pods for invalid jobs" "$(k get pods -o name | wc -l)" 0
  check "one InvalidSpec event per job, no hot loop" \
    "$(k get events.events.k8s.io --field-selector reason=InvalidSpec -o jsonpath='{range .items[*]}{.regarding.name}{"\n"}{end}' | sort | uniq -c | awk '{print $1}' | sort -u | tr '\n' ' ')" "1 "
}

# Install as a platform team would (CRD, namespace, RBAC, Deployment), then run
# the operator as its ServiceAccount, so every case also proves the RBAC rules
# are enough (the Deployment's own pods stay Pending: kwok nodes are tainted).
case_never_fails_the_job() {
  new_ns never
  job j "" 1 2 Never '"kubetrain.io/test-exit-code": "137"'
  wait_cond j Failed
  check "Never: a failed replica fails the job" \
    "$(jpath tj/j '{.status.conditions[?(@.type=="Failed")].reason}')" ReplicaFailed
  check "no restart under Never" "$(jpath tj/j '{.status.replicaStatuses.Worker.restarts}')" 0
}

case_finished_job_gets_no_new_pods() {
  new_ns finished
  job j "cleanPodPolicy: None" 1 1 Never '"kubetrain.io/test-exit-code": "0"'
  wait_cond j Succeeded
  check "cleanPodPolicy None keeps the running PS" "$(jpath pod/j-ps-0 '{.status.phase}')" Running
  k delete pod j-worker-0 j-ps-0 --wait=false >/dev/null
  wait_until "pods gone" has_pods j 0
  # Any reconcile caused by those deletions has run once the job's status
  # reflects them; a finished job must still have no pods then.
  k annotate tj j kubetrain.io/poke=1 >/dev/null
  wait_until "status shows no active pods" bash -c "[[ \$(kubectl -n ${ns} get tj j -o jsonpath='{.status.replicaStatuses.PS.active}') == 0 ]]"
  check "a finished job never gets new pods" "$(pod_count j)" 0
  check "still Succeeded" "$(jpath tj/j '{.status.conditions[?(@.type=="Succeeded")].status}')" True
}

case_clean_pod_policy_all() {
  new_ns cleanall
  job j "cleanPodPolicy: All" 1 1 Never '"kubetrain.io/test-exit-code": "0"'
  wait_cond j Succeeded
  wait_until "every pod deleted (cleanPodPolicy All)" has_pods j 0
  check "cleanPodPolicy All removes finished pods too" "$(pod_count j)" 0
}

case_restart_policy_override_event() {
  new_ns override
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: j}
spec:
  replicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          restartPolicy: OnFailure
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
JOB
  wait_until "pod created" has_pods j 1
  check "template restartPolicy replaced by Never" "$(jpath pod/j-worker-0 '{.spec.restartPolicy}')" Never
  wait_until "warning event" bash -c "[[ -n \$(kubectl -n ${ns} get events.events.k8s.io --field-selector reason=RestartPolicyOverridden -o name) ]]"
}

# Termination messages are untrusted workload output: a note cut in the middle
# of a multi-byte character used to abort the operator.
# Three paddings put the 1024-byte event-note cut inside a 3-byte character for
# at least two of them; kubectl/the apiserver turn invalid UTF-8 into U+FFFD.
case_utf8_termination_messages() {
  new_ns utf8
  local euros="" i
  for ((i = 0; i < 400; i++)); do euros+="€"; done
  local msgs=("$(printf 'a%.0s' {1..1023})€€€€€€€€€€" "${euros}" "x${euros}" "xx${euros}")
  for i in 0 1 2 3; do
    job "j${i}" "" 1 1 Never "\"kubetrain.io/test-exit-code\": \"1\", \"kubetrain.io/test-termination-message\": \"${msgs[i]}\""
  done
  job bad "" 1 1 Never
  wait_until "bad's worker running" bash -c "[[ \$(kubectl -n ${ns} get pod bad-worker-0 -o jsonpath='{.status.phase}') == Running ]]"
  k annotate pod bad-worker-0 kubetrain.io/test-exit-code=1 "kubetrain.io/test-termination-message=$(printf 'bad \xff\xfe bytes \xe2\x82')" >/dev/null
  for i in 0 1 2 3; do
    wait_cond "j${i}" Failed
    check "j${i}: status carries the whole message" "$(jpath "tj/j${i}" '{.status.replicaStatuses.Worker.lastFailure.message}')" "${msgs[i]}"
  done
  wait_cond bad Failed
  check "invalid UTF-8 arrives replaced" "$(jpath tj/bad '{.status.replicaStatuses.Worker.lastFailure.message}')" "bad �� bytes ��"
  wait_until "a ReplicaFailed event per job" bash -c "[[ \$(kubectl -n ${ns} get events.events.k8s.io --field-selector reason=ReplicaFailed -o name | wc -l) -ge 5 ]]"
  local note bytes
  for i in 0 1 2 3; do
    note="$(k get events.events.k8s.io --field-selector "reason=ReplicaFailed,regarding.name=j${i}" -o jsonpath='{.items[0].note}')"
    bytes="$(printf '%s' "${note}" | wc -c)"
    ((bytes > 1020 && bytes <= 1024)) || fail "j${i}: event note of ${bytes} bytes, want 1021..1024"
    [[ "${msgs[i]}" == *"${note##*: }"* ]] || fail "j${i}: event note does not carry the message: ${note:0:80}"
  done
  check "operator still running" "$(kill -0 "${op_pid}" 2>/dev/null && echo yes)" yes
  check "no thread error counted" "$(curl -s "127.0.0.1:${metrics_port}/metrics" | grep -c '^kubetrain_thread_errors_total{.*} [1-9]')" 0
  kill -0 "${op_pid}" 2>/dev/null || { op_pid=""; start_operator; }
}

case_crash_loop_backoff() {
  new_ns crashloop
  # Every pod of worker 0 fails with a retryable code as soon as it runs. The
  # creates are counted from the apiserver: a watch that sees every pod UID.
  timeout 80 kubectl -n "${ns}" get pods -l kubetrain.io/replica-type=worker -w \
    -o jsonpath='{.metadata.uid} {.metadata.creationTimestamp}{"\n"}' >"${work}/crashloop.pods" 2>/dev/null &
  local watch_pid=$!
  wait_until "watch established" bash -c "kubectl -n ${ns} get pods >/dev/null"
  job j "" 1 1 ExitCode '"kubetrain.io/test-exit-code": "137"'
  wait "${watch_pid}"
  local created
  created="$(sort -u "${work}/crashloop.pods" | awk 'NF == 2 {print $2}' | python3 -c '
import sys, datetime
ts = sorted(datetime.datetime.fromisoformat(l.strip().replace("Z", "+00:00")) for l in sys.stdin if l.strip())
print(sum(1 for t in ts if (t - ts[0]).total_seconds() < 70) if ts else 0)')"
  echo "  worker pods created in the first 70 s: ${created}"
  ((created >= 2)) || fail "the failing worker was not restarted at all (${created} pods)"
  ((created <= 5)) || fail "crash loop without backoff: ${created} worker pods in 70 s, want at most 5"
  check "restarts visible in the status" "$(( $(jpath tj/j '{.status.replicaStatuses.Worker.restarts}') >= 2 ))" 1
  check "backoff visible in the status" "$(jpath tj/j '{.status.replicaStatuses.Worker.backoff[0].index}')" 0
  check "the event says how long it waits" \
    "$(k get events.events.k8s.io --field-selector reason=RestartingReplica -o jsonpath='{.items[*].note}' | grep -c 'recreating it in 10s (crash-loop backoff)')" 1
}

case_deleted_secret_fails_the_job() {
  new_ns secret
  job j "" 1 1 ExitCode
  wait_until "worker running" bash -c "[[ \$(kubectl -n ${ns} get pod j-worker-0 -o jsonpath='{.status.phase}') == Running ]]"
  k delete secret "j-auth-$(jpath tj/j '{.metadata.uid}')" >/dev/null || fail "deleting the Secret"
  # The PS still holds the old key; the restarted worker would get a new one.
  k annotate pod j-worker-0 kubetrain.io/test-exit-code=137 >/dev/null
  wait_cond j Failed
  check "a deleted Secret fails the job with a reason that says so" \
    "$(jpath tj/j '{.status.conditions[?(@.type=="Failed")].reason}')" AuthSecretDeleted
  check "the message names the Secret" \
    "$(jpath tj/j '{.status.conditions[?(@.type=="Failed")].message}' | grep -c 'j-auth')" 1
  wait_until "event recorded" bash -c "[[ -n \$(kubectl -n ${ns} get events.events.k8s.io --field-selector reason=AuthSecretDeleted -o name) ]]"
}

# The job's NetworkPolicy admits only the job's own pods to its training port
# and leaves every other port open (the trainer's metrics port must stay
# reachable). Only the objects are checked: the test cluster runs no network
# plugin that enforces policies (kwok nodes; the real node's bridge CNI does not
# either).
case_network_policy() {
  new_ns netpol
  job j "" 1 1 Never
  wait_until "2 running pods" bash -c "[[ \$(kubectl -n ${ns} get pods --field-selector=status.phase=Running -o name | wc -l) == 2 ]]"
  # Named by the job's UID (a re-created job never meets the earlier one's).
  local np="networkpolicy/j-training-$(jpath tj/j '{.metadata.uid}')"
  check "policy selects the job's pods" \
    "$(jpath "${np}" '{.spec.podSelector.matchLabels.kubetrain\.io/job-name}/{.spec.policyTypes}')" 'j/["Ingress"]'
  check "training port only from the job's own pods" \
    "$(jpath "${np}" '{.spec.ingress[0].from[0].podSelector.matchLabels.kubetrain\.io/job-name}/{.spec.ingress[0].from[0].namespaceSelector}/{.spec.ingress[0].ports[0].protocol}/{.spec.ingress[0].ports[0].port}')" \
    j//TCP/2222
  check "only one peer and one port in that rule" \
    "$(jpath "${np}" '{.spec.ingress[0].from[*].podSelector.matchLabels.kubetrain\.io/job-name} {.spec.ingress[0].ports[*].port}')" "j 2222"
  check "the metrics port only from the operator's pods, no other port" \
    "$(jpath "${np}" '{.spec.ingress[1].from}|{range .spec.ingress[1].ports[*]}{.protocol}:{.port}-{.endPort},{end}|{range .spec.ingress[*]}rule,{end}')" \
    '[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kubetrain-system"}},"podSelector":{"matchLabels":{"app.kubernetes.io/name":"kubetrain-operator"}}}]|TCP:metrics-,|rule,rule,'
  check "policy controlled by the job" \
    "$(jpath "${np}" '{.metadata.ownerReferences[0].kind},{.metadata.ownerReferences[0].controller}')" "TrainingJob,true"
  # An older operator's wider policy (every port open to everyone) on a job whose pods all
  # run: a new operator process brings it to its spec, no pod replaced; the next process
  # finds it right (the served spec equals its own) and only reads it.
  local want pods_before
  want="$(jpath "${np}" '{.spec}')"
  pods_before="$(k get pods -o jsonpath='{range .items[*]}{.metadata.uid},{end}')"
  k patch "${np}" --type=json -p '[{"op":"replace","path":"/spec/ingress","value":[{}]}]' >/dev/null
  check "the policy made wide" "$(jpath "${np}" '{.spec.ingress}')" '[{}]'
  stop_operator
  start_operator
  wait_until "policy back to the operator's spec" bash -c "[[ \"\$(kubectl -n ${ns} get ${np} -o jsonpath='{.spec}')\" == '${want}' ]]"
  wait_until "NetworkPolicyUpdated event" bash -c "[[ -n \$(kubectl -n ${ns} get events.events.k8s.io --field-selector reason=NetworkPolicyUpdated -o name) ]]"
  check "no pod replaced" "$(k get pods -o jsonpath='{range .items[*]}{.metadata.uid},{end}')" "${pods_before}"
  stop_operator
  start_operator
  wait_until "the new process read the policy" bash -c "curl -s 127.0.0.1:${metrics_port}/metrics | grep -q '^kubetrain_api_requests_total{.*verb=\"get\".*} [1-9]'"
  check "a policy already right is not written again" \
    "$(k get events.events.k8s.io --field-selector reason=NetworkPolicyUpdated -o name | wc -l)/$(curl -s "127.0.0.1:${metrics_port}/metrics" | grep -c '^kubetrain_api_requests_total{.*verb="patch".*} [1-9]')" "1/0"
  k delete tj j --wait=false >/dev/null
  wait_until "policy collected with the job" bash -c "[[ -z \$(kubectl -n ${ns} get networkpolicies -o name) ]]"
  # --network-policy=false: no policy.
  stop_operator
  start_operator --network-policy=false
  job nopolicy "" 1 1 Never
  wait_until "2 pods of the next job" has_pods nopolicy 2
  check "no policy with --network-policy=false" "$(k get networkpolicies -o name)" ""
  stop_operator
  start_operator
}

case_metrics_and_health() {
  new_ns metrics
  job j "" 1 1 Never
  wait_cond j Running  # counted by whichever operator process runs now
  check "/readyz once caches synced" "$(curl -s "127.0.0.1:${health_port}/readyz")" "leader: ok"
  check "/healthz" "$(curl -s "127.0.0.1:${health_port}/healthz")" ok
  local m; m="$(curl -s "127.0.0.1:${metrics_port}/metrics")"
  check "jobs created counted" "$(grep -c '^kubetrain_jobs_created_total [1-9]' <<<"${m}")" 1
  check "reconcile histogram exported" "$(grep -c '^kubetrain_reconcile_duration_seconds_count [1-9]' <<<"${m}")" 1
  check "API writes by verb and code" "$(grep -c '^kubetrain_api_requests_total{verb="create",code="OK"} [1-9]' <<<"${m}")" 1
}

kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
kubectl apply -k "${root}/deploy/kustomize/base" >/dev/null || { echo "kustomize base rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
start_operator
cases=(case_env_contract case_per_replica_services case_success_cleans_ps case_evaluator_keeps_the_job_running
  case_exit_code_restart case_never_fails_the_job
  case_backoff_limit case_deadline case_ttl case_suspend_resume case_finished_job_gets_no_new_pods
  case_clean_pod_policy_all case_restart_policy_override_event case_invalid_spec
  case_operator_restart_mid_creation case_utf8_termination_messages case_crash_loop_backoff
  case_deleted_secret_fails_the_job case_network_policy case_metrics_and_health)
[[ $# -gt 1 ]] && cases=("${@:2}")
run_cases "${cases[@]}"

#!/usr/bin/env bash
# `kubetrain get|wait|logs|suspend|resume` against the real control plane (the
# ctest `cluster` fixture) with kwok pods and this script's own operator.
# kwok pods run no process and their node serves no logs, so `logs` is checked
# on its fallback: the tails a trainer saves under <output>/logs/ (written here
# as the trainer writes them). The real-node logs test is tests/node.
# Usage: cluster_test.sh OPERATOR_BINARY (KUBETRAIN=the kubetrain binary).
# Starts and stops its operator by PID. No sleeps: every wait polls with a deadline.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: cluster_test.sh OPERATOR_BINARY}"
: "${KUBETRAIN:?set KUBETRAIN to the kubetrain binary}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
work="$(mktemp -d)"
op_pid=""
NS_PREFIX=clicl
T=60
WAIT_SECONDS=${T}

"${operator}" --kubeconfig "${KUBECONFIG}" --metrics-addr 127.0.0.1:0 --health-addr 127.0.0.1:0 \
  --workers 4 >>"${work}/operator.log" 2>&1 &
op_pid=$!
cleanup() {
  [[ -n "${op_pid}" ]] && { kill "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; }
  delete_namespaces
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

# kt_rc WANT DESCRIPTION ARGS...
kt_rc() {
  local want=$1 what=$2
  shift 2
  "${KUBETRAIN}" "$@" -n "${ns}" >"${work}/out" 2>"${work}/err"
  rc=$?
  check "${what}: exit code" "${rc}" "${want}" || { cat "${work}/out" "${work}/err" >&2; }
}
has() { grep -Eq -- "$2" "${work}/$1" || fail "$1 lacks /$2/: $(head -c 600 "${work}/$1")"; }

# job NAME OUTPUT [WORKER-ANNOTATIONS]: 1 PS + 1 worker on kwok nodes, trainer --output OUTPUT.
job() {
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicaSpecs:
    PS:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer, args: ["--output=$2"]}]
    Worker:
      replicas: 1
      restartPolicy: ExitCode
      template:
        metadata:
          annotations: {${3:-}}
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer, args: [--model=mlp, --output, "$2"]}]
JOB
}
state() { jpath "tj/$1" '{.status.state}'; }
is_state() { [[ "$(kubectl -n "${ns}" get tj "$1" -o jsonpath='{.status.state}')" == "$2" ]]; }

case_get_wait_suspend_resume_logs() {
  new_ns life
  job cj "${work}/out-cj"
  # A suspended sweep (it starts no trial) so `get` has both kinds.
  cat <<SWEEP | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: sw}
spec:
  suspend: true
  maxTrials: 2
  objective: {metric: eval.auc, direction: maximize}
  parameters: [{name: lr, type: categorical, values: ["0.1", "0.01"]}]
  trialTemplate:
    replicaSpecs:
      Worker:
        replicas: 1
        template: {spec: {containers: [{name: trainer, image: kubetrain-trainer, args: ["--lr=\${params.lr}"]}]}}
SWEEP
  wait_until "cj Running" is_state cj Running
  wait_until "sw has a state" bash -c "[[ -n \$(kubectl -n ${ns} get tsw sw -o jsonpath='{.status.state}') ]]"

  # get: the same table as kubectl's server-side printing, AGE aside.
  kt_rc 0 "get" get
  awk '{$NF=""; print}' "${work}/out" >"${work}/ours"
  kubectl -n "${ns}" get kubetrain | awk '{$NF=""; print}' >"${work}/theirs"
  check "kubetrain get prints what kubectl get kubetrain prints (AGE aside)" \
    "$(diff "${work}/theirs" "${work}/ours" && echo same)" same
  has out '^trainingjob.kubetrain.io/cj +Running'
  kt_rc 0 "get cj" get cj
  awk '{$NF=""; print}' "${work}/out" >"${work}/ours"
  kubectl -n "${ns}" get tj cj | awk '{$NF=""; print}' >"${work}/theirs"
  check "kubetrain get cj is kubectl get tj cj (AGE aside)" "$(diff "${work}/theirs" "${work}/ours" && echo same)" same
  # The figure: a `kubetrain get` (both kinds) next to `kubectl get kubetrain`, median of 5, ms.
  local t0 i ours=() theirs=()
  for i in 1 2 3 4 5; do
    t0=$(date +%s%N)
    "${KUBETRAIN}" get -n "${ns}" >/dev/null 2>&1
    ours+=($((($(date +%s%N) - t0) / 1000000)))
    t0=$(date +%s%N)
    kubectl -n "${ns}" get kubetrain >/dev/null 2>&1
    theirs+=($((($(date +%s%N) - t0) / 1000000)))
  done
  echo "figure: kubetrain get median $(printf '%s\n' "${ours[@]}" | sort -n | sed -n 3p) ms, kubectl get kubetrain median $(printf '%s\n' "${theirs[@]}" | sort -n | sed -n 3p) ms (5 runs each)"
  kt_rc 0 "get -o name" get -o name
  check "get -o name" "$(cat "${work}/out")" $'trainingjob.kubetrain.io/cj\ntrainingsweep.kubetrain.io/sw'
  kt_rc 4 "get of a job that does not exist" get nope
  has err 'no TrainingJob or TrainingSweep "nope"'

  # wait: a bounded wait on a running job times out (5), promptly.
  local start=${SECONDS}
  kt_rc 5 "wait --timeout 2s on a running job" wait cj --timeout 2s
  has err 'timed out after 2s waiting for trainingjob.kubetrain.io/cj to finish; it is Running'
  ((SECONDS - start <= 10)) || fail "wait --timeout 2s took $((SECONDS - start)) s"
  kt_rc 4 "wait for a job that does not exist" wait nope --timeout 5s

  # suspend / resume: the CRD's field, the operator acts on it.
  kt_rc 0 "suspend" suspend cj
  has out '^trainingjob.kubetrain.io/cj suspended$'
  check "spec.runPolicy.suspend set" "$(jpath tj/cj '{.spec.runPolicy.suspend}')" true
  wait_until "cj Suspended" is_state cj Suspended
  wait_until "cj's pods removed" bash -c "[[ -z \$(kubectl -n ${ns} get pods -l kubetrain.io/job-name=cj -o name) ]]"
  kt_rc 0 "suspend again" suspend cj
  has out 'already suspended'
  kt_rc 0 "resume" resume cj
  has out '^trainingjob.kubetrain.io/cj resumed$'
  check "spec.runPolicy.suspend cleared" "$(jpath tj/cj '{.spec.runPolicy.suspend}')" false
  wait_until "cj Running again" is_state cj Running
  kt_rc 0 "resume the sweep" resume sw
  has out '^trainingsweep.kubetrain.io/sw resumed$'
  check "the sweep's spec.suspend cleared" "$(jpath tsw/sw '{.spec.suspend}')" false
  kt_rc 0 "suspend the sweep again" suspend sw

  # wait, started before the job ends, returns 0 when it Succeeds.
  "${KUBETRAIN}" wait cj --timeout 60s -n "${ns}" >"${work}/wait.out" 2>"${work}/wait.err" &
  local wait_pid=$!
  wait_until "worker-0 running" bash -c "[[ \$(kubectl -n ${ns} get pod cj-worker-0 -o jsonpath='{.status.phase}') == Running ]]"
  t0=$(date +%s%N)
  k annotate pod cj-worker-0 kubetrain.io/test-exit-code=0 >/dev/null
  wait "${wait_pid}"
  check "wait on a job that then Succeeded: exit code" "$?" 0
  echo "figure: kubetrain wait returned $((($(date +%s%N) - t0) / 1000000)) ms after the worker's exit was set (kwok, operator and watch included)"
  check "wait says so, with the reason" "$(cat "${work}/wait.out")" \
    "trainingjob.kubetrain.io/cj Succeeded ($(jpath tj/cj '{.status.conditions[?(@.type=="Succeeded")].reason}'))"
  kt_rc 0 "wait on a Succeeded job" wait cj

  # logs: the PS pod is gone (cleanPodPolicy Running) and kwok serves no logs
  # for the worker's finished pod: both come from the saved tails.
  wait_until "cj-ps-0 removed" bash -c "! kubectl -n ${ns} get pod cj-ps-0 >/dev/null 2>&1"
  kt_rc 4 "logs before any tail was saved" logs cj --request-timeout 10s
  mkdir -p "${work}/out-cj/logs"
  printf 'ps says hi\n' >"${work}/out-cj/logs/ps-0.log"
  printf 'worker step 1\nworker done\n' >"${work}/out-cj/logs/worker-0.log"
  start=${SECONDS}
  kt_rc 0 "logs of a finished job" logs cj --request-timeout 10s
  check "every replica, prefixed, in role order" "$(cat "${work}/out")" \
    $'ps-0     | ps says hi\nworker-0 | worker step 1\nworker-0 | worker done'
  echo "  logs took $((SECONDS - start)) s"
  has err "^note: ps-0: its pod is gone; its saved log ${work}/out-cj/logs/ps-0.log follows"
  has err "^note: worker-0: the apiserver cannot read the log of pod cj-worker-0 .*; its saved log"
  # Once the job is deleted, --output still finds them.
  k delete tj cj --wait=false >/dev/null
  wait_until "cj deleted" bash -c "! kubectl -n ${ns} get tj cj >/dev/null 2>&1"
  kt_rc 4 "logs of a deleted job" logs cj
  kt_rc 0 "logs of a deleted job with --output" logs cj --output "${work}/out-cj"
  has out '^worker-0 \| worker done$'
}

case_wait_failed() {
  new_ns fail
  job fj "${work}/out-fj" '"kubetrain.io/test-exit-code": "2", "kubetrain.io/test-termination-message": "bad learning rate", "kubetrain.io/test-run-duration": "1s"'
  kt_rc 1 "wait on a job that Fails" wait fj --timeout 60s
  has err '^trainingjob.kubetrain.io/fj Failed: ReplicaFailed: .*bad learning rate'
  check "nothing on stdout" "$(cat "${work}/out")" ""
}

kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" -f "${root}/crds/trainingsweeps.kubetrain.io.yaml" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io || exit 1
run_cases case_get_wait_suspend_resume_logs case_wait_failed

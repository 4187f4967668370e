#!/usr/bin/env bash
# status.progress against the real control plane (the ctest `cluster` fixture)
# with kwok pods. kwok pods run no process: nothing at their IP serves trainer
# metrics (the connection fails, or something else answers), which is the
# "any other image" case. Checks that such jobs keep an empty status.progress
# with no error in their status, that a failing target backs off instead of
# being read at every interval, and that the operator's reads stay within its
# --progress-qps whatever the number of jobs.
# Usage: progress_test.sh OPERATOR_BINARY. Starts and stops its operator by PID.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: progress_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
work="$(mktemp -d)"
op_pid=""
NS_PREFIX=progress
T=90
WAIT_SECONDS=${T}

# The reader's settings for this test: 4 reads/s for the whole operator, each
# job at most once a second, a failing target after 2 s, 4 s, then every 4 s.
QPS=4
metrics_port="$(free_port)"
"${operator}" --kubeconfig "${KUBECONFIG}" --metrics-addr "127.0.0.1:${metrics_port}" \
  --health-addr 127.0.0.1:0 --workers 4 --qps 200 --burst 400 \
  --progress-qps "${QPS}" --progress-burst "${QPS}" --progress-interval 1 \
  --progress-backoff 2 --progress-backoff-max 4 >>"${work}/operator.log" 2>&1 &
op_pid=$!
cleanup() {
  [[ -n "${op_pid}" ]] && { kill "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; }
  delete_namespaces
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

# reads: the operator's reads of trainers' metrics so far, all results.
reads() {
  curl -s "http://127.0.0.1:${metrics_port}/metrics" |
    awk '/^kubetrain_progress_reads_total/ {n += $2} END {print n + 0}'
}
# jobs N PREFIX: N jobs of one worker each on kwok nodes.
jobs() {
  local i
  for ((i = 0; i < $1; i++)); do
    cat <<JOB
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $2-${i}}
spec:
  replicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
---
JOB
  done | k apply -f - >/dev/null
}
running_jobs() { k get tj -o jsonpath='{range .items[*]}{.status.state}{"\n"}{end}' | grep -c '^Running$'; }
# reads_over SECONDS: "READS ELAPSED": the reads counted while about SECONDS
# pass, and the seconds that actually passed (a measurement window, not a wait
# for an event; a loaded machine stretches it, so bounds use ELAPSED).
reads_over() {
  local before start
  before="$(reads)"
  start="$(date +%s.%N)"
  python3 -c "import time; time.sleep($1)"
  echo "$(($(reads) - before)) $(python3 -c "import time; print(int(time.time() - ${start} + 0.999))")"
}

case_no_metrics() {
  new_ns none
  jobs 1 other
  wait_until "the job Running" bash -c "[[ \$(kubectl -n ${ns} get tj other-0 -o jsonpath='{.status.state}') == Running ]]"
  check "the main container declares the metrics port" \
    "$(k get pod other-0-worker-0 -o jsonpath='{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}')" 9090
  wait_until "a first read of the worker's metrics" bash -c "(( \$(curl -s http://127.0.0.1:${metrics_port}/metrics | awk '/^kubetrain_progress_reads_total/ {n += \$2} END {print n + 0}') >= 1 ))"
  # One failing target, read every second without backoff, would be read
  # once per second; backing off (2 s, 4 s, 4 s, ...) at most once per 4 s.
  local n elapsed bound
  read -r n elapsed < <(reads_over 20)
  bound=$((elapsed / 4 + 2))
  if ((n > bound)); then fail "a job without metrics was read ${n} times in ${elapsed} s (want at most ${bound})"; else echo "  ok: ${n} reads in ${elapsed} s (bound ${bound})"; fi
  check "status.progress stays empty" "$(k get tj other-0 -o jsonpath='{.status.progress}')" ""
  check "the job is Running with no error in its status" \
    "$(k get tj other-0 -o jsonpath='{.status.state} {.status.conditions[?(@.status=="True")].type}')" \
    "Running Created Reconciling Running"
  check "kubectl get tj: REASON from Ready, empty REFUSED, PROGRESS and ETA, 1 running, 0 restarts" \
    "$(k get tj other-0 --no-headers | awk '{print $1, $2, $3, $4, $5, NF}')" \
    "other-0 Running TrainingJobRunning 1 0 6"
  check "no warning events about metrics" \
    "$(k get events --field-selector type=Warning -o name | wc -l | tr -d ' ')" 0
}

case_bounded_rate() {
  new_ns many
  local count=40 n
  jobs "${count}" j
  WAIT_SECONDS=180 wait_until "${count} jobs Running" bash -c "(( \$(kubectl -n ${ns} get tj -o jsonpath='{range .items[*]}{.status.state}{\"\\n\"}{end}' | grep -c '^Running\$') == ${count} ))"
  # 40 failing jobs coming back every 4 s would be 10 reads/s; the operator
  # allows itself ${QPS}/s (plus a burst of ${QPS}).
  local elapsed bound
  read -r n elapsed < <(reads_over 15)
  bound=$((QPS * elapsed + QPS))
  if ((n > bound)); then fail "${n} reads in ${elapsed} s with ${count} jobs (want at most ${bound})"; else echo "  ok: ${n} reads in ${elapsed} s (bound ${bound})"; fi
  if ((n < elapsed)); then fail "only ${n} reads in ${elapsed} s: the reader is not reading"; fi
  check "no job has progress" "$(k get tj -o jsonpath='{.items[*].status.progress}')" ""
}

kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io || exit 1
run_cases case_no_metrics case_bounded_rate

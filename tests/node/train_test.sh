#!/usr/bin/env bash
# Train for real: a Wide & Deep TrainingJob of 2 PS + 2 workers with the
# trainer image, in a namespace that enforces Pod Security `restricted`
# (non-root, read-only root filesystem, no capabilities), reaches Succeeded;
# the PS pods are gone after success; the AUC that worker 0 wrote to its
# termination message is in status.metrics and in `kubectl get tj`.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns train

args='args: [--model=wide_deep, "--layers=64,32", --data-dir=/tmp/data, --generate-data=50000, --steps=300, --batch-size=256, --threads=1]'
trainer_job wide-deep "${args}"
# The kubetrain CLI on a real node: `logs -f` follows every replica until its
# container ends, `wait` returns 0 on success.
if [[ -n "${KUBETRAIN:-}" ]]; then
  wait_until "the 4 pods to run" bash -c "[[ \$(kubectl -n ${ns} get pods -l kubetrain.io/job-name=wide-deep --field-selector=status.phase=Running -o name | wc -l) == 4 ]]"
  "${KUBETRAIN}" logs wide-deep -f -n "${ns}" >"${TMPDIR:-/tmp}/kt-logs-$$.out" 2>&1 &
  logs_pid=$!
  "${KUBETRAIN}" wait wide-deep --timeout 600s -n "${ns}"
  check "kubetrain wait: exit code" "$?" 0
  wait "${logs_pid}"
  check "kubetrain logs -f ends with the job: exit code" "$?" 0
  for r in ps-0 worker-0 worker-1; do
    check "kubetrain logs -f shows ${r}" "$(grep -c "^${r} *| " "${TMPDIR:-/tmp}/kt-logs-$$.out" | awk '{print ($1 > 0)}')" 1
  done
  rm -f "${TMPDIR:-/tmp}/kt-logs-$$.out"
  "${KUBETRAIN}" logs wide-deep --tail 1 -n "${ns}" >/dev/null
  check "kubetrain logs of the finished job: exit code" "$?" 0
fi
WAIT_SECONDS=600 wait_state wide-deep Succeeded
check "the job succeeded" "$(job_state wide-deep)" Succeeded
# cleanPodPolicy Running: a PS still running at success is deleted; one that
# already exited 0 (the coordinator stops the PS) stays, Completed, with its logs.
ps_running() {
  kubectl -n "${ns}" get pods -l kubetrain.io/replica-type=ps \
    -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -vc Succeeded
}
no_ps_running() { [[ "$(ps_running)" == 0 ]]; }
wait_until "no PS pod to be running" no_ps_running
check "no PS pod keeps running after success" "$(ps_running)" 0
auc="$(k get tj wide-deep -o jsonpath='{.status.metrics.eval.auc}')"
check "status.metrics has an AUC above 0.6 (got '${auc}')" \
  "$(python3 -c "import sys; print(float(sys.argv[1]) > 0.6)" "${auc:-0}" 2>/dev/null)" True
column="$(k get tj wide-deep --no-headers -o custom-columns=X:.metadata.name | sed -n 1p)"
check "kubectl get tj lists the job" "${column}" wide-deep
# The cell under the AUC header (columns such as ETA are empty once a job has finished,
# so count characters, not whitespace-separated fields).
auc_cell() { k get tj wide-deep | awk 'NR==1{c=index($0," AUC ")+1} NR==2{print substr($0,c)}' | awk '{print $1}'; }
check "kubectl get tj shows the AUC" "$(auc_cell)" "${auc}"
check "worker-0's termination message is the trainer's metrics" \
  "$(k get pod wide-deep-worker-0 -o jsonpath='{.status.containerStatuses[0].state.terminated.message}' | grep -c '"auc"')" 1
if ((failures)); then
  k get tj wide-deep -o yaml | tail -40; k get pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 15 2>&1; done
fi
((failures == 0)) && echo "train test passed (AUC ${auc})"
((failures == 0))

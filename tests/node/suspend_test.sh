#!/usr/bin/env bash
# Suspend and resume a running job: a 2 PS + 4 worker job spread
# over both real nodes, checkpointing to storage both see. Past its first
# checkpoints, spec.runPolicy.suspend=true: the operator deletes the pods (SIGTERM,
# 30 s grace) and the trainer saves. Once every pod is gone, suspend=false: the
# new pods resume from the step the job had reached (no steps lost, +/- 1) and the
# job succeeds. The step reached is worker-0's (the coordinator's, which names
# checkpoints), read live from its metrics until the pods are gone.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
two_node_test suspend
steps="${KUBETRAIN_SUSPEND_STEPS:-4000}"
suspend() { k patch tj pausing --type merge -p "{\"spec\":{\"runPolicy\":{\"suspend\":$1}}}" >/dev/null; }

spread_job pausing "${steps}"
WAIT_SECONDS=300 wait_state pausing Running
WAIT_SECONDS=600 wait_until "worker-0 to train past step 300" step_at_least pausing 300
WAIT_SECONDS=120 wait_until "a step between periodic checkpoints" step_mid_interval pausing
at="$(job_step pausing)"
suspend true || fail "suspending failed"
echo "$(stamp) suspended at step ${at}"
# The last step logged while the pods still exist.
deadline=$((SECONDS + T))
while (($(job_pods pausing | wc -l) > 0)) && ((SECONDS < deadline)); do
  s="$(job_step pausing)"
  [[ -n "${s}" ]] && ((s > at)) && at=${s}
  sleep 0.5
done
check "every pod is gone while suspended" "$(job_pods pausing | wc -l)" 0
echo "$(stamp) all pods gone; the job had reached step ${at}"
echo "  state while suspended: $(job_state pausing)"
suspend false || fail "resuming failed"
# Both PS shards log their restore on their own schedule: wait for each.
resumed() { [[ -n "$(resumed_step pausing-ps-0)" && -n "$(resumed_step pausing-ps-1)" ]]; }
WAIT_SECONDS=300 wait_until "both PS to restore a checkpoint" resumed
lost=0
for p in pausing-ps-0 pausing-ps-1; do
  r="$(resumed_step "${p}")"
  echo "  ${p} resumed from step ${r:-none}"
  ((${r:-0} < at - 1)) && ((at - ${r:-0} > lost)) && lost=$((at - ${r:-0}))
done
check "steps lost to suspend and resume: 0 (+/- 1)" "${lost}" 0
WAIT_SECONDS=900 wait_state pausing Succeeded
check "the job succeeds" "$(job_state pausing)" Succeeded
check "restarts: 0" "$(status_count pausing restarts)" 0
if ((failures)); then
  k get tj pausing -o yaml | sed -n '/^status:/,$p'; k get pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 8 2>&1; done
fi
echo "figure: steps lost per graceful disruption (suspend): ${lost} (test suspend)"
((failures == 0)) && echo "suspend test passed"
((failures == 0))

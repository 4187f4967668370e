#!/usr/bin/env bash
# `kubectl delete pod` of ps-0 with its grace period mid-training (issue 28 (c)):
# the trainer checkpoints at SIGTERM, so the replacement ps-0 resumes from the
# step the job was at when ps-0 was deleted. Worker-0's step (the coordinator's,
# which names checkpoints) is read live just before the delete ("before") and
# until the old ps-0 is gone ("reached"). The resumed step must lie between
# before - 1 and reached + 1. Workers may step past the save while the old ps-0
# waits for the MANIFEST: it applies nothing after its save and closes their
# pushes unanswered, so they re-send them to the new ps-0 (rpc/ps_server.h; the unit
# test PsServerTest.PushAfterTheSigtermSaveIsAppliedByTheReplacementNotLost):
# nothing is lost. (Before that fix the old ps-0 applied those pushes and lost them:
# this test saw the new ps-0 resume at 379 with worker-0 at 381.) A periodic
# checkpoint (every 200 steps) alone does not do: the job restarts from an older
# step (and a PS that ignores SIGTERM trains on for its whole grace period).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
two_node_test delps
steps="${KUBETRAIN_DELETE_PS_STEPS:-4000}"

spread_job delps "${steps}"
WAIT_SECONDS=300 wait_state delps Running
WAIT_SECONDS=600 wait_until "worker-0 to train past step 300" step_at_least delps 300
# Away from the periodic checkpoints (every 200): mid-interval.
WAIT_SECONDS=120 wait_until "a step between periodic checkpoints" step_mid_interval delps
old_uid="$(k get pod delps-ps-0 -o jsonpath='{.metadata.uid}')"
before="$(job_step delps)"
k delete pod delps-ps-0 --wait=false >/dev/null || fail "kubectl delete pod failed"
echo "$(stamp) deleted ps-0 (grace 30 s) at step ${before}"
old_gone() { [[ "$(k get pod delps-ps-0 -o jsonpath='{.metadata.uid}' 2>/dev/null)" != "${old_uid}" ]]; }
# The last step worker-0 reached while the old ps-0 was still there.
after="${before}"
deadline=$((SECONDS + T))
until old_gone || ((SECONDS > deadline)); do
  s="$(job_step delps)"
  [[ -n "${s}" ]] && ((s > after)) && after=${s}
  sleep 0.5
done
echo "$(stamp) the old ps-0 is gone; worker-0 reached step ${after}"
replaced() { [[ -n "$(resumed_step delps-ps-0)" ]]; }
WAIT_SECONDS=300 wait_until "the new ps-0 to restore a checkpoint" replaced
r="$(resumed_step delps-ps-0)"
echo "  the new ps-0 resumed from step ${r:-none}"
check "the new ps-0 resumed from the step at deletion (${before}, reached ${after}; +/- 1): ${r:-none}" \
  "$([[ -n "${r}" ]] && ((r >= before - 1 && r <= after + 1)) && echo yes)" yes
WAIT_SECONDS=900 wait_state delps Succeeded
check "the job succeeds" "$(job_state delps)" Succeeded
check "restarts: 0 (a deleted pod is a disruption)" "$(status_count delps restarts)" 0
echo "  status.disruptions: $(status_count delps disruptions)"
if ((failures)); then
  k get tj delps -o yaml | sed -n '/^status:/,$p'; k get pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 8 2>&1; done
fi
echo "figure: steps between the checkpoint at SIGTERM and the furthest step worker-0 reached (re-sent to the new ps-0, not lost): $(
  [[ -n "${r}" ]] && echo "$((after - r > 0 ? after - r : 0))" || echo "no checkpoint; all ${after} lost") (test delete_ps)"
((failures == 0)) && echo "delete ps test passed"
((failures == 0))

#!/usr/bin/env bash
# `kubectl drain` of a node mid-training (issue 28 (b)): a 2 PS + 4 worker job
# spread over both real nodes, checkpointing to storage both see. Past its first
# checkpoints, tests/cluster/node-drain drains node 2: each of its pods is evicted
# (SIGTERM, 30 s grace). The trainer saves at SIGTERM, so the job loses no steps:
# it succeeds with `restarts` 0 (an eviction is a disruption), and every evicted
# PS's replacement resumes from the step worker-0 (the coordinator, whose step
# names the checkpoints) had reached when the evicted replicas stopped. Node 2 is
# uncordoned at the end.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
two_node_test drain
steps="${KUBETRAIN_DRAIN_STEPS:-4000}"
n2="$(kt_node 2 && echo "${KT_NODE_NAME}")"
uncordon() { kubectl uncordon "${n2}" >/dev/null 2>&1; }
trap 'uncordon; node_cleanup' EXIT

spread_job drained "${steps}"
on_both() { [[ "$(job_pods drained | awk -v n="${n2}" '$2 == n && $4 == "Running"' | wc -l)" == 3 ]]; }
WAIT_SECONDS=300 wait_until "drained's pods spread over both nodes" on_both
WAIT_SECONDS=600 wait_until "worker-0 to train past step 300" step_at_least drained 300
evicted="$(job_pods drained | awk -v n="${n2}" '$2 == n {print $1}')"
at_drain="$(job_step drained)"
echo "$(stamp) draining node 2 at step ${at_drain}; its replicas: $(tr '\n' ' ' <<<"${evicted}")"
started=${SECONDS}
"${root}/tests/cluster/node-drain" "${node_cluster}" 2 >"${work}/drain.log" 2>&1 &
drain_pid=$!
# The step the job reached before the evicted replicas stopped (worker-0's, while it answers).
# Only the evicted worker-0's own steps count: once its pod is replaced, the new one's
# steps after the restore would read as steps lost.
reached=${at_drain}
w0_uid="$(k get pod drained-worker-0 -o jsonpath='{.metadata.uid}')"
while kill -0 "${drain_pid}" 2>/dev/null; do
  [[ "$(k get pod drained-worker-0 -o jsonpath='{.metadata.uid}' 2>/dev/null)" == "${w0_uid}" ]] || break
  s="$(job_step drained)"
  [[ -n "${s}" ]] && ((s > reached)) && reached=${s}
  sleep 0.5
done
wait "${drain_pid}" || fail "node-drain failed: $(cat "${work}/drain.log")"
echo "$(stamp) node 2 drained in $((SECONDS - started)) s; worker-0 reached step ${reached}"
# Read each evicted PS replacement's restore while it runs (its pod and log go once
# the job finishes and its running pods are cleaned up).
evicted_ps() { grep -- '-ps-' <<<"${evicted}" || true; }
all_restored() {
  local p
  for p in $(evicted_ps); do [[ -n "$(resumed_step "${p}")" ]] || return 1; done
}
WAIT_SECONDS=300 wait_until "the evicted PS shards to restore a checkpoint" all_restored
declare -A restored_at
for p in $(evicted_ps); do restored_at[${p}]="$(resumed_step "${p}")"; done
check "no pod of the job is left on node 2" "$(job_pods drained | awk -v n="${n2}" '$2 == n' | wc -l)" 0
WAIT_SECONDS=900 wait_state drained Succeeded
check "the job succeeds" "$(job_state drained)" Succeeded
check "restarts: 0 (an eviction is a disruption, not a failure)" "$(status_count drained restarts)" 0
echo "  status.disruptions: $(status_count drained disruptions)"
# Steps lost: the step the drain began at against what the evicted PS shard's
# replacement restored (an older checkpoint loses the updates since; none loses
# them all); one step of slack for the step in flight. Steps the workers took past
# the save (up to "reached") are not lost: the saved PS applies nothing after its
# save and the workers re-send those pushes to its replacement (rpc/ps_server.h).
lost=0
for p in ${evicted}; do
  r="${restored_at[${p}]:-$(resumed_step "${p}")}"
  echo "  ${p} resumed from step ${r:-none} (drain began at ${at_drain}, the job reached ${reached})"
  [[ "${p}" == *-ps-* ]] && ((${r:-0} < at_drain - 1)) && ((at_drain - ${r:-0} > lost)) && lost=$((at_drain - ${r:-0}))
done
check "steps lost to the drain: 0" "${lost}" 0
if ((failures)); then
  k get tj drained -o yaml | sed -n '/^status:/,$p'; k get pods -o wide
  kubectl get events -n "${ns}" --sort-by=.lastTimestamp | tail -n 25
fi
echo "figure: steps lost per graceful disruption (drain): ${lost} (test drain)"
((failures == 0)) && echo "drain test passed"
((failures == 0))

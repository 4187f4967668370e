#!/usr/bin/env bash
# `kubectl drain` of a node mid-training (issue 28 (b)): a 2 PS + 4 worker job
# spread over both real nodes, checkpointing to storage both see. Past its first
# checkpoints, tests/cluster/node-drain drains node 2: each of its pods is evicted
# (SIGTERM, 30 s grace). The trainer saves at SIGTERM, so the job loses no steps:
# it succeeds with `restarts` 0 (an eviction is a disruption), and every evicted
# replica's replacement resumes from a step no earlier than the step the job had
# reached when the drain began. Node 2 is uncordoned at the end.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
((real_nodes == 2)) || { fail "the cluster has ${real_nodes} real node(s), this test needs 2"; exit 1; }
ensure_operator || exit 1
shared_ns drain
steps="${KUBETRAIN_DRAIN_STEPS:-1500}"
n2="$(kt_node 2 && echo "${KT_NODE_NAME}")"
uncordon() { kubectl uncordon "${n2}" >/dev/null 2>&1; }
trap 'uncordon; node_cleanup' EXIT
max_step() { for w in 0 1 2 3; do logged_step "drained-worker-${w}"; done | sort -n | tail -n1; }

spread_job drained "${steps}"
on_both() { [[ "$(job_pods drained | awk -v n="${n2}" '$2 == n && $4 == "Running"' | wc -l)" == 3 ]]; }
WAIT_SECONDS=300 wait_until "drained's pods spread over both nodes" on_both
past() { local s; s="$(logged_step drained-worker-0)"; [[ -n "${s}" ]] && ((s >= 120)); }
WAIT_SECONDS=600 wait_until "worker-0 to train past step 120" past
evicted="$(job_pods drained | awk -v n="${n2}" '$2 == n {print $1}')"
at_drain="$(max_step)"
echo "$(stamp) draining node 2 at step ${at_drain}; its replicas: $(tr '\n' ' ' <<<"${evicted}")"
started=${SECONDS}
out="$("${root}/tests/cluster/node-drain" "${node_cluster}" 2 2>&1)" || fail "node-drain failed: ${out}"
echo "$(stamp) node 2 drained in $((SECONDS - started)) s"
check "no pod of the job is left on node 2" "$(job_pods drained | awk -v n="${n2}" '$2 == n' | wc -l)" 0
WAIT_SECONDS=900 wait_state drained Succeeded
check "the job succeeds" "$(job_state drained)" Succeeded
check "restarts: 0 (an eviction is a disruption, not a failure)" "$(status_count drained restarts)" 0
echo "  status.disruptions: $(status_count drained disruptions)"
# Steps lost: what the evicted PS shard's replacement restored against the step
# the job had reached (a shard restored from an older checkpoint has lost the
# updates since; one that restored nothing has lost them all).
lost=0
for p in ${evicted}; do
  r="$(resumed_step "${p}")"
  echo "  ${p} resumed from step ${r:-none} (drain began at ${at_drain})"
  [[ "${p}" == *-ps-* ]] && ((${r:-0} < at_drain)) && lost=$((lost + at_drain - ${r:-0}))
done
check "steps lost to the drain: 0" "${lost}" 0
if ((failures)); then
  k get tj drained -o yaml | sed -n '/^status:/,$p'; k get pods -o wide
  kubectl get events -n "${ns}" --sort-by=.lastTimestamp | tail -n 25
fi
echo "figure: steps lost per graceful disruption (drain): ${lost} (test drain)"
((failures == 0)) && echo "drain test passed"
((failures == 0))

#!/usr/bin/env bash
# `kubectl delete pod` of ps-0 with its grace period mid-training (issue 28 (c)):
# the trainer checkpoints at SIGTERM, so the replacement ps-0 resumes from the
# step the job was at when it was deleted (+/- 1). That step is bracketed: the
# workers' last logged step just before the delete, and their last step once the
# old ps-0 has exited (the workers cannot step without it); the resumed step must
# lie in [before - 1, after + 1]. A periodic checkpoint (every 50 steps) alone
# does not: the job restarts from an older step.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
((real_nodes == 2)) || { fail "the cluster has ${real_nodes} real node(s), this test needs 2"; exit 1; }
ensure_operator || exit 1
shared_ns delps
steps="${KUBETRAIN_DELETE_PS_STEPS:-1500}"
max_step() { for w in 0 1 2 3; do logged_step "delps-worker-${w}"; done | sort -n | tail -n1; }

spread_job delps "${steps}"
WAIT_SECONDS=300 wait_state delps Running
past() { local s; s="$(logged_step delps-worker-0)"; [[ -n "${s}" ]] && ((s >= 120)); }
WAIT_SECONDS=600 wait_until "worker-0 to train past step 120" past
# Not a multiple of 50 (the periodic checkpoints): wait until it is mid-interval.
mid() { local s; s="$(logged_step delps-worker-0)"; ((s % 50 >= 15 && s % 50 <= 35)); }
WAIT_SECONDS=120 wait_until "a step between periodic checkpoints" mid
old_uid="$(k get pod delps-ps-0 -o jsonpath='{.metadata.uid}')"
before="$(max_step)"
k delete pod delps-ps-0 --wait=false >/dev/null || fail "kubectl delete pod failed"
echo "$(stamp) deleted ps-0 (grace 30 s) at step ${before}"
old_gone() { [[ "$(k get pod delps-ps-0 -o jsonpath='{.metadata.uid}' 2>/dev/null)" != "${old_uid}" ]]; }
# The last step the workers logged while the old ps-0 was still there.
after="${before}"
until old_gone; do
  s="$(max_step)"
  [[ -n "${s}" ]] && ((s > after)) && after=${s}
  sleep 0.5
done
echo "$(stamp) the old ps-0 is gone; the workers reached step ${after}"
replaced() { [[ -n "$(resumed_step delps-ps-0)" ]]; }
WAIT_SECONDS=300 wait_until "the new ps-0 to restore a checkpoint" replaced
r="$(resumed_step delps-ps-0)"
echo "  the new ps-0 resumed from step ${r:-none}"
check "the new ps-0 resumed from the step at deletion (${before}..${after}, +/- 1): ${r:-none}" \
  "$([[ -n "${r}" ]] && ((r >= before - 1 && r <= after + 1)) && echo yes)" yes
WAIT_SECONDS=900 wait_state delps Succeeded
check "the job succeeds" "$(job_state delps)" Succeeded
check "restarts: 0 (a deleted pod is a disruption)" "$(status_count delps restarts)" 0
echo "  status.disruptions: $(status_count delps disruptions)"
if ((failures)); then
  k get tj delps -o yaml | sed -n '/^status:/,$p'; k get pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 8 2>&1; done
fi
echo "figure: steps lost per graceful disruption (delete ps-0): $(
  [[ -n "${r}" ]] && echo "$((before - r > 0 ? before - r : 0))" || echo "all") (test delete_ps)"
((failures == 0)) && echo "delete ps test passed"
((failures == 0))

#!/usr/bin/env bash
# Failover: with the operator installed as its 2-replica Deployment, the leading
# pod is deleted while jobs are being created. The other replica takes the
# Lease within the lease settings (15 s duration), every job completes, and no
# pod is created twice (distinct UIDs per pod name, from a watch started first).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns failover
pod_watch_start

old="$(lease_holder)"
check "one operator replica leads" \
  "$(kubectl -n kubetrain-system get pods -o name | grep -c "/${old}$")" 1
jobs=6
for ((i = 0; i < jobs; i++)); do
  sh_job "fo-${i}" "PS=1 Worker=2" 'sleep 3'
  if ((i == 2)); then
    deleted_at=${SECONDS}
    kubectl -n kubetrain-system delete pod "${old}" --wait=false >/dev/null
  fi
done
new_leader() { local h; h="$(lease_holder)"; [[ -n "${h}" && "${h}" != "${old}" ]]; }
wait_until "another replica to take the Lease" new_leader
took=$((SECONDS - deleted_at))
echo "  new leader $(lease_holder) after ${took}s"
check "the Lease moved within its duration plus a retry (<= 30 s on a loaded machine)" "$((took <= 30))" 1
for ((i = 0; i < jobs; i++)); do
  wait_state "fo-${i}" Succeeded
done
done_jobs=0
for ((i = 0; i < jobs; i++)); do [[ "$(job_state "fo-${i}")" == Succeeded ]] && done_jobs=$((done_jobs + 1)); done
check "every job completed" "${done_jobs}" "${jobs}"
twice="$(pod_creates | awk '$2 > 1')"
check "no pod created twice" "${twice}" ""
check "the watch saw every pod (3 per job)" "$(pod_creates | wc -l)" "$((jobs * 3))"
((failures == 0)) && echo "failover test passed"
((failures == 0))

#!/usr/bin/env bash
# Live progress on the real node: the installed operator reads worker 0's
# metrics endpoint (its pod IP, the "metrics" port) while a 2 PS + 2 worker
# Wide & Deep job trains in a restricted namespace; status.progress appears,
# its step advances, and `kubectl get tj` shows PROGRESS and ETA.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns progress

# Long enough to be read several times (the test's operator reads a job every 2 s,
# tests/node/lib.sh; the default is 15 s); status.progress is written when the
# percent changes, so 1% is 1,000 steps (seconds on an idle machine, a minute on a
# loaded one, where 1,000,000 steps needed 10,000 for the first change);
# the job is deleted once the checks are done.
args='args: [--model=wide_deep, "--layers=64,32", --data-dir=/tmp/data, --generate-data=50000, --steps=100000, --batch-size=256, --threads=1]'
trainer_job live "${args}"
WAIT_SECONDS=300 wait_state live Running
step() { k get tj live -o jsonpath='{.status.progress.step}' 2>/dev/null; }
has_progress() { [[ -n "$(step)" ]]; }
WAIT_SECONDS=180 wait_until "status.progress" has_progress
first="$(step)"
echo "  first reading: step ${first}"
advanced() { [[ -n "$(step)" ]] && (($(step) > first)); }
WAIT_SECONDS=180 wait_until "status.progress.step to advance past ${first}" advanced
check "status.progress advances (step ${first} -> $(step))" "$(advanced && echo yes)" yes
check "the reading is worker-0's, out of --steps" \
  "$(k get tj live -o jsonpath='{.status.progress.replica} {.status.progress.totalSteps}')" "worker-0 100000"
has_eta() { [[ -n "$(k get tj live -o jsonpath='{.status.progress.eta}')" ]]; }
WAIT_SECONDS=120 wait_until "an ETA" has_eta
column() {  # column NAME: that column of `kubectl get tj live`, by its offset in the header
  # (an empty column, such as REFUSED, would shift whitespace-split fields)
  k get tj live | awk -v n="$1" 'NR==1{c=index($0 " ", " " n " ") + 1} NR==2{v=substr($0, c); sub(/ .*/, "", v); print v}'
}
check "kubectl get tj: PROGRESS is the percent" "$(column PROGRESS)" \
  "$(k get tj live -o jsonpath='{.status.progress.percent}')"
check "kubectl get tj: ETA is status.progress.eta" "$(column ETA)" \
  "$(k get tj live -o jsonpath='{.status.progress.eta}')"
check "kubectl get tj: RUNNING counts the 4 pods" "$(column RUNNING)" 4
check "kubectl get tj: RESTARTS" "$(column RESTARTS)" 0
k get tj live
if ((failures)); then
  k get tj live -o yaml | tail -40; k get pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 15 2>&1; done
fi
k delete tj live --wait=false >/dev/null
((failures == 0)) && echo "progress test passed"
((failures == 0))

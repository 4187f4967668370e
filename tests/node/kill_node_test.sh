#!/usr/bin/env bash
# A node dies mid-training: a 2 PS + 4 worker Wide & Deep job spread
# over both real nodes (one PS and two workers each), checkpointing to storage both
# nodes see. Once it has trained past a checkpoint, tests/cluster/node-kill kills
# node 2 (kubelet, containerd, shims and containers, its bridge down). The job must
# succeed on node 1 with nobody force-deleting anything: the node-lifecycle
# controller marks node 2 unreachable and (after the pods' 10 s toleration) its pods
# for deletion, which no kubelet ever confirms; the operator gets the lost replicas
# running on node 1 after its grace (--lost-pod-grace). The timeline (node
# unreachable, replacement created, Running, training resumed) is printed with
# timestamps, then the figures: node unreachable -> replacements Running, and the
# job's wall time against the same job undisturbed (run first).
# KUBETRAIN_KILL_FORCE_DELETE=S makes the test force-delete the stuck pods itself
# after S s (what the operator must do; for trying the rest of the timeline).
# Runs last in the `node2` fixture: node 2 stays dead until `down`.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
two_node_test kill
steps="${KUBETRAIN_KILL_STEPS:-1500}"
n1="$(kt_node 1 && echo "${KT_NODE_NAME}")" n2="$(kt_node 2 && echo "${KT_NODE_NAME}")"
dump() {
  k get tj "$1" -o yaml | sed -n '/^status:/,$p'; k get pods -o wide
  kubectl get events -n "${ns}" --sort-by=.lastTimestamp | tail -n 25
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 8 2>&1; done
}
spread_ok() {  # spread_ok JOB: one PS and two workers Running on each node
  local pods
  pods="$(job_pods "$1")"
  [[ "$(awk -v n="${n1}" '$2 == n && $4 == "Running"' <<<"${pods}" | wc -l)" == 3 &&
    "$(awk -v n="${n2}" '$2 == n && $4 == "Running"' <<<"${pods}" | wc -l)" == 3 &&
    "$(awk -v n="${n2}" '$2 == n && $1 ~ /-ps-/' <<<"${pods}" | wc -l)" == 1 ]]
}

# --- undisturbed, for the wall time
started=${SECONDS}
spread_job calm "${steps}"
WAIT_SECONDS=300 wait_until "calm's pods spread over both nodes" spread_ok calm
WAIT_SECONDS=900 wait_state calm Succeeded
calm_wall=$((SECONDS - started))
check "the undisturbed job succeeds" "$(job_state calm)" Succeeded
echo "  undisturbed: ${calm_wall} s for ${steps} steps"
((failures)) && { dump calm; exit 1; }
k delete tj calm --wait=false >/dev/null

# --- node 2 killed after the first checkpoints
started=${SECONDS}
spread_job doomed "${steps}"
WAIT_SECONDS=300 wait_until "doomed's pods spread over both nodes" spread_ok doomed
check "one PS and two workers on each node" "$(spread_ok doomed && echo yes)" yes
WAIT_SECONDS=600 wait_until "worker-0 to train past step 450 (two checkpoints)" step_at_least doomed 450
lost="$(job_pods doomed | awk -v n="${n2}" '$2 == n {print $1, $3}')"
at_kill="$(job_step doomed)"
t0="$("${root}/tests/cluster/node-kill" "${node_cluster}" 2)" || fail "node-kill failed"
echo "$(stamp) +0 s  node 2 killed at step ${at_kill}; its replicas: $(awk '{print $1}' <<<"${lost}" | tr '\n' ' ')"

check "no process of node 2 is left" "$(pgrep -fc -- "${node_cluster}/node2/")" 0
kt_node 2
check "node 2's bridge is down" "$(ip -o link show "${KT_NODE_BRIDGE}" | grep -c '[<,]UP[,>]')" 0
kt_node 1
check "node 1 is still Ready" \
  "$(kubectl get node "${n1}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" True

# The timeline: poll once a second until the job ends (or T_KILL seconds).
since() { python3 -c "import time,sys; print('+%.0f s' % (time.time() - float(sys.argv[1])))" "${t0}"; }
declare -A seen=()
event() {  # event KEY MESSAGE: print MESSAGE with the time the first time KEY happens
  [[ -n "${seen[$1]:-}" ]] && return 0
  seen[$1]=${SECONDS}
  echo "$(stamp) $(since)  $2"
}
deadline=$((SECONDS + ${T_KILL:-480}))
t_unreachable="" t_running=""
while ((SECONDS < deadline)); do
  ready="$(kubectl get node "${n2}" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)"
  if [[ -n "${ready}" && "${ready}" != True ]]; then
    event unreachable "node 2 marked unreachable (Ready=${ready})"
    t_unreachable=${seen[unreachable]}
  fi
  pods="$(job_pods doomed)"
  all_running=1
  while read -r name uid; do
    [[ -n "${name}" ]] || continue
    read -r _ node new_uid phase < <(grep "^${name} " <<<"${pods}") || true
    del="$(k get pod "${name}" -o jsonpath='{.metadata.deletionTimestamp}' 2>/dev/null)"
    [[ -n "${del}" && "${new_uid:-}" == "${uid}" ]] && event "del-${name}" "${name} marked for deletion (${del}), Terminating"
    if [[ -n "${new_uid:-}" && "${new_uid}" != "${uid}" ]]; then
      event "new-${name}" "${name} replacement created (on ${node:-unscheduled})"
      [[ "${phase}" == Running ]] && event "run-${name}" "${name} replacement Running on ${node}"
    fi
    [[ -n "${seen[run-${name}]:-}" ]] || all_running=0
  done <<<"${lost}"
  if ((all_running)); then
    event all-running "every lost replica Running again"
    t_running=${seen[all-running]}
    # Resumed: worker-0's step moves again after every replica is back.
    now="$(job_step doomed)"
    [[ -z "${first_after:-}" && -n "${now}" ]] && first_after=${now}
    [[ -n "${now}" ]] && ((now > first_after)) &&
      event resumed "training resumed: worker-0 at step ${now} (${at_kill} at the kill)"
  fi
  # KUBETRAIN_KILL_FORCE_DELETE=S: the test itself force-deletes the dead node's
  # pods S seconds after they were marked for deletion, as a human would (to see the
  # rest of the timeline where the operator does not do it; off by default).
  if [[ -n "${KUBETRAIN_KILL_FORCE_DELETE:-}" && -n "${seen[del-${lost%% *}]:-}" && -z "${seen[forced]:-}" ]] &&
    ((SECONDS - ${seen[del-${lost%% *}]} >= KUBETRAIN_KILL_FORCE_DELETE)); then
    event forced "the TEST force-deletes node 2's pods (KUBETRAIN_KILL_FORCE_DELETE=${KUBETRAIN_KILL_FORCE_DELETE})"
    k delete pods --field-selector "spec.nodeName=${n2}" --force --grace-period 0 >/dev/null 2>&1
  fi
  state="$(job_state doomed)"
  [[ "${state}" == Succeeded || "${state}" == Failed ]] && { event end "job ${state}"; break; }
  sleep 1
done
wall=$((SECONDS - started))
check "the job succeeds on the surviving node" "$(job_state doomed)" Succeeded
check "every lost replica was replaced" "$(for p in $(awk '{print $1}' <<<"${lost}"); do
  [[ -n "${seen[new-${p}]:-}" ]] || echo "${p}"; done)" ""
check "the replacements run on node 1" "$(job_pods doomed | awk -v n="${n2}" '$2 == n' | wc -l)" 0
# The 1 s poll can miss the live step when the rest of the job takes only seconds after
# the replacements run: the final metrics' step (status.metrics.steps; status.progress may
# predate the kill) past the kill's shows the training went on too.
final_step="$(k get tj doomed -o jsonpath='{.status.metrics.steps}')"
check "training resumed after the kill" \
  "$([[ -n "${seen[resumed]:-}" ]] || ((${final_step:-0} > ${at_kill:-0})) && echo yes)" yes
resumed="$(for p in $(awk '{print $1}' <<<"${lost}"); do resumed_step "${p}"; done | sort -n | head -n1)"
echo "  the replacements resumed from step ${resumed:-none} (the job was at ${at_kill} when node 2 died)"
check "a replacement resumed from a checkpoint" "$([[ -n "${resumed}" ]] && echo yes)" yes
# (Not checked: replicas on node 1 whose PS vanished may exit on --reconnect-timeout
# and count as restarts; the lost replicas themselves must count as disruptions.)
echo "  status.restarts: $(status_count doomed restarts)"
disruptions="$(status_count doomed disruptions)"
check "disruptions count the $(wc -l <<<"${lost}") lost replicas (status.disruptions: ${disruptions})" \
  "$([[ "${disruptions}" =~ ^[0-9]+$ ]] && ((disruptions >= $(wc -l <<<"${lost}"))) && echo yes)" yes
((failures)) && dump doomed
echo "figure: node 2 unreachable -> its replicas Running on node 1: $(
  [[ -n "${t_unreachable}" && -n "${t_running}" ]] && echo "$((t_running - t_unreachable)) s" || echo "never") (test kill_node)"
echo "figure: job wall time, ${steps} steps: undisturbed ${calm_wall} s, node 2 killed ${wall} s (test kill_node)"
((failures == 0)) && echo "kill node test passed"
((failures == 0))

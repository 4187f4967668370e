#!/usr/bin/env bash
# Early stopping on the real node: the learning-rate grid of
# tests/cli/jobs/sweep-early-stop.yaml (Adam on Wide & Deep; lr 0.01 and 0.003 train to a loss
# near 0.3, lr 1 and 10 diverge to 4-40) as a TrainingSweep of one-worker trials with the
# trainer image in a `restricted` namespace, parallelism 2, earlyStopping medianStop over 2
# trials. The installed operator reads each trial's loss from its metrics endpoint; the grid
# runs the two good trials first, so the diverging ones are judged against two succeeded
# curves. The sweep must succeed with the diverging trials EarlyStopped (the numbers that
# decided in their rows, stopped before their last step, their jobs deleted), the good ones
# Succeeded, the best one of them, and no trial failed.
#
# Sizing: the test's operator (tests/node/lib.sh) reads a job every 2 s, writes status.progress
# at most every 2 s and reads a trainer not yet serving again after 2 s (the defaults are 15, 30
# and 30 s: docs/api.md), so a diverging trial is judged some 4 to 10 s into its run; each trial
# must run longer than that or it would end Succeeded instead. SWEEP_STEPS (default 40000) sets
# it. (With the default intervals a trial had to outlast ~60 s: 160000 steps, the test 2-3 min.)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns sweep
steps=${SWEEP_STEPS:-40000}
good="0 1" diverging="2 3"
start=${SECONDS}

# pod_template's lines sit under a job's replica type; a trial template's sit 2 deeper.
args="args: [--model=wide_deep, \"--layers=16\", --embedding-dim=4, --optimizer=adam, \"--lr=\${params.lr}\","
args+=" --threads=1, --data-dir=/tmp/data, --generate-data=20000, --generate-eval=1000,"
args+=" --steps=${steps}, --batch-size=128, --log-every=10000]"
cat <<SWEEP | k apply -f - >/dev/null || fail "the sweep was not accepted"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: early}
spec:
  objective: {metric: eval.auc}
  algorithm: {name: grid}
  parallelism: 2
  earlyStopping: {algorithm: medianStop, minTrialsRequired: 2, startStep: 100}
  parameters:
    - {name: lr, type: categorical, values: ["0.01", "0.003", "1", "10"]}
  trialTemplate:
    runPolicy: {activeDeadlineSeconds: 900}
    replicaSpecs:
      Worker:
        replicas: 1
        restartPolicy: Never
$(pod_template "${KUBETRAIN_TRAINER_IMAGE}" "${args}" | sed 's/^/  /')
SWEEP

# Poll until the sweep has finished, noting each change of the trials' phases with the time
# since the sweep was created (the report's timeline).
last_phases=""
sweep_finished() {
  local phases state
  phases="$(jpath tsw/early '{range .status.trials[*]}{.name}={.phase} {end}')"
  if [[ -n "${phases}" && "${phases}" != "${last_phases}" ]]; then
    echo "  +$((SECONDS - start))s ${phases}"
    last_phases="${phases}"
  fi
  state="$(jpath tsw/early '{.status.state}')"
  [[ "${state}" == Succeeded || "${state}" == Failed ]]
}
# (wait_until silences its command's output: the timeline goes to a file.)
: >"${work}/timeline"
sweep_finished_logged() { sweep_finished >>"${work}/timeline"; }
WAIT_SECONDS=600 wait_until "the sweep to finish" sweep_finished_logged
cat "${work}/timeline"
echo "  sweep finished after $((SECONDS - start)) s"
check "the sweep succeeded" "$(jpath tsw/early '{.status.state}')" Succeeded
check "counts: trials finished, succeeded, early stopped, failed, stopped" \
  "$(jpath tsw/early '{.status.trialProgress} {.status.succeeded} {.status.earlyStopped} {.status.failed} {.status.stopped}')" \
  "4/4 2 2 0 0"

row() { jpath tsw/early "{.status.trials[$1].$2}"; }
for i in ${good}; do
  check "trial ${i} (lr $(row "${i}" parameters.lr)) succeeded" "$(row "${i}" phase)" Succeeded
done
for i in ${diverging}; do
  lr="$(row "${i}" parameters.lr)"
  check "trial ${i} (lr ${lr}) was early stopped" "$(row "${i}" phase) $(row "${i}" reason)" \
    "EarlyStopped EarlyStopped"
  e=".status.trials[${i}].earlyStopped"
  read -r s value median n <<<"$(jpath tsw/early "{${e}.step} {${e}.value} {${e}.median} {${e}.trials}")"
  echo "  trial ${i} (lr ${lr}): stopped at step ${s:-?}: best loss ${value:-?} > median ${median:-?} of ${n:-?}"
  [[ "${s:-}" =~ ^[0-9]+$ ]] && ((s >= 100 && s < steps)) ||
    fail "trial ${i}: stopped at step '${s:-}', want 100 <= step < ${steps} (its last)"
  check "trial ${i}: the median is of the 2 succeeded trials" "${n:-}" 2
  # The rule's own test (best loss above the median), with a margin: at least twice the
  # median. (No bound on the median itself: the good trials' loss on this data has been
  # 0.133 and 0.540 in different runs; nor "above 1": lr 1's best per-batch loss was once
  # 0.669 against a median of 0.133, stopped rightly.)
  python3 -c 'import sys; v, m = map(float, sys.argv[1:]); sys.exit(0 if v > 2 * m > 0 else 1)' \
    "${value:-nan}" "${median:-nan}" ||
    fail "trial ${i}: want a best loss above twice the (positive) median, got ${value:-} vs ${median:-}"
  gone() { ! k get tj "early-$1" >/dev/null 2>&1; }
  wait_until "trial ${i}'s TrainingJob to be deleted" gone "${i}"
done
best="$(jpath tsw/early '{.status.bestTrial.name}')"
top="$(k get tsw early -o json | jq -r '[.status.trials[] | select(.phase == "Succeeded")] | max_by(.value) | .name')"
check "the best trial is the succeeded trial with the highest AUC" "${best}" "${top}"
case "${best}" in
  early-0 | early-1) echo "  ok: the best is a good learning rate (${best}, lr $(jpath tsw/early '{.status.bestTrial.parameters.lr}'), AUC $(jpath tsw/early '{.status.bestTrial.value}'))" ;;
  *) fail "the best trial is '${best}', want early-0 or early-1 (lr 0.01 or 0.003)" ;;
esac
stopped_events() {
  k get events.events.k8s.io -o json |
    jq -e '[.items[] | select(.reason == "TrialEarlyStopped")] | length == 2'
}
wait_until "two TrialEarlyStopped events" stopped_events

echo "  trials:"
k get tsw early -o json | jq -r '.status.trials[] |
  "    \(.name) lr=\(.parameters.lr) \(.phase) \(.value // "")\(if .earlyStopped then " step \(.earlyStopped.step) loss \(.earlyStopped.value) > median \(.earlyStopped.median)" else "" end)"'
if ((failures)); then
  k get tsw early -o yaml | sed -n '/^status:/,$p'; k get tj,pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 15 2>&1; done
fi
((failures == 0)) && echo "sweep early stop test passed in $((SECONDS - start)) s"
((failures == 0))

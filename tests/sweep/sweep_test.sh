#!/usr/bin/env bash
# TrainingSweep against the real control plane (the ctest `cluster` fixture),
# with kwok ending each trial's pod through the test annotations. Usage:
# sweep_test.sh OPERATOR_BINARY [CASE...]. The operator runs as its
# ServiceAccount (deploy/kustomize RBAC) and is stopped by PID.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: sweep_test.sh OPERATOR_BINARY [CASE...]}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
work="$(mktemp -d)"
op_pid=""
watch_pids=()
NS_PREFIX=sweep
T=90
WAIT_SECONDS=${T}

cleanup() {
  for p in "${watch_pids[@]}"; do kill "${p}" 2>/dev/null; wait "${p}" 2>/dev/null; done
  if [[ -n "${op_pid}" ]]; then kill "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; fi
  delete_namespaces
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

wait_sweep() {  # wait_sweep NAME CONDITION
  k wait --for="condition=$2" "tsw/$1" --timeout="${T}s" >/dev/null || fail "$1 never reached $2"
}

# sweep NAME PARALLELISM GOAL-YAML WORKER-ANNOTATIONS [RUN-POLICY-YAML]: a 3 x 2 grid over x (the
# metric's digit) and key (auc, or loss: a trial without the metric). Each
# trial is one worker on a kwok node whose termination message carries
# {"eval": {"<key>": 0.<x>}}.
sweep() {
  cat <<SWEEP | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: $1}
spec:
  objective: {metric: eval.auc, direction: maximize$3}
  algorithm: {name: grid}
  parallelism: $2
  parameters:
    - {name: x, type: categorical, values: ["1", "5", "3"]}
    - {name: key, type: categorical, values: [auc, loss]}
  trialTemplate:
    runPolicy: {${5:-}}
    replicaSpecs:
      Worker:
        template:
          metadata:
            annotations: {$4}
          spec:
            nodeSelector: {type: kwok}
            tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
            containers: [{name: trainer, image: kubetrain-trainer, args: ["--x=\${params.x}"]}]
SWEEP
}
ENDS='"kubetrain.io/test-exit-code": "0", "kubetrain.io/test-termination-message": "{\"eval\": {\"${params.key}\": 0.${params.x}}}"'

# watch_trials SWEEP: records, from a watch, the most trials of SWEEP that
# existed unfinished at once, into ${work}/<sweep>.peak (updated as it grows),
# and how many it saw finish into ${work}/<sweep>.peak.finished.
# The python process owns its kubectl and stops it on SIGTERM.
watch_trials() {
  python3 - "${ns}" "$1" "${work}/$1.peak" <<'PY' &
import json, signal, subprocess, sys
ns, sweep, out = sys.argv[1:]
kubectl = subprocess.Popen(["kubectl", "-n", ns, "get", "tj", "-l", "kubetrain.io/sweep-name=" + sweep,
                            "-w", "--output-watch-events", "-o", "json"], stdout=subprocess.PIPE, text=True)
def stop(*_):
    kubectl.kill()
    kubectl.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
peak, live, buf, finished = 0, {}, "", set()
dec = json.JSONDecoder()
for line in kubectl.stdout:
    buf += line
    while True:
        s = buf.lstrip()
        try:
            ev, end = dec.raw_decode(s)
        except ValueError:
            break
        buf = s[end:]
        obj = ev["object"]
        name = obj["metadata"]["name"]
        conds = obj.get("status", {}).get("conditions", [])
        done = any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in conds)
        if done and name not in finished:
            finished.add(name)
            open(out + ".finished", "w").write(str(len(finished)))
        if ev["type"] == "DELETED" or done:
            live.pop(name, None)
        else:
            live[name] = True
        if len(live) > peak:
            peak = len(live)
            open(out, "w").write(str(peak))
PY
  watch_pids+=($!)
}

case_grid_picks_the_best_and_counts_missing_metrics() {
  new_ns grid
  watch_trials g
  sweep g 2 "" "${ENDS}"
  wait_sweep g Succeeded
  check "the best trial is x=5 with auc 0.5" \
    "$(jpath tsw/g '{.status.bestTrial.name} {.status.bestTrial.parameters.x} {.status.bestTrial.parameters.key} {.status.bestTrial.value}')" \
    "g-2 5 auc 0.5"
  check "counts: 3 succeeded, 3 failed" "$(jpath tsw/g '{.status.succeeded} {.status.failed} {.status.running}')" "3 3 0"
  check "a trial without the metric failed with a reason" \
    "$(jpath tsw/g '{.status.trials[1].phase} {.status.trials[1].reason}')" "Failed MetricMissing"
  check "and the message names the metric" \
    "$(jpath tsw/g '{.status.trials[1].message}')" "the trial succeeded but status.metrics has no eval.auc"
  check "reason AllTrialsFinished" "$(jpath tsw/g '{.status.conditions[?(@.type=="Succeeded")].reason}')" AllTrialsFinished
  check "printer columns" "$(k get tsw g --no-headers | awk '{print $1, $2, $3, $4}')" "g 0.5 6/6 Succeeded"
  check "trials are owned by the sweep" \
    "$(jpath tj/g-0 '{.metadata.ownerReferences[0].kind},{.metadata.ownerReferences[0].controller}')" "TrainingSweep,true"
  check "trials carry their parameters" "$(jpath tj/g-3 '{.metadata.annotations.kubetrain\.io/parameters}')" \
    '{"key":"loss","x":"5"}'
  check "parameters substituted into the template" \
    "$(jpath tj/g-3 '{.spec.replicaSpecs.Worker.template.spec.containers[0].args[0]}')" "--x=5"
  wait_until "the watch saw all 6 trials finish" bash -c "[[ \$(cat '${work}/g.peak.finished' 2>/dev/null) == 6 ]]"
  local peak; peak="$(cat "${work}/g.peak")"
  check "never more than 2 trials at once (watch saw ${peak})" "$((peak <= 2 && peak >= 1))" 1
  wait_until "TrialCreated and TrialFailed events" bash -c \
    "[[ \$(kubectl -n ${ns} get events.events.k8s.io -o json | jq '[.items[] | select(.reason == \"TrialCreated\" or .reason == \"TrialFailed\" or .reason == \"TrialSucceeded\")] | length') -ge 12 ]]"
}

# A trial TTL of 0: every trial's result reaches status.trials before the
# trial is deleted (before, the job controller could delete a finished trial
# first, and its row read Failed TrialDeleted).
case_trial_ttl_keeps_every_result() {
  new_ns ttl
  sweep t 3 "" "${ENDS}" "ttlSecondsAfterFinished: 0"
  wait_sweep t Succeeded
  check "counts: 3 succeeded, 3 failed (no metric), none lost" \
    "$(jpath tsw/t '{.status.succeeded} {.status.failed} {.status.running}')" "3 3 0"
  check "failed rows are MetricMissing, not TrialDeleted" \
    "$(jpath tsw/t '{.status.trials[*].reason}' | tr ' ' '\n' | grep -v '^$' | sort -u | tr '\n' ' ')" "MetricMissing "
  check "the best trial" "$(jpath tsw/t '{.status.bestTrial.name} {.status.bestTrial.value}')" "t-2 0.5"
  check "trials are created without the TTL" \
    "$(k get tj -l kubetrain.io/sweep-name=t -o jsonpath='{.items[*].spec.runPolicy.ttlSecondsAfterFinished}')" ""
  wait_until "the sweep deleted every finished trial" \
    bash -c "[[ -z \$(kubectl -n ${ns} get tj -l kubetrain.io/sweep-name=t -o name) ]]"
}

case_goal_stops_early() {
  new_ns goal
  # Grid order: x=1 auc, x=1 loss, x=5 auc (0.5 >= goal 0.4), ... one at a time.
  sweep s 1 ", goal: 0.4" "${ENDS}"
  wait_sweep s Succeeded
  check "reason GoalReached" "$(jpath tsw/s '{.status.conditions[?(@.type=="Succeeded")].reason}')" GoalReached
  check "stopped after the third trial" "$(jpath tsw/s '{.status.trialProgress} {.status.bestTrial.name}')" "3/6 s-2"
  check "no fourth trial was created" "$(k get tj -o name | grep -c 's-3')" 0
}

case_goal_stops_running_trials() {
  new_ns stop
  # Trial 0 reaches the goal at once; trial 1 never ends and must be stopped.
  sweep r 2 ", goal: 0.05" '"kubetrain.io/test-termination-message": "{\"eval\": {\"auc\": 0.${params.x}}}"'
  wait_until "two trials running" bash -c "[[ \$(kubectl -n ${ns} get pods -o name | wc -l) == 2 ]]"
  k annotate pod r-0-worker-0 kubetrain.io/test-exit-code=0 >/dev/null
  wait_sweep r Succeeded
  check "the running trial is Stopped" "$(jpath tsw/r '{.status.trials[1].phase} {.status.trials[1].reason}')" "Stopped GoalReached"
  wait_until "the stopped trial's job is deleted" bash -c "! kubectl -n ${ns} get tj r-1 >/dev/null 2>&1"
}

case_deletion_takes_the_trials() {
  new_ns delete
  sweep d 2 "" ""  # pods never end
  wait_until "two trial pods" bash -c "[[ \$(kubectl -n ${ns} get pods -o name | wc -l) == 2 ]]"
  check "two trials while running" "$(k get tj -o name | wc -l)" 2
  k delete tsw d --wait=false >/dev/null
  wait_until "trials collected" bash -c "[[ -z \$(kubectl -n ${ns} get tj -o name) ]]"
  wait_until "their pods collected" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
}

case_suspend_and_resume() {
  new_ns suspend
  sweep p 1 "" ""
  wait_until "one trial pod" bash -c "[[ \$(kubectl -n ${ns} get pods -o name | wc -l) == 1 ]]"
  k patch tsw p --type=merge -p '{"spec":{"suspend":true}}' >/dev/null
  wait_sweep p Suspended
  wait_until "the running trial is suspended" bash -c "[[ \$(kubectl -n ${ns} get tj p-0 -o jsonpath='{.spec.runPolicy.suspend}') == true ]]"
  wait_until "its pod goes" bash -c "[[ -z \$(kubectl -n ${ns} get pods -o name) ]]"
  k patch tsw p --type=merge -p '{"spec":{"suspend":false}}' >/dev/null
  wait_until "the trial resumes" bash -c "[[ \$(kubectl -n ${ns} get tj p-0 -o jsonpath='{.spec.runPolicy.suspend}') == false ]]"
  wait_until "its pod is back" bash -c "[[ \$(kubectl -n ${ns} get pods -o name | wc -l) == 1 ]]"
  check "still one trial" "$(k get tj -o name | wc -l)" 1
}

# Early stopping on the cluster. kwok pods serve no metrics, so the test
# plays the job controller's progress reader: it writes each trial's status.progress (the
# job controller keeps a progress it did not read itself). Trial 0 reads loss 0.3 at step 50
# and succeeds; trial 1 then reads loss 5 at step 60 and is stopped: EarlyStopped with the
# numbers, its TrainingJob deleted, not failed; trial 2 is started in its place.
case_early_stopping_stops_the_worse_trial() {
  new_ns early
  cat <<SWEEP | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: e}
spec:
  objective: {metric: eval.auc}
  algorithm: {name: grid}
  parallelism: 2
  earlyStopping: {minTrialsRequired: 1, startStep: 10}
  parameters:
    - {name: x, type: categorical, values: ["1", "5", "3"]}
  trialTemplate:
    replicaSpecs:
      Worker:
        template:
          metadata:
            annotations: {"kubetrain.io/test-termination-message": "{\"eval\": {\"auc\": 0.\${params.x}}}"}
          spec:
            nodeSelector: {type: kwok}
            tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
            containers: [{name: trainer, image: kubetrain-trainer}]
SWEEP
  check "the CRD defaults the algorithm" "$(jpath tsw/e '{.spec.earlyStopping.algorithm}')" medianStop
  wait_until "two trial pods running" bash -c \
    "[[ \$(kubectl -n ${ns} get pods --field-selector=status.phase=Running -o name | wc -l) == 2 ]]"
  progress() {  # progress TRIAL STEP LOSS
    k patch tj "$1" --subresource=status --type=merge -p "{\"status\": {\"progress\": {\"step\": $2,
      \"totalSteps\": 100, \"percent\": $2, \"samplesPerSecond\": 100, \"replica\": \"worker-0\",
      \"loss\": $3, \"updateTime\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}}}" >/dev/null
  }
  progress e-0 50 0.3
  wait_until "trial 0's loss in its row's curve" bash -c \
    "[[ \$(kubectl -n ${ns} get tsw e -o jsonpath='{.status.trials[0].curve}') == '[[50,0.3]]' ]]"
  progress e-1 5 9  # before startStep: kept running
  k annotate pod e-0-worker-0 kubetrain.io/test-exit-code=0 >/dev/null
  wait_until "trial 0 succeeded" bash -c \
    "[[ \$(kubectl -n ${ns} get tsw e -o jsonpath='{.status.trials[0].phase}') == Succeeded ]]"
  check "trial 1 still runs (its reading was before startStep)" "$(jpath tsw/e '{.status.trials[1].phase}')" Running
  progress e-1 60 5
  wait_until "trial 1 early stopped" bash -c \
    "[[ \$(kubectl -n ${ns} get tsw e -o jsonpath='{.status.trials[1].phase}') == EarlyStopped ]]"
  check "the numbers that decided" \
    "$(jpath tsw/e '{.status.trials[1].earlyStopped.step} {.status.trials[1].earlyStopped.value} {.status.trials[1].earlyStopped.median} {.status.trials[1].earlyStopped.trials} {.status.trials[1].reason}')" \
    "60 5 0.3 1 EarlyStopped"
  check "counted as early stopped, not failed" "$(jpath tsw/e '{.status.earlyStopped} {.status.failed}')" "1 0"
  wait_until "the stopped trial's job is deleted" bash -c "! kubectl -n ${ns} get tj e-1 >/dev/null 2>&1"
  wait_until "a TrialEarlyStopped event" bash -c \
    "kubectl -n ${ns} get events.events.k8s.io -o json | jq -e '[.items[] | select(.reason == \"TrialEarlyStopped\")] | length == 1'"
  wait_until "trial 2 started in its place" bash -c "kubectl -n ${ns} get tj e-2"
  k annotate pod e-2-worker-0 kubetrain.io/test-exit-code=0 >/dev/null 2>&1 ||
    { wait_until "trial 2's pod" bash -c "kubectl -n ${ns} get pod e-2-worker-0"; k annotate pod e-2-worker-0 kubetrain.io/test-exit-code=0 >/dev/null; }
  wait_sweep e Succeeded
  check "the best is a trial that ran to its end" "$(jpath tsw/e '{.status.bestTrial.name} {.status.trialProgress}')" "e-2 3/3"
}

# examples/sweep.yaml as it is. Its pods ask for no kwok node, so they stay
# unscheduled; the test plays the kubelet and writes each worker pod's status
# (exit 0, the trainer's metrics with an AUC that grows with the trial index).
case_example_as_it_is() {
  new_ns example
  watch_trials lr-sweep
  k apply -f "${root}/examples/sweep.yaml" >/dev/null
  finish_workers() {
    local pod trial
    for pod in $(kubectl -n "${ns}" get pods -l kubetrain.io/replica-type=worker \
      --field-selector=status.phase=Pending -o name); do
      trial="${pod#pod/lr-sweep-}"
      trial="${trial%%-*}"
      kubectl -n "${ns}" patch "${pod}" --subresource=status --type=merge -p "{\"status\": {\"phase\": \"Succeeded\",
        \"containerStatuses\": [{\"name\": \"trainer\", \"ready\": false, \"restartCount\": 0, \"image\": \"kubetrain-trainer\", \"imageID\": \"\",
        \"state\": {\"terminated\": {\"exitCode\": 0, \"reason\": \"Completed\", \"message\": \"{\\\"steps\\\": 200, \\\"eval\\\": {\\\"auc\\\": 0.7${trial}}}\"}}}]}}" >/dev/null
    done
    [[ "$(kubectl -n "${ns}" get tsw lr-sweep -o jsonpath='{.status.state}')" == Succeeded ]]
  }
  wait_until "the example sweep to succeed" finish_workers
  check "all 4 trials, best is the last" \
    "$(jpath tsw/lr-sweep '{.status.trialProgress} {.status.succeeded} {.status.bestTrial.name} {.status.bestTrial.value}')" \
    "4/4 4 lr-sweep-3 0.73"
  check "the trials ran the substituted trainer args" \
    "$(jpath tj/lr-sweep-0 '{.spec.replicaSpecs.Worker.template.spec.containers[0].args}' | grep -c '"--lr=0\.0[0-9]*"')" 1
  wait_until "the watch saw all 4 trials finish" bash -c "[[ \$(cat '${work}/lr-sweep.peak.finished' 2>/dev/null) == 4 ]]"
  check "never more than 2 trials at once (watch saw $(cat "${work}/lr-sweep.peak"))" \
    "$(( $(cat "${work}/lr-sweep.peak") <= 2 ))" 1
}

# A sweep whose rows would carry 19 KB of parameter values each (19
# categorical parameters of 1,000-byte values; the CRD allows 1,024) passed etcd's 1.5 MiB
# limit at its ~80th row;
# the status write was refused and the sweep stopped with no reason. Its status is now
# bounded (rows' strings cut, old final rows counted in omittedTrials). LARGE_SWEEP_TRIALS
# trials (default 1000, the most a sweep may have; 150 s here), 50 at a time, each one kwok
# pod that ends at once; trials with key=loss fail (MetricMissing).
case_large_sweep_status_stays_bounded() {
  new_ns large
  local n="${LARGE_SWEEP_TRIALS:-1000}" params="" i ends="${ENDS//'${params.x}'/5}"
  for i in $(seq 0 18); do
    params+="    - {name: p${i}, type: categorical, values: [\"$(printf 'a%.0s' $(seq 1000))\", \"$(printf 'b%.0s' $(seq 1000))\"]}"$'\n'
  done
  cat <<SWEEP | k apply --server-side -f - >/dev/null || { fail "the large sweep was refused"; return; }
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: big}
spec:
  objective: {metric: eval.auc}
  algorithm: {name: random, seed: 3}
  parallelism: 50
  maxTrials: ${n}
  parameters:
    - {name: key, type: categorical, values: [auc, loss]}
${params}  trialTemplate:
    runPolicy: {ttlSecondsAfterFinished: 0}
    replicaSpecs:
      Worker:
        template:
          metadata:
            annotations: {${ends}}
          spec:
            nodeSelector: {type: kwok}
            tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
            containers: [{name: trainer, image: kubetrain-trainer}]
SWEEP
  local started=${SECONDS}
  # Until it succeeds or a status write is refused (what the unbounded status led to), as long
  # as trials keep finishing: on a loaded machine the operator is slower, not stuck.
  STALL_SECONDS=180 wait_progressing "the ${n}-trial sweep to finish" \
    "kubectl -n ${ns} get tsw big -o jsonpath='{.status.trialProgress}'" bash -c \
    "[[ \$(kubectl -n ${ns} get tsw big -o jsonpath='{.status.state}') == Succeeded ]] || grep -q 'request is too large' '${work}/operator.log'"
  echo "  waited $((SECONDS - started)) s for ${n} trials"
  check "every trial counted" \
    "$(jpath tsw/big '{.status.trialProgress}') $(($(jpath tsw/big '{.status.succeeded}') + $(jpath tsw/big '{.status.failed}')))" "${n}/${n} ${n}"
  local rows omitted bytes longest
  rows="$(k get tsw big -o json | jq '.status.trials | length')"
  omitted="$(k get tsw big -o json | jq '[.status.omittedTrials // {} | .[]] | add // 0')"
  check "at most 100 rows, the rest in omittedTrials" "$((rows <= 100)) $((rows + omitted))" "1 ${n}"
  longest="$(k get tsw big -o json | jq '[.status.trials[].parameters[] | length] | max')"
  check "parameter values in rows are cut to 128 bytes" "$((longest <= 128))" 1
  bytes="$(k get tsw big -o json | jq -c .status | wc -c)"
  echo "  status: ${rows} rows, ${omitted} omitted, ${bytes} bytes"
  check "the status is far below etcd's 1.5 MiB (${bytes} bytes)" "$((bytes < 262144))" 1
  check "the best trial is a key=auc one" "$(jpath tsw/big '{.status.bestTrial.parameters.key} {.status.bestTrial.value}')" "auc 0.5"
  check "no status write was refused" "$(grep -c 'request is too large' "${work}/operator.log")" 0
}

kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
kubectl apply -k "${root}/deploy/kustomize/base" >/dev/null || { echo "kustomize base rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
# The default Lease: ctest never runs this beside controller.lifecycle (RESOURCE_LOCK).
"${operator}" --kubeconfig "${work}/operator-kubeconfig" --leader-elect \
  --leader-elect-namespace kubetrain-system \
  --metrics-addr "127.0.0.1:$(free_port)" --health-addr "127.0.0.1:$(free_port)" \
  >>"${work}/operator.log" 2>&1 &
op_pid=$!
cases=(case_grid_picks_the_best_and_counts_missing_metrics case_trial_ttl_keeps_every_result
  case_goal_stops_early
  case_goal_stops_running_trials case_deletion_takes_the_trials case_suspend_and_resume
  case_example_as_it_is case_early_stopping_stops_the_worse_trial)
[[ $# -gt 1 ]] && cases=("${@:2}")
run_cases "${cases[@]}"

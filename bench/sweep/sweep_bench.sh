#!/usr/bin/env bash
# TrainingSweep figures, on kwok (a fresh control plane with an
# audit log of every write):
#  1. operator overhead per trial: a sequential sweep (parallelism 1) of
#     SEQ trials; for each trial after the first, seconds from the end of the
#     previous trial (kwok's last status write of its worker pod) to the first
#     pod create of this trial, both from the audit log. Median over the trials
#     of all runs.
#  2. a sweep of TRIALS trials (parallelism PAR): wall time from create to
#     Succeeded, and API writes per trial (audit events of verb create, update,
#     patch or delete in the sweep's namespace: all of them, and the operator's
#     own). Median over RUNS runs.
# Every trial is one worker whose pod kwok ends with exit code 0 and a
# termination message {"eval": {"auc": <x>}}, x drawn by the sweep.
# Usage: bench/sweep/sweep_bench.sh OPERATOR_BINARY [TRIALS=200] [PAR=10] [SEQ=20] [RUNS=3]
# Only processes this script started are stopped, by PID.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "${root}/tests/tools/testlib.sh"
operator="$(realpath "${1:?usage: sweep_bench.sh OPERATOR_BINARY [TRIALS] [PAR] [SEQ] [RUNS]}")"
trials="${2:-200}"
par="${3:-10}"
seq_trials="${4:-20}"
runs="${5:-3}"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
dir="" op_pid="" work=""
trap own_cluster_teardown EXIT
trap 'exit 130' INT TERM
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-sweep-bench.XXXXXX")"

cat >"${work}/audit-policy.yaml" <<'POL'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete]
- level: None
POL
audit="${work}/audit.log"
dir="${work}/cluster"
KUBETRAIN_APISERVER_FLAGS="--audit-policy-file ${work}/audit-policy.yaml --audit-log-path ${audit} --audit-log-format json ${KUBETRAIN_APISERVER_FLAGS:-}" \
  "${root}/tests/cluster/up" "${dir}" >/dev/null
export KUBECONFIG="${dir}/kubeconfig"
kubectl apply -k "${root}/crds" >/dev/null
kubectl apply -k "${root}/deploy/kustomize/base" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
"${operator}" --kubeconfig "${work}/operator-kubeconfig" --metrics-addr 127.0.0.1:0 \
  --health-addr 127.0.0.1:0 --workers 4 >>"${work}/operator.log" 2>&1 &
op_pid=$!

sweep() {  # sweep NAMESPACE NAME TRIALS PARALLELISM
  cat <<SWEEP
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: $2, namespace: $1}
spec:
  objective: {metric: eval.auc}
  algorithm: {name: random, seed: 1}
  parallelism: $4
  maxTrials: $3
  parameters:
    - {name: x, type: double, min: 0.5, max: 0.9}
  trialTemplate:
    replicaSpecs:
      Worker:
        template:
          metadata:
            annotations:
              kubetrain.io/test-exit-code: "0"
              kubetrain.io/test-termination-message: '{"eval": {"auc": \${params.x}}}'
          spec:
            nodeSelector: {type: kwok}
            tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
            containers: [{name: trainer, image: kubetrain-trainer}]
SWEEP
}
run_sweep() {  # run_sweep NAMESPACE TRIALS PARALLELISM -> prints wall seconds
  kubectl create namespace "$1" >/dev/null
  wait_for_namespace "$1"
  local t0 t1
  t0=$(date +%s.%N)
  sweep "$1" s "$2" "$3" | kubectl create -f - >/dev/null
  kubectl -n "$1" wait --for=condition=Succeeded tsw/s --timeout=1800s >/dev/null
  t1=$(date +%s.%N)
  local done_trials
  done_trials="$(kubectl -n "$1" get tsw s -o jsonpath='{.status.succeeded}')"
  [[ "${done_trials}" == "$2" ]] || { echo "sweep in $1: ${done_trials} of $2 trials succeeded" >&2; exit 1; }
  python3 -c "print(f'{$t1 - $t0:.2f}')"
}

seq_ns=() big_ns=() walls=()
for ((r = 0; r < runs; r++)); do
  seq_ns+=("seq-${r}")
  run_sweep "seq-${r}" "${seq_trials}" 1 >/dev/null
  big_ns+=("big-${r}")
  walls+=("$(run_sweep "big-${r}" "${trials}" "${par}")")
  echo "run ${r}: ${trials}-trial sweep (parallelism ${par}) in ${walls[-1]} s" >&2
done
# The log audit backend writes each event before the response (blocking mode).

python3 - "${audit}" "${trials}" "${seq_ns[*]}" "${big_ns[*]}" "${walls[*]}" <<'PY'
import json, statistics, sys
from datetime import datetime
audit, trials = sys.argv[1], int(sys.argv[2])
seq_ns, big_ns = sys.argv[3].split(), sys.argv[4].split()
walls = [float(w) for w in sys.argv[5].split()]
op = "system:serviceaccount:kubetrain-system:kubetrain-operator"
def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
events = []
for line in open(audit):
    e = json.loads(line)
    if e.get("stage") != "ResponseComplete":
        continue
    events.append(e)
# 1. overhead: end of trial i-1 (kwok's last write to its worker pod's status)
#    -> first pod create of trial i (the operator's).
gaps = []
for ns in seq_ns:
    end, start = {}, {}
    for e in events:
        ref = e.get("objectRef", {})
        if ref.get("namespace") != ns or ref.get("resource") != "pods":
            continue
        name = ref.get("name", "")
        if not name.startswith("s-"):
            continue
        trial = int(name.split("-")[1])
        t = ts(e["stageTimestamp"])
        if e["verb"] == "create" and e["user"]["username"] == op and e["responseStatus"]["code"] == 201:
            start[trial] = min(start.get(trial, t), t)
        elif ref.get("subresource") == "status" and e["user"]["username"] != op:
            end[trial] = max(end.get(trial, t), t)
    for i in sorted(start):
        if i - 1 in end and start[i] > end[i - 1]:
            gaps.append(start[i] - end[i - 1])
# 2. writes per trial in the big sweeps' namespaces.
per_trial_all, per_trial_op, by_res = [], [], {}
for ns in big_ns:
    n_all = n_op = 0
    for e in events:
        if e.get("objectRef", {}).get("namespace") != ns:
            continue
        n_all += 1
        if e["user"]["username"] == op:
            n_op += 1
            ref = e["objectRef"]
            key = f'{e["verb"]} {ref.get("resource")}{"/" + ref["subresource"] if ref.get("subresource") else ""}'
            by_res[key] = by_res.get(key, 0) + 1
    per_trial_all.append(n_all / trials)
    per_trial_op.append(n_op / trials)
print("operator writes per trial by verb and resource (all big runs):")
for k, v in sorted(by_res.items(), key=lambda kv: -kv[1]):
    print(f"  {k}: {v / (trials * len(big_ns)):.2f}")
print(f"overhead samples: {len(gaps)} (sequential sweeps of {len(gaps) // max(1, len(seq_ns)) + 1} trials x {len(seq_ns)} runs)")
print(f"{trials}-trial sweep wall time, each run: " + ", ".join(f"{w:.1f} s" for w in walls))
print(f"API writes per trial, each run (all writers / operator): " +
      ", ".join(f"{a:.1f}/{o:.1f}" for a, o in zip(per_trial_all, per_trial_op)))
print(f"median API writes per trial: {statistics.median(per_trial_all):.1f} (operator {statistics.median(per_trial_op):.1f})")
print(f"median {trials}-trial sweep wall time: {statistics.median(walls):.1f} s")
print(f"median operator overhead per trial (previous trial's end -> next trial's pod created): {statistics.median(gaps):.3f} s")
PY

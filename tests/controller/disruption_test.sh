#!/usr/bin/env bash
# Lost nodes on the real control plane, kwok running the pods (issue 28 items
# 2 and 3): 50 jobs (2 workers each, restartPolicy Never) spread over 6 kwok
# nodes of their own; 3 nodes deleted -> pod GC removes their pods, every
# replica is recreated and Running again, `restarts` stays 0, the jobs count
# `disruptions`, no job fails, and a watch of every pod records that no two
# live pods ever stood for one replica at once (so a duplicate fails the test).
# Usage: disruption_test.sh OPERATOR_BINARY (KUBECONFIG: the test cluster).
# Prints "nodes deleted -> all replicas Running: N s", "pod creates: N",
# "duplicates: N" (figures for the note).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: disruption_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster
NS_PREFIX=disrupt
WAIT_SECONDS=180
JOBS="${DISRUPT_JOBS:-50}"
work="$(mktemp -d)"
id="d$(openssl rand -hex 3)"
op_pid=""
watch_pid=""
cleanup() {
  if [[ -n "${watch_pid}" ]]; then kill -TERM "${watch_pid}" 2>/dev/null; wait "${watch_pid}" 2>/dev/null; fi
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; fi
  delete_namespaces
  kubectl delete node -l "disrupt-test=${id}" --wait=false >/dev/null 2>&1
  if ((failures)); then echo "---- operator log (last 40 lines)"; tail -n 40 "${work}/operator.log"; fi
  rm -rf "${work}"
}
trap cleanup EXIT

kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
kubectl apply -k "${root}/deploy/kustomize/rbac" >/dev/null || { echo "RBAC rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null

# Six kwok nodes of this test's own, labelled with its id.
for i in 0 1 2 3 4 5; do
  cat <<NODE
apiVersion: v1
kind: Node
metadata:
  name: ${id}-node-${i}
  annotations: {kwok.x-k8s.io/node: fake, node.alpha.kubernetes.io/ttl: "0"}
  labels: {type: kwok, disrupt-test: ${id}, kubernetes.io/hostname: ${id}-node-${i}, kubernetes.io/os: linux}
spec:
  taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]
---
NODE
done | kubectl apply -f - >/dev/null || { echo "nodes rejected"; exit 1; }
kubectl wait --for=condition=Ready node -l "disrupt-test=${id}" --timeout 60s >/dev/null || exit 1

new_ns jobs
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
"${operator}" --kubeconfig "${work}/operator-kubeconfig" --metrics-addr "127.0.0.1:$(free_port)" \
  --health-addr "127.0.0.1:$(free_port)" --workers 4 --progress-qps 0 --namespace "${ns}" \
  >"${work}/operator.log" 2>&1 &
op_pid=$!

# Every pod event of the namespace, as one JSON line each (the duplicate check reads it).
kubectl -n "${ns}" get pods --watch --output-watch-events -o json >"${work}/watch.json" 2>/dev/null &
watch_pid=$!

for ((j = 0; j < JOBS; j++)); do
  cat <<JOB
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: job-${j}}
spec:
  successPolicy: AllWorkers
  replicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          nodeSelector: {disrupt-test: ${id}}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
---
JOB
done | k apply -f - >/dev/null || fail "creating the jobs"

want=$((JOBS * 2))
running() { [[ "$(k get pods --field-selector status.phase=Running --no-headers 2>/dev/null | wc -l)" == "$1" ]]; }
wait_until "all ${want} replicas Running" running "${want}" || exit 1
creates_before="$(grep -c '"type": *"ADDED"' "${work}/watch.json")"

# Which nodes hold pods now; delete three of them.
victims="$(k get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | sort | uniq -c | sort -rn | head -3 | awk '{print $2}')"
lost="$(k get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -cF -f <(echo "${victims}"))"
echo "deleting nodes: $(echo ${victims}) (${lost} pods on them)"
t0=$(date +%s.%N)
kubectl delete node ${victims} --wait=false >/dev/null || fail "deleting nodes"
# The lost pods go (pod GC: orphaned pods after a 40 s quarantine, checked
# every 20 s), then every replica is Running again.
# (Output first: with pipefail, grep -q closing the pipe early would read as "gone".)
gone() {
  local nodes
  nodes="$(k get pods -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}')" || return 1
  ! grep -qF -f <(echo "${victims}") <<<"${nodes}"
}
wait_until "the lost pods gone" gone
wait_until "all ${want} replicas Running again" running "${want}"
t1=$(date +%s.%N)
echo "nodes deleted -> all replicas Running: $(echo "${t1} - ${t0}" | bc) s"

restarts="$(k get tj -o jsonpath='{range .items[*]}{.status.restarts}{"\n"}{end}' | awk '{s += $1} END {print s + 0}')"
disruptions_of() { k get tj -o jsonpath='{range .items[*]}{.status.disruptions}{"\n"}{end}' | awk '{s += $1} END {print s + 0}'; }
WAIT_SECONDS=60 wait_until "disruptions counted (${lost})" test "$(disruptions_of)" -ge "${lost}"
check "restarts summed over the jobs" "${restarts}" 0
check "disruptions summed over the jobs" "$(disruptions_of)" "${lost}"
check "failed jobs" "$(k get tj -o jsonpath='{range .items[*]}{.status.state}{"\n"}{end}' | grep -c Failed)" 0
check "PodDisrupted events" "$(k get events --field-selector reason=PodDisrupted --no-headers | wc -l)" "${lost}"

kill -TERM "${watch_pid}" 2>/dev/null; wait "${watch_pid}" 2>/dev/null; watch_pid=""
creates="$(grep -c '"type": *"ADDED"' "${work}/watch.json")"
echo "pod creates after the nodes went: $((creates - creates_before)) (lost ${lost})"
# Live pods per replica over the watch: two at once is a duplicate.
dups="$(python3 - "${work}/watch.json" <<'PY'
import json, sys
dec = json.JSONDecoder(); text = open(sys.argv[1]).read(); i = 0
live = {}; dups = 0
while i < len(text):
    while i < len(text) and text[i].isspace(): i += 1
    if i >= len(text): break
    ev, i = dec.raw_decode(text, i)
    pod = ev["object"]; m = pod["metadata"]; l = m.get("labels", {})
    replica = (l.get("kubetrain.io/job-name"), l.get("kubetrain.io/replica-type"), l.get("kubetrain.io/replica-index"))
    uids = live.setdefault(replica, set())
    if ev["type"] == "DELETED" or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        uids.discard(m["uid"])
    else:
        uids.add(m["uid"])
        if len(uids) > 1: dups += 1
print(dups)
PY
)"
echo "duplicates: ${dups}"
check "duplicate live pods for a replica" "${dups}" 0
((failures == 0))

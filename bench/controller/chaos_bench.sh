#!/usr/bin/env bash
# Chaos figure (no duplicate pods across operator and apiserver crashes): JOBS TrainingJobs of 1 PS + 4 workers on kwok,
# created in batches while the operator is SIGKILLed at KILLS random moments
# (restarted each time) and the kube-apiserver is SIGKILLed and restarted once.
# Prints: duplicate pod creates (from the apiserver's audit log: creates per pod
# name answered 201, minus one per name; 409 AlreadyExists counted apart), jobs
# Succeeded out of JOBS, and seconds from the first create to convergence
# (every job Succeeded). Goal: 0 duplicates, JOBS/JOBS.
# Usage: bench/controller/chaos_bench.sh OPERATOR_BINARY [JOBS=50] [KILLS=10]
#
# A fresh control plane (tests/cluster/up) with audit logging of pod creates
# at Metadata level. The operator runs as the controller tests run it: the
# kustomize base installed, its ServiceAccount's token in its own kubeconfig,
# --leader-elect with the shipped lease settings (so each restart waits for
# the killed leader's lease to lapse). A kill lands a random 0-4 s after the
# new process reports /readyz "leader: ok", i.e. while it is reconciling. The
# apiserver is restarted with the exact command line read from
# /proc/PID/cmdline, and DIR/pids updated so tests/cluster/down stops it.
# Workers carry kubetrain.io/test-exit-code: "0", so kwok ends them Succeeded.
# Only processes this script started are stopped, by PID.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "${root}/tests/tools/testlib.sh"
operator="$(realpath "${1:?usage: chaos_bench.sh OPERATOR_BINARY [JOBS] [KILLS]}")"
jobs="${2:-50}"
kills="${3:-10}"
converge_s="${KUBETRAIN_BENCH_TIMEOUT:-900}"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
dir="" op_pid="" work=""
trap 'own_cluster_teardown KILL' EXIT
trap 'exit 130' INT TERM
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-chaos.XXXXXX")"

cat >"${work}/audit-policy.yaml" <<'POL'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create]
  resources: [{group: "", resources: [pods]}]
- level: None
POL
audit="${work}/audit.log"
dir="${work}/cluster"
KUBETRAIN_APISERVER_FLAGS="--audit-policy-file ${work}/audit-policy.yaml --audit-log-path ${audit} --audit-log-format json ${KUBETRAIN_APISERVER_FLAGS:-}" \
  "${root}/tests/cluster/up" "${dir}" >/dev/null
export KUBECONFIG="${dir}/kubeconfig"

kubectl apply -k "${root}/crds" >/dev/null
kubectl apply -k "${root}/deploy/kustomize/base" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
kubectl create namespace chaos >/dev/null
wait_for_namespace chaos
operator_kubeconfig "${work}/operator-kubeconfig" || exit 1
health_port="$(free_port)"
start_operator() {
  "${operator}" --kubeconfig "${work}/operator-kubeconfig" --leader-elect \
    --leader-elect-namespace kubetrain-system --metrics-addr 127.0.0.1:0 \
    --health-addr "127.0.0.1:${health_port}" --workers 4 >>"${work}/operator.log" 2>&1 &
  op_pid=$!
}
wait_leader() {  # until this process leads and its caches are synced (or 120 s)
  local deadline=$((SECONDS + 120))
  until [[ "$(curl -s "127.0.0.1:${health_port}/readyz" 2>/dev/null)" == "leader: ok" ]]; do
    kill -0 "${op_pid}" 2>/dev/null || { echo "operator exited; log:" >&2; tail -n 20 "${work}/operator.log" >&2; exit 1; }
    ((SECONDS < deadline)) || { echo "operator never became leader in 120 s" >&2; exit 1; }
    sleep 0.2
  done
}
restart_apiserver() {
  local pid
  pid=$(awk '$1 == "kube-apiserver" {print $2}' "${dir}/pids" | tail -n 1)
  local -a cmd
  mapfile -d '' -t cmd <"/proc/${pid}/cmdline"
  local exe; exe="$(readlink "/proc/${pid}/exe")"
  kill -KILL "${pid}"
  while kill -0 "${pid}" 2>/dev/null; do sleep 0.1; done
  (exec -a "${cmd[0]}" "${exe}" "${cmd[@]:1}" >>"${dir}/logs/kube-apiserver.log" 2>&1 </dev/null) &
  local new=$!
  sed -i "s/^kube-apiserver ${pid}\$/kube-apiserver ${new}/" "${dir}/pids"
  local deadline=$((SECONDS + 120))
  until kubectl get --raw /readyz >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { echo "kube-apiserver did not come back" >&2; exit 1; }
    sleep 0.2
  done
  echo "kube-apiserver restarted (pid ${pid} -> ${new})" >&2
}

make_job() {
  cat <<JOB
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: chaos-$1, namespace: chaos}
spec:
  replicaSpecs:
    PS:
      replicas: 1
      template:
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
    Worker:
      replicas: 4
      template:
        metadata:
          annotations: {kubetrain.io/test-exit-code: "0"}
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
---
JOB
}
# Jobs go in KILLS+1 batches: one before the first kill, one after each restart.
batches=$((kills + 1))
created=0
create_batch() {  # create_batch N: the N-th share of the jobs
  local upto=$(( jobs * ($1 + 1) / batches ))
  ((upto > created)) || return 0
  for ((i = created; i < upto; i++)); do make_job "${i}"; done | kubectl create -f - >/dev/null
  created=${upto}
}
apiserver_at=$(( (kills + 1) / 2 ))  # the apiserver restart goes mid-way

start_operator
wait_leader
start=$(date +%s.%N)
for ((k = 0; k < kills; k++)); do
  create_batch "${k}"
  sleep "$(awk -v s="${RANDOM}" 'BEGIN {srand(s); printf "%.2f", rand() * 4}')"
  kill -KILL "${op_pid}"; wait "${op_pid}" 2>/dev/null || true; op_pid=""
  echo "operator SIGKILLed ($((k + 1))/${kills}) at $(printf '%.1f' "$(echo "$(date +%s.%N) - ${start}" | bc -l)") s" >&2
  ((k + 1 == apiserver_at)) && restart_apiserver
  start_operator
  wait_leader
done
create_batch "${kills}"

succeeded() {
  kubectl -n chaos get tj -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Succeeded")].status}{"\n"}{end}' 2>/dev/null \
    | grep -c '^True$' || true
}
deadline=$((SECONDS + converge_s))
done_jobs=0
while :; do
  done_jobs=$(succeeded)
  ((done_jobs >= jobs)) && break
  ((SECONDS < deadline)) || break
  sleep 1
done
t=$(echo "$(date +%s.%N) - ${start}" | bc -l)
((done_jobs >= jobs)) || echo "not converged: ${done_jobs}/${jobs} Succeeded after ${converge_s} s" >&2

# Audit: one ResponseComplete event per pod create; count per pod name in the
# bench namespace by response code.
read -r dups conflicts creates names other never < <(python3 - "${audit}" "${jobs}" <<'PY'
import json, sys, collections
ok = collections.Counter(); conflicts = 0; other = []; tried = set()
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:  # a line cut by the apiserver's SIGKILL
        continue
    ref = e.get("objectRef", {})
    if e.get("stage") != "ResponseComplete" or e.get("verb") != "create" or ref.get("resource") != "pods" \
       or ref.get("subresource") or ref.get("namespace") != "chaos":
        continue
    name = ref.get("name"); tried.add(name)
    code = e.get("responseStatus", {}).get("code")
    if code == 201: ok[name] += 1
    elif code == 409: conflicts += 1
    else: other.append(f"{name}:{code}")
replicas = {f"chaos-{j}-{r}" for j in range(int(sys.argv[2])) for r in ["ps-0"] + [f"worker-{w}" for w in range(4)]}
never = sorted(replicas - tried)
print(sum(c - 1 for c in ok.values()), conflicts, sum(ok.values()), len(ok), ",".join(other) or "-", ",".join(never) or "-")
PY
)
printf '%d jobs (1 PS + 4 workers), %d operator SIGKILLs, 1 kube-apiserver restart: %d duplicate pod creates (%d creates answered 201 for %d pod names; %d answered 409 AlreadyExists), %d/%d jobs Succeeded, %.1f s from the first create to convergence\n' \
  "${jobs}" "${kills}" "${dups}" "${creates}" "${names}" "${conflicts}" "${done_jobs}" "${jobs}" "${t}"
# Creates answered neither 201 nor 409 (e.g. 504 when the apiserver timed out
# the request): such a create may still have stored the pod (seen: a 504 whose
# pod existed), so a duplicate would then show as a 409 or a second 201 above.
[[ "${other}" == - ]] || echo "pod creates answered neither 201 nor 409 (name:code): ${other}"
# A job is Succeeded once worker-0 is (ChiefOrWorker0), so it may finish before
# its later replicas are created: those never get a create.
[[ "${never}" == - ]] || echo "replica pod names with no create at all in the audit log: ${never}"
((dups == 0 && done_jobs >= jobs))

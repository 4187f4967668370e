#!/usr/bin/env bash
# Kueue admission to running pods: on a fresh control plane with a
# real Kueue (tests/cluster/up, KUBETRAIN_KUEUE=1) and the operator run with
# --kueue, JOBS TrainingJobs (1 PS + 2 workers each) are queued at once in a
# ClusterQueue with quota for all of them; for each job, the seconds from the
# moment its Workload is seen Admitted to the moment all its pods are seen
# created. Both moments are taken by this script from two watches (Workloads
# and Pods) started before the jobs, on the same clock, so the watch delay
# is on both sides. Median and p99 over the jobs, per run; the figure is the
# median of the runs' medians (and of their p99s). RUNS runs, each in a new
# namespace.
# Usage: bench/kueue/admission_bench.sh OPERATOR_BINARY [JOBS=100] [RUNS=3]
# Only processes this script started are stopped, by PID.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
operator="$(realpath "${1:?usage: admission_bench.sh OPERATOR_BINARY [JOBS] [RUNS]}")"
jobs="${2:-100}"
runs="${3:-3}"
source "${root}/tests/tools/testlib.sh"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
dir="" op_pid="" work=""
trap own_cluster_teardown EXIT
trap 'exit 130' INT TERM
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-kueue-bench.XXXXXX")"
dir="${work}/cluster"
KUBETRAIN_KUEUE=1 "${root}/tests/cluster/up" "${dir}" >/dev/null
export KUBECONFIG="${dir}/kubeconfig"
kubectl apply -k "${root}/crds" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
metrics_port="$(free_port)"
health_port="$(free_port)"
"${operator}" --kubeconfig "${KUBECONFIG}" --kueue --workers 4 --progress-qps 0 \
  --metrics-addr "127.0.0.1:${metrics_port}" --health-addr "127.0.0.1:${health_port}" \
  >"${work}/operator.log" 2>&1 &
op_pid=$!

cpu=$((jobs * 3))
cat <<Q | kubectl apply -f - >/dev/null
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: kwok}
spec:
  nodeLabels: {type: kwok}
  tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
Q

for ((r = 1; r <= runs; r++)); do
  ns="kueue-bench-${r}"
  kubectl create namespace "${ns}" >/dev/null
  wait_for_namespace "${ns}"
  # A ClusterQueue per run: no quota is held by the previous run's jobs.
  cat <<Q | kubectl apply -f - >/dev/null
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: bench-${r}}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu]
    flavors: [{name: kwok, resources: [{name: cpu, nominalQuota: "${cpu}"}]}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: ${ns}}
spec: {clusterQueue: bench-${r}}
Q
  for ((i = 0; i < jobs; i++)); do
    cat <<JOB
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: j${i}, namespace: ${ns}, labels: {kueue.x-k8s.io/queue-name: q}}
spec:
  replicaSpecs:
    PS:
      replicas: 1
      template: {spec: {containers: [{name: trainer, image: kubetrain-trainer, resources: {requests: {cpu: "1"}}}]}}
    Worker:
      replicas: 2
      template: {spec: {containers: [{name: trainer, image: kubetrain-trainer, resources: {requests: {cpu: "1"}}}]}}
---
JOB
  done >"${work}/jobs-${r}.yaml"
  # The watches first; then all jobs at once. Prints one line: median p99 (s).
  python3 - "${ns}" "${jobs}" 3 "${work}/jobs-${r}.yaml" >>"${work}/runs.txt" <<'PY'
import statistics, subprocess, sys, threading, time
ns, jobs, per_job, jobs_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
admitted, pods, done = {}, {}, {}
lock = threading.Lock()
cond = threading.Condition(lock)

def watch(args, handle):
    p = subprocess.Popen(["kubectl", "-n", ns, "get", "-w", "--no-headers", "-o"] + args,
                         stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        now = time.monotonic()
        with cond:
            handle(line.split(), now)
            cond.notify_all()
    return p

def on_workload(f, now):
    # owner job, Admitted status
    if len(f) == 2 and f[1] == "True" and f[0] not in admitted:
        admitted[f[0]] = now

def on_pod(f, now):
    if len(f) != 2:
        return
    job, pod = f
    pods.setdefault(job, set()).add(pod)
    if len(pods[job]) == per_job and job not in done:
        done[job] = now

procs = []
for args, handle in [
    (["jsonpath={.metadata.ownerReferences[0].name} {.status.conditions[?(@.type==\"Admitted\")].status}{\"\\n\"}", "workloads"], on_workload),
    (["jsonpath={.metadata.labels.kubetrain\\.io/job-name} {.metadata.name}{\"\\n\"}", "pods"], on_pod),
]:
    t = threading.Thread(target=lambda a=args, h=handle: procs.append(watch(a, h)), daemon=True)
    t.start()
time.sleep(2)  # let both watches list (empty) and start watching
subprocess.run(["kubectl", "apply", "-f", jobs_file], check=True, stdout=subprocess.DEVNULL)
deadline = time.monotonic() + 600
with cond:
    while len(done) < jobs or len(admitted) < jobs:
        if not cond.wait(timeout=max(0.0, deadline - time.monotonic())):
            sys.exit(f"timed out: {len(admitted)} admitted, {len(done)} with all pods")
for p in procs:
    p.terminate()
lat = sorted(done[j] - admitted[j] for j in done)
p99 = lat[min(len(lat) - 1, int(round(0.99 * (len(lat) - 1))))]
print(f"{statistics.median(lat):.3f} {p99:.3f}")
PY
  read -r med p99 < <(tail -n 1 "${work}/runs.txt")
  echo "run ${r}: ${jobs} jobs, admission to all pods created: median ${med} s, p99 ${p99} s" >&2
  # The next run starts on an idle operator: this run's jobs are gone first.
  kubectl delete namespace "${ns}" --timeout=600s >/dev/null
done
python3 - "${work}/runs.txt" "${jobs}" "${runs}" <<'PY'
import statistics, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1]) if l.strip()]
med = statistics.median(r[0] for r in rows)
p99 = statistics.median(r[1] for r in rows)
print(f"Workload admitted -> all pods created, {sys.argv[2]} queued jobs x 3 pods, "
      f"median of {sys.argv[3]} runs: median {med:.3f} s, p99 {p99:.3f} s")
PY

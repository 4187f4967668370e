# Shared helpers for the bench/controller scripts (sourced, not run).
# Each script keeps its own trap and stops only the processes it started.

# A free TCP port on 127.0.0.1.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# CPU seconds (user + system) a live process has used so far.
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }
# Resident set now and at its peak (VmRSS, VmHWM), in MiB.
rss_mib() { awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
hwm_mib() { awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
now() { date +%s.%N; }
# Median of the numbers on stdin, one a line.
median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) exit 1; print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# wait_ready PID HEALTH_PORT LOG [SECONDS=120]: polls /readyz until it answers
# 200; fails (printing the log's tail) when the process exits or time runs out.
wait_ready() {
  local pid="$1" port="$2" log="$3" deadline=$((SECONDS + ${4:-120}))
  until curl -sf "127.0.0.1:${port}/readyz" >/dev/null 2>&1; do
    kill -0 "${pid}" 2>/dev/null || { echo "operator exited:" >&2; tail -n 20 "${log}" >&2; return 1; }
    ((SECONDS < deadline)) || { echo "operator not ready in ${4:-120} s" >&2; tail -n 20 "${log}" >&2; return 1; }
    sleep 0.2
  done
}

# metric PORT NAME: the sum of every series of NAME on the operator's /metrics.
metric() {
  curl -sf "127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n || index($1, n "{") == 1 {s += $2} END {printf "%g\n", s}'
}

# bench_jobs N trainingjob|tfjob [SPEC_LINE]: N jobs bench-0.. in namespace
# bench, each 1 PS + 4 workers on the kwok nodes, as one YAML stream; a
# TrainingJob gets SPEC_LINE (e.g. "serviceMode: PerReplica") in its spec.
bench_jobs() {
  local n="$1" kind="$2" extra="${3:-}" i
  for ((i = 0; i < n; i++)); do
    if [[ "${kind}" == tfjob ]]; then
      printf 'apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: bench-%s, namespace: bench}\nspec:\n  tfReplicaSpecs:\n' "${i}"
    else
      printf 'apiVersion: kubetrain.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: bench-%s, namespace: bench}\nspec:\n' "${i}"
      [[ -z "${extra}" ]] || printf '  %s\n' "${extra}"
      printf '  replicaSpecs:\n'
    fi
    cat <<JOB
    PS:
      replicas: 1
      template: &t
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: $([[ "${kind}" == tfjob ]] && echo tensorflow || echo trainer), image: kubetrain-trainer}]
    Worker:
      replicas: 4
      template: *t
---
JOB
  done
}

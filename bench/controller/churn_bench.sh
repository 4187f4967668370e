#!/usr/bin/env bash
# Restart latency under churn (issue 16): on a cluster of running
# TrainingJobs, once the operator has reconciled every job after its start,
# delete one pod of a different job (round robin over the first
# CHURN_JOBS jobs), RATE a second for SECONDS_ s, then wait until every pod is
# back, and read the operator's own histogram kubetrain_pod_restart_latency_seconds
# (pod seen deleted or failed -> create of its replacement returned). Prints
# p50 and p99 (interpolated in the histogram's buckets, as Prometheus'
# histogram_quantile does) per contender and run, then the medians, last.
#
# Usage: BENCH_CLUSTER=DIR bench/controller/churn_bench.sh OPERATOR_BINARY
#          [CHURN_JOBS=500] [RATE=10] [SECONDS_=60] [RUNS=3]
# BENCH_CLUSTER is a control plane made by memory_bench.sh (its bench
# namespace holds jobs bench-0.. of 1 PS + 4 workers, every pod Running).
# BENCH_CONTENDERS / BIN_<label> / FLAGS_<label> as in memory_bench.sh. The
# operator runs with --qps 500 --burst 1000 --workers 8 --progress-qps 0.
# Bench only, not in CI. Stops only the processes it started.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
# shellcheck source=lib.sh
source "${here}/lib.sh"
operator="$(realpath "${1:?usage: churn_bench.sh OPERATOR_BINARY [CHURN_JOBS] [RATE] [SECONDS] [RUNS]}")"
churn_jobs="${2:-500}"
rate="${3:-10}"
duration="${4:-60}"
runs="${5:-3}"
read -r -a contenders <<<"${BENCH_CONTENDERS:-kubetrain}"
: "${BENCH_CLUSTER:?BENCH_CLUSTER=DIR: a cluster populated by memory_bench.sh}"
export KUBECONFIG="${BENCH_CLUSTER}/kubeconfig"
export PATH="$("${root}/tests/cluster/build"):${PATH}"

op_pid="" work=""
stop_op() {
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null || true; fi
  op_pid=""
}
cleanup() {
  stop_op
  if [[ -n "${work}" ]]; then rm -rf "${work}"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-churn.XXXXXX")"

pods_total() {
  kubectl get --raw "/api/v1/namespaces/bench/pods?limit=1" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["items"]) + d["metadata"].get("remainingItemCount", 0))'
}
want=$(pods_total)
quantiles() {  # quantiles METRICS_PORT: "p50 p99 count" in seconds
  curl -sf "127.0.0.1:$1/metrics" | python3 -c '
import sys
b = []
for line in sys.stdin:
    if line.startswith("kubetrain_pod_restart_latency_seconds_bucket{le="):
        le = line.split("\"")[1]
        b.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
b.sort()
n = b[-1][1] if b else 0
def q(p):
    if n == 0: return float("nan")
    rank, prev_le, prev_c = p * n, 0.0, 0.0
    for le, c in b:
        if c >= rank:
            if le == float("inf"): return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-9)
        prev_le, prev_c = le, c
    return prev_le
print("%.3f %.3f %d" % (q(0.5), q(0.99), n))'
}

results="${work}/results"
: >"${results}"
for ((r = 1; r <= runs; r++)); do
  order=("${contenders[@]}")
  if ((r % 2 == 0)); then
    order=(); for ((c = ${#contenders[@]} - 1; c >= 0; c--)); do order+=("${contenders[c]}"); done
  fi
  for label in "${order[@]}"; do
    bin_var="BIN_${label}" flags_var="FLAGS_${label}"
    read -r -a extra <<<"${!flags_var:-}"
    health="$(free_port)" metrics="$(free_port)" log="${work}/op-${label}-${r}.log"
    "${!bin_var:-${operator}}" --qps 500 --burst 1000 --workers 8 --progress-qps 0 "${extra[@]}" \
      --metrics-addr "127.0.0.1:${metrics}" --health-addr "127.0.0.1:${health}" >"${log}" 2>&1 &
    op_pid=$!
    wait_ready "${op_pid}" "${health}" "${log}" 300
    # Steady state: the start-up reconcile of every job is done (queue empty 3 s).
    quiet=0
    while ((quiet < 3)); do
      if [[ "$(metric "${metrics}" kubetrain_workqueue_depth)" == 0 ]]; then quiet=$((quiet + 1)); else quiet=0; fi
      sleep 1
    done
    base=$(metric "${metrics}" kubetrain_pod_restart_latency_seconds_count)
    # Churn: every second one kubectl deletes `rate` pods, each of the next job
    # (round robin over churn_jobs jobs), roles in turn.
    start=$(now) n=0
    for ((sec = 0; sec < duration; sec++)); do
      batch=()
      for ((k = 0; k < rate; k++, n++)); do
        job=$(((n + r * 7) % churn_jobs)) replica=$((n / churn_jobs % 5))
        if ((replica == 0)); then batch+=("bench-${job}-ps-0"); else batch+=("bench-${job}-worker-$((replica - 1))"); fi
      done
      kubectl delete pod -n bench --wait=false --ignore-not-found "${batch[@]}" >/dev/null
      delay=$(echo "${start} + ${sec} + 1 - $(now)" | bc -l)
      if (($(echo "${delay} > 0" | bc -l))); then sleep "${delay}"; fi
    done
    # Until every pod is back and the histogram stops moving.
    deadline=$((SECONDS + 300)) last=-1 still=0
    while ((still < 3)); do
      ((SECONDS < deadline)) || { echo "run ${r} ${label}: pods not all back in 300 s" >&2; break; }
      sleep 1
      (($(pods_total) >= want)) || { still=0; continue; }
      c=$(metric "${metrics}" kubetrain_pod_restart_latency_seconds_count)
      if [[ "${c}" == "${last}" ]]; then still=$((still + 1)); else still=0 last="${c}"; fi
    done
    read -r p50 p99 count < <(quantiles "${metrics}")
    ((base == 0)) || echo "run ${r} ${label}: ${base} restarts before the churn are in the figures" >&2
    stop_op
    echo "${label} ${p50} ${p99} ${count}" >>"${results}"
    echo "run ${r} ${label}: ${count} replacements of ${n} deletes over ${duration} s across ${churn_jobs} jobs: p50 ${p50} s, p99 ${p99} s"
  done
done

echo
echo "restart latency (pod seen gone -> replacement created), ${rate} deletes/s for ${duration} s across ${churn_jobs} jobs, medians of ${runs} runs:"
echo "| | p50 (s) | p99 (s) |"
echo "|---|---|---|"
for label in "${contenders[@]}"; do
  col() { awk -v l="${label}" -v c="$1" '$1 == l {print $c}' "${results}" | median; }
  echo "| ${label} | $(col 2) | $(col 3) |"
done

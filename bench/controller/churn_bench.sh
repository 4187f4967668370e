#!/usr/bin/env bash
# Restart latency under churn: on a cluster of running
# TrainingJobs, once the operator has reconciled every job after its start,
# delete one pod of a different job (round robin over the first
# CHURN_JOBS jobs, the role turning with each delete: PS, worker 0..3, so a
# fifth of the deletes hit a PS), RATE a second for SECONDS_ s, then wait until
# the operator has replaced every pod kubectl deleted (its histogram grew by
# as many) and every pod is Running again, and read the operator's own
# histogram kubetrain_pod_restart_latency_seconds (pod seen deleted or failed
# -> create of its replacement returned) as it grew during this run. The pods
# are deleted at once (--grace-period=0 --force): kwok (v0.7) finishes a
# graceful delete by deleting the pod's *name* without a UID precondition,
# sometimes twice, so under load its late second delete removed the
# replacement the operator had made meanwhile, and that one's replacement in
# turn (seen: 1,169 replacements for 150 deletes with a fast operator, and
# 118-175 for 150 in the last session's runs). Prints
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

pods_count() {  # pods_count [FIELD_SELECTOR]: the pods in bench (matching it), with one-item pages
  local q="limit=1"
  [[ -n "${1:-}" ]] && q+="&fieldSelector=$1"
  kubectl get --raw "/api/v1/namespaces/bench/pods?${q}" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["items"]) + d["metadata"].get("remainingItemCount", 0))'
}
want=$(pods_count)
buckets() {  # buckets METRICS_PORT: the restart latency histogram's "le count" lines
  curl -sf "127.0.0.1:$1/metrics" |
    awk -F'"' '/^kubetrain_pod_restart_latency_seconds_bucket\{le=/ {split($3, v, " "); print $2, v[2]}'
}
quantiles() {  # quantiles NOW_FILE BASE_FILE: "p50 p99 count" in seconds, of NOW - BASE
  python3 - "$1" "$2" <<'PY'
import sys
def read(path):
    out = {}
    for line in open(path):
        le, c = line.split()
        out[float("inf") if le == "+Inf" else float(le)] = float(c)
    return out
now, base = read(sys.argv[1]), read(sys.argv[2])
b = sorted((le, c - base.get(le, 0.0)) for le, c in now.items())
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
print("%.3f %.3f %d" % (q(0.5), q(0.99), n))
PY
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
    buckets "${metrics}" >"${work}/base"
    # Churn: every second one kubectl deletes `rate` pods, each of the next job
    # (round robin over churn_jobs jobs), the role turning with each delete
    # (and shifted by one on every pass over the jobs, so a job's next delete
    # hits another role). Only the pods kubectl reports deleted are counted.
    start=$(now) n=0 deleted=0
    for ((sec = 0; sec < duration; sec++)); do
      batch=()
      for ((k = 0; k < rate; k++, n++)); do
        job=$(((n + r * 7) % churn_jobs)) replica=$(((n + n / churn_jobs) % 5))
        if ((replica == 0)); then batch+=("bench-${job}-ps-0"); else batch+=("bench-${job}-worker-$((replica - 1))"); fi
      done
      gone=$(kubectl delete pod -n bench --grace-period=0 --force --wait=false --ignore-not-found "${batch[@]}" 2>/dev/null |
        grep -c ' deleted' || true)
      deleted=$((deleted + gone))
      delay=$(echo "${start} + ${sec} + 1 - $(now)" | bc -l)
      if (($(echo "${delay} > 0" | bc -l))); then sleep "${delay}"; fi
    done
    # Until the operator has seen every deleted pod go and created its
    # replacement (one observation each), and every pod is Running again, so
    # the next run starts from the same cluster.
    deadline=$((SECONDS + 300))
    while :; do
      c=$(metric "${metrics}" kubetrain_pod_restart_latency_seconds_count)
      if (($(printf '%.0f' "${c}") - base >= deleted)) && (($(pods_count) >= want)) &&
        (($(pods_count "status.phase%21%3DRunning") == 0)); then break; fi
      ((SECONDS < deadline)) || { echo "run ${r} ${label}: $((${c%.*} - base)) of ${deleted} deleted pods replaced, or not all Running, in 300 s" >&2; break; }
      sleep 1
    done
    buckets "${metrics}" >"${work}/now"
    read -r p50 p99 count < <(quantiles "${work}/now" "${work}/base")
    ((base == 0)) || echo "run ${r} ${label}: ${base} restarts before the churn (not in the figures)" >&2
    stop_op
    echo "${label} ${p50} ${p99} ${count}" >>"${results}"
    echo "run ${r} ${label}: ${count} replacements of ${deleted} pods deleted (${n} asked) over ${duration} s across ${churn_jobs} jobs: p50 ${p50} s, p99 ${p99} s"
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

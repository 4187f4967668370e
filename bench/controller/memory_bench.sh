#!/usr/bin/env bash
# Operator memory with a full cluster: JOBS TrainingJobs of 1 PS +
# 4 workers (default 2,000 jobs, 10,000 pods) on one tests/cluster control
# plane with a kwok node per 100 pods. The pods are made by the operator
# itself: the first contender runs until every pod is Running, then stops.
# Then each contender is started RUNS times on that same, quiet cluster
# (alternating, the order flipping every run) and measured:
#   - after the initial list: VmRSS when /readyz first answers (caches synced);
#   - steady state: VmRSS once the work queue has stayed empty for 10 s and
#     at least 20 s have passed (every job reconciled once), with VmHWM (peak)
#     and CPU seconds since start.
# Prints every run, then the medians, last.
#
# Usage: bench/controller/memory_bench.sh OPERATOR_BINARY [JOBS=2000] [RUNS=3]
# Environment: BENCH_CONTENDERS="kubetrain" (labels; BIN_<label> is the
# binary, default OPERATOR_BINARY; FLAGS_<label> extra flags), e.g.
#   BENCH_CONTENDERS="before after" BIN_before=/tmp/op-main BIN_after=build/...
# Operator flags: --qps 500 --burst 1000 --workers 8 --progress-qps 0 (kwok
# pod IPs serve no metrics). BENCH_CLUSTER=DIR keeps the populated control
# plane in DIR (and reuses it when DIR/kubeconfig exists): stop it with
# tests/cluster/down DIR. Bench only, not in CI. Stops only what it started.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
# shellcheck source=lib.sh
source "${here}/lib.sh"
operator="$(realpath "${1:?usage: memory_bench.sh OPERATOR_BINARY [JOBS] [RUNS]}")"
jobs="${2:-2000}"
runs="${3:-3}"
read -r -a contenders <<<"${BENCH_CONTENDERS:-kubetrain}"
pods=$((jobs * 5))
nodes=$(((pods + 99) / 100))
source "${root}/tests/tools/testlib.sh"
export PATH="$("${root}/tests/cluster/build"):${PATH}"

dir="" op_pid="" work=""
stop_op() {
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null || true; fi
  op_pid=""
}
cleanup() {
  stop_op
  if [[ -n "${dir}" && -z "${BENCH_CLUSTER:-}" ]]; then "${root}/tests/cluster/down" "${dir}"; fi
  if [[ -n "${work}" ]]; then rm -rf "${work}"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-memory.XXXXXX")"

start_op() {  # start_op LABEL LOG: sets op_pid, health, metrics
  local label="$1" bin_var="BIN_$1" flags_var="FLAGS_$1"
  local -a extra; read -r -a extra <<<"${!flags_var:-}"
  health="$(free_port)" metrics="$(free_port)"
  "${!bin_var:-${operator}}" --qps 500 --burst 1000 --workers 8 --progress-qps 0 "${extra[@]}" \
    --metrics-addr "127.0.0.1:${metrics}" --health-addr "127.0.0.1:${health}" >"$2" 2>&1 &
  op_pid=$!
}

# Counted with one-item pages: listing 10,000 pods through kubectl takes a minute.
count_pods() {  # count_pods [FIELD_SELECTOR]: the pods in bench (matching it)
  local q="limit=1"
  [[ -n "${1:-}" ]] && q+="&fieldSelector=$1"
  kubectl get --raw "/api/v1/namespaces/bench/pods?${q}" |
    python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["items"]) + d["metadata"].get("remainingItemCount", 0))'
}

dir="${BENCH_CLUSTER:-${work}/cluster}"
if [[ -n "${BENCH_CLUSTER:-}" && -s "${dir}/kubeconfig" ]]; then
  export KUBECONFIG="${dir}/kubeconfig"
  echo "reusing ${dir}"
else
KUBETRAIN_TEST_NODES="${nodes}" KUBETRAIN_CLUSTER_TIMEOUT=300 "${root}/tests/cluster/up" "${dir}" >/dev/null
export KUBECONFIG="${dir}/kubeconfig"
kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" >/dev/null
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
kubectl create namespace bench >/dev/null
wait_for_namespace bench
bench_jobs "${jobs}" trainingjob >"${work}/jobs.yaml"

t0=${SECONDS}
start_op "${contenders[0]}" "${work}/populate.log"
wait_ready "${op_pid}" "${health}" "${work}/populate.log"
kubectl create -f "${work}/jobs.yaml" >/dev/null
deadline=$((SECONDS + ${KUBETRAIN_BENCH_TIMEOUT:-2400}))
while :; do
  total=$(count_pods)
  # A field selector gives no remaining count: only whether any pod is not Running.
  if ((total >= pods)) && (($(count_pods "status.phase%21%3DRunning") == 0)); then break; fi
  ((SECONDS < deadline)) || { echo "only ${total}/${pods} pods made or not all Running" >&2; exit 1; }
  sleep 5
done
# Until the queue is empty: the jobs' Running status is written too.
quiet=0
while ((quiet < 5)); do
  if [[ "$(metric "${metrics}" kubetrain_workqueue_depth)" == 0 ]]; then quiet=$((quiet + 1)); else quiet=0; fi
  sleep 1
done
stop_op
echo "populated: ${jobs} jobs, ${pods} pods Running on ${nodes} kwok nodes, made by ${contenders[0]} in $((SECONDS - t0)) s"
fi
echo "objects: $(count_pods) pods in namespace bench"

results="${work}/results"
: >"${results}"
for ((r = 1; r <= runs; r++)); do
  order=("${contenders[@]}")
  if ((r % 2 == 0)); then
    order=(); for ((c = ${#contenders[@]} - 1; c >= 0; c--)); do order+=("${contenders[c]}"); done
  fi
  for label in "${order[@]}"; do
    log="${work}/op-${label}-${r}.log"
    start=${SECONDS}
    start_op "${label}" "${log}"
    wait_ready "${op_pid}" "${health}" "${log}" 300
    listed=$(rss_mib "${op_pid}") listed_hwm=$(hwm_mib "${op_pid}") sync_s=$((SECONDS - start))
    quiet=0
    while ((quiet < 10 || SECONDS - start < 20)); do
      if [[ "$(metric "${metrics}" kubetrain_workqueue_depth)" == 0 ]]; then quiet=$((quiet + 1)); else quiet=0; fi
      sleep 1
    done
    steady=$(rss_mib "${op_pid}") hwm=$(hwm_mib "${op_pid}") cpu=$(cpu_s "${op_pid}")
    stop_op
    echo "${label} ${listed} ${listed_hwm} ${steady} ${hwm} ${cpu}" >>"${results}"
    echo "run ${r} ${label}: synced in ${sync_s} s, RSS after the initial list ${listed} MiB (peak ${listed_hwm}), steady ${steady} MiB, peak ${hwm} MiB, ${cpu} CPU s"
  done
done

echo
echo "${jobs} jobs, ${pods} pods, medians of ${runs} runs (MiB; CPU s from start to steady):"
echo "| | RSS after initial list | steady RSS | peak RSS | CPU s |"
echo "|---|---|---|---|---|"
for label in "${contenders[@]}"; do
  col() { awk -v l="${label}" -v c="$1" '$1 == l {print $c}' "${results}" | median; }
  echo "| ${label} | $(col 2) | $(col 4) | $(col 5) | $(col 6) |"
done

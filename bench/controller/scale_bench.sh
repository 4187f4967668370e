#!/usr/bin/env bash
# Operator at scale on kwok: JOBS TrainingJobs of 1 PS + 4 workers, created at
# once; measures the time from the last create to every pod Running, pods/s,
# API writes per job (from the operator's /metrics), operator CPU seconds and
# peak RSS. Runs RUNS times, each on a fresh control plane, and prints the
# medians last.
# Usage: bench/controller/scale_bench.sh OPERATOR_BINARY [JOBS=500] [RUNS=3]
# Operator flags: --qps 500 --burst 1000 --workers 8 (the scheduler's own client
# limit applies to binding as on any cluster).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib.sh
source "${root}/bench/controller/lib.sh"
operator="${1:?usage: scale_bench.sh OPERATOR_BINARY [JOBS] [RUNS]}"
jobs="${2:-500}"
runs="${3:-3}"
source "${root}/tests/tools/testlib.sh"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
pods=$((jobs * 5))
dir="" op_pid=""
stop() {
  [[ -n "${op_pid}" ]] && { kill "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null || true; }
  [[ -n "${dir}" ]] && "${root}/tests/cluster/down" "${dir}"
  op_pid="" dir=""
}
trap stop EXIT

manifest="$(mktemp)"
bench_jobs "${jobs}" trainingjob >"${manifest}"

r_time=() r_created=() r_rate=() r_writes=() r_cpu=() r_rss=()
tick=$(getconf CLK_TCK)
for ((r = 1; r <= runs; r++)); do
  dir="$(mktemp -d)"
  KUBETRAIN_TEST_NODES=10 "${root}/tests/cluster/up" "${dir}" >/dev/null
  export KUBECONFIG="${dir}/kubeconfig"
  kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" >/dev/null
  "${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
  kubectl create namespace bench >/dev/null
  wait_for_namespace bench
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "${operator}" --qps 500 --burst 1000 --workers 8 --metrics-addr "127.0.0.1:${port}" \
    --health-addr 127.0.0.1:0 --log-level warn >"${dir}/operator.log" 2>&1 &
  op_pid=$!
  until curl -sf "127.0.0.1:${port}/metrics" >/dev/null; do sleep 0.2; done
  kubectl create -f "${manifest}" >/dev/null
  start=$(date +%s.%N)
  deadline=$((SECONDS + 1200))
  created_t=""
  while :; do
    if [[ -z "${created_t}" ]] && (($(kubectl get pods -n bench --no-headers 2>/dev/null | wc -l) >= pods)); then
      created_t=$(echo "$(date +%s.%N) - ${start}" | bc -l)  # the operator's part
    fi
    running=$(kubectl get pods -n bench --field-selector=status.phase=Running --no-headers 2>/dev/null | wc -l)
    ((running >= pods)) && break
    ((SECONDS < deadline)) || { echo "run ${r}: only ${running}/${pods} pods Running after 1200 s" >&2; exit 1; }
    sleep 0.5
  done
  end=$(date +%s.%N)
  t=$(echo "${end} - ${start}" | bc -l)
  writes=$(curl -s "127.0.0.1:${port}/metrics" | awk '/^kubetrain_api_requests_total/ {s+=$2} END {print s}')
  read -r utime stime < <(awk '{print $14, $15}' "/proc/${op_pid}/stat")
  cpu=$(echo "(${utime} + ${stime}) / ${tick}" | bc -l)
  rss=$(awk '/VmHWM/ {print $2}' "/proc/${op_pid}/status")
  stop
  [[ -n "${created_t}" ]] || created_t="${t}"
  r_time+=("${t}"); r_created+=("${created_t}"); r_rate+=("$(echo "${pods} / ${t}" | bc -l)")
  r_writes+=("$(echo "${writes} / ${jobs}" | bc -l)"); r_cpu+=("${cpu}"); r_rss+=("$((rss / 1024))")
  printf 'run %d: %.1f s to all pods created, %.1f s to %d pods Running (%.1f pods/s), %.1f API writes/job, operator %.2f CPU s, peak RSS %d MiB\n' \
    "${r}" "${created_t}" "${t}" "${pods}" "${r_rate[-1]}" "${r_writes[-1]}" "${cpu}" "${r_rss[-1]}"
done
rm -f "${manifest}"
printf 'medians over %d runs of %d jobs (1 PS + 4 workers): %.1f s from last create to all pods created, %.1f s to all %d pods Running, %.1f pods/s, %.1f API writes per job, %.2f operator CPU s, %d MiB operator peak RSS\n' \
  "${runs}" "${jobs}" "$(printf '%s\n' "${r_created[@]}" | median)" "$(printf '%s\n' "${r_time[@]}" | median)" "${pods}" \
  "$(printf '%s\n' "${r_rate[@]}" | median)" "$(printf '%s\n' "${r_writes[@]}" | median)" \
  "$(printf '%s\n' "${r_cpu[@]}" | median)" "$(printf '%s\n' "${r_rss[@]}" | median)"

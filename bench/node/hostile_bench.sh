#!/usr/bin/env bash
# The operator beside a hostile tenant, on the real node.
# Two phases, one operator (installed as users do, kustomize base):
#   quiet    a good Wide & Deep job (2 PS + 2 workers) alone in its namespace
#   hostile  the same good job, and in another namespace a hostile job whose
#            worker-0 answers the operator's progress reads with endless headers
#            or one byte every 1.5 s, and whose worker-1 holds 1,000 dripping
#            connections to the operator's /healthz port
# Each phase prints: the operator's peak RSS (VmHWM of its process, so the hostile
# figure includes the quiet peak), /healthz p50/p99 from the host every 100 ms,
# the good job's largest status.progress age while it ran (polled every second;
# the operator reads every 15 s), and seconds from apply to Succeeded.
# Usage: bench/node/hostile_bench.sh BUILD_DIR
# Starts its own real-node cluster (KUBETRAIN_REAL_NODE=1 tests/cluster/up) and
# stops it at the end; with KUBETRAIN_TEST_NODE_DIR set it uses that cluster.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
build="$(cd "${1:?usage: hostile_bench.sh BUILD_DIR}" && pwd)"
hostile_bin="${build}/bench/node/hostile_pod"
[[ -x "${hostile_bin}" ]] || { echo "build ${hostile_bin} first (cmake --build --preset release)" >&2; exit 1; }
if [[ -n "${KUBETRAIN_TEST_NODE_DIR:-}" ]]; then
  cluster="${KUBETRAIN_TEST_NODE_DIR}"
  stop_cluster=0
else
  cluster="$(mktemp -d /tmp/kt-hostile-bench.XXXXXX)"
  KUBETRAIN_REAL_NODE=1 KUBETRAIN_BUILD_DIR="${build}" "${root}/tests/cluster/up" "${cluster}" >/dev/null || exit 1
  stop_cluster=1
fi
export KUBECONFIG="${cluster}/kubeconfig" KUBETRAIN_TEST_NODE_DIR="${cluster}"
# shellcheck source=../../tests/node/lib.sh
source "${root}/tests/node/lib.sh"
trap 'node_cleanup; ((stop_cluster)) && "${root}/tests/cluster/down" "${cluster}"' EXIT
ensure_operator || exit 1

now() { date +%s.%N; }
percentile() {  # percentile P < values
  sort -g | awk -v p="$1" '{a[NR]=$1} END {if (!NR) {print "n/a"; exit} i=int(p*NR+0.999999); if (i<1) i=1; if (i>NR) i=NR; print a[i]}'
}
yaml_list() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@"; }

op_pod="$(kubectl -n kubetrain-system get pods -l app.kubernetes.io/name=kubetrain-operator -o jsonpath='{.items[0].metadata.name}')"
op_ip="$(kubectl -n kubetrain-system get pod "${op_pod}" -o jsonpath='{.status.podIP}')"
op_cid="$(kubectl -n kubetrain-system get pod "${op_pod}" -o jsonpath='{.status.containerStatuses[0].containerID}')"
op_pid="$(ctr_ task ls | awk -v id="${op_cid#containerd://}" '$1 == id {print $2}')"
[[ -n "${op_pid}" && -r "/proc/${op_pid}/status" ]] || { echo "cannot find the operator's process" >&2; exit 1; }
peak_rss_mib() { awk '/^VmHWM/ {printf "%.1f\n", $2 / 1024}' "/proc/${op_pid}/status"; }
echo "operator ${op_pod} at ${op_ip}, host pid ${op_pid}, peak RSS before the first job $(peak_rss_mib) MiB"

args='--model=wide_deep --layers=256,128 --data-dir=/tmp/data --generate-data=100000 --steps=3000 --batch-size=256 --threads=1 --log-every=20'
# shellcheck disable=SC2086
yaml_args="args: $(yaml_list ${args})"

# healthz_probe FILE: /healthz latency in seconds every 100 ms until killed.
healthz_probe() {
  while :; do
    curl -s -o /dev/null -m 5 -w '%{time_total} %{http_code}\n' "http://${op_ip}:8081/healthz" >>"$1"
    sleep 0.1
  done
}

# good_job PHASE: runs the good job to Succeeded; prints "seconds max_progress_age".
good_job() {
  local phase="$1" name t0 t_done max_age=0 age upd state
  restricted_ns "good-${phase}"
  name=wd
  t0="$(now)"
  trainer_job "${name}" "${yaml_args}"
  while :; do
    state="$(job_state "${name}")"
    [[ "${state}" == Succeeded || "${state}" == Failed ]] && break
    upd="$(k get tj "${name}" -o jsonpath='{.status.progress.updateTime}' 2>/dev/null)"
    if [[ -n "${upd}" && "${state}" == Running ]]; then
      age="$(echo "$(now) - $(date -d "${upd}" +%s.%N)" | bc)"
      if (($(echo "${age} > ${max_age}" | bc))); then max_age="${age}"; fi
    fi
    if (($(echo "$(now) - ${t0} > 900" | bc))); then state=Timeout; break; fi
    sleep 1
  done
  t_done="$(now)"
  [[ "${state}" == Succeeded ]] || echo "good job in ${phase}: ${state}" >&2
  printf '%.1f %.1f\n' "$(echo "${t_done} - ${t0}" | bc)" "${max_age}"
}

report() {  # report PHASE PROBE_FILE "SECONDS AGE"
  local p50 p99 errors
  p50="$(awk '$2 == 200 {print $1 * 1000}' "$2" | percentile 0.50)"
  p99="$(awk '$2 == 200 {print $1 * 1000}' "$2" | percentile 0.99)"
  errors="$(awk '$2 != 200' "$2" | wc -l)"
  read -r secs age <<<"$3"
  printf '%-8s peak RSS %6s MiB | /healthz p50 %6s ms p99 %6s ms (%d probes, %d not 200) | good job: progress age max %5s s, Succeeded after %6s s\n' \
    "$1" "$(peak_rss_mib)" "${p50}" "${p99}" "$(wc -l <"$2")" "${errors}" "${age}" "${secs}"
}

# phase NAME: the good job with /healthz probed beside it; its report line in ${work}/NAME.line.
phase() {
  local probe
  healthz_probe "${work}/$1" &
  probe=$!
  bg_pids+=("${probe}")
  good_job "$1" >"${work}/$1.result"
  kill "${probe}"
  report "$1" "${work}/$1" "$(cat "${work}/$1.result")" >"${work}/$1.line"
}

# Phase 1: quiet.
phase quiet

# Phase 2: the hostile job first, then the good job beside it.
hns="hostile-$(openssl rand -hex 3)"
namespaces+=("${hns}")
kubectl create namespace "${hns}" >/dev/null
wait_until "the default service account in ${hns}" kubectl -n "${hns}" get sa default
script="case \"\${POD_NAME}\" in worker-0) exec /h/hostile_pod serve 9090 ;; *) exec /h/hostile_pod flood ${op_ip} 8081 1000 ;; esac"
cat <<JOB | kubectl -n "${hns}" apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: hostile}
spec:
  runPolicy: {activeDeadlineSeconds: 1200}
  replicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          nodeSelector: {type: real}
          volumes: [{name: h, hostPath: {path: "$(dirname "${hostile_bin}")", type: Directory}}]
          containers:
            - name: trainer
              image: ${KUBETRAIN_DEBIAN_IMAGE}
              command: [sh, -c, $(printf '%s' "${script}" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')]
              volumeMounts: [{name: h, mountPath: /h, readOnly: true}]
JOB
wait_until "the hostile job's 2 pods running" bash -c \
  "[[ \$(kubectl -n ${hns} get pods --field-selector=status.phase=Running -o name | wc -l) == 2 ]]"
phase hostile
kubectl -n "${hns}" logs hostile-worker-1 --tail 2 2>/dev/null | sed 's/^/  flood: /'
# What the operator's reader made of the hostile target (its /metrics, port 8080).
curl -s -m 5 "http://${op_ip}:8080/metrics" | grep -E '^kubetrain_progress_(reads_total|updates_total|targets)' | sed 's/^/  operator: /'
state="$(kubectl -n "${hns}" get tj hostile -o jsonpath='{.status.state}')"
echo "  hostile job still ${state}; operator restarts: $(kubectl -n kubetrain-system get pod "${op_pod}" -o jsonpath='{.status.containerStatuses[0].restartCount}')"
cat "${work}/quiet.line" "${work}/hostile.line"

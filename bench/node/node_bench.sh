#!/usr/bin/env bash
# Real-node figures: seconds from `kubectl apply` of a Wide & Deep TrainingJob
# (2 PS + 2 workers) to its first training step and to Succeeded; and trainer
# samples/s in a pod against the same binary on the host, same flags and
# threads, alternating the two, medians over ROUNDS.
# Usage: bench/node/node_bench.sh BUILD_DIR [ROUNDS]
# Starts its own real-node cluster (KUBETRAIN_REAL_NODE=1 tests/cluster/up) and
# stops it at the end (only the processes that cluster started); with
# KUBETRAIN_TEST_NODE_DIR set it uses that running cluster instead.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
build="$(cd "${1:?usage: node_bench.sh BUILD_DIR [ROUNDS]}" && pwd)"
rounds="${2:-3}"
if [[ -n "${KUBETRAIN_TEST_NODE_DIR:-}" ]]; then
  cluster="${KUBETRAIN_TEST_NODE_DIR}"
  stop_cluster=0
else
  cluster="$(mktemp -d /tmp/kt-node-bench.XXXXXX)"
  KUBETRAIN_REAL_NODE=1 KUBETRAIN_BUILD_DIR="${build}" "${root}/tests/cluster/up" "${cluster}" >/dev/null || exit 1
  stop_cluster=1
fi
export KUBECONFIG="${cluster}/kubeconfig" KUBETRAIN_TEST_NODE_DIR="${cluster}"
# shellcheck source=../../tests/node/lib.sh
source "${root}/tests/node/lib.sh"
trap 'node_cleanup; ((stop_cluster)) && "${root}/tests/cluster/down" "${cluster}"' EXIT
ensure_operator || exit 1
restricted_ns bench

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }
iso_to_s() { date -d "$1" +%s.%N; }

# yaml_list WORDS...: a YAML flow list of quoted strings.
yaml_list() { python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@"; }
args='--model=wide_deep --layers=256,128 --data-dir=/tmp/data --generate-data=100000 --steps=400 --batch-size=256 --threads=1 --log-every=20'
# shellcheck disable=SC2086
yaml_args="args: $(yaml_list ${args})"
for ((r = 0; r < rounds; r++)); do
  name="wd-${r}"
  t0="$(now)"
  trainer_job "${name}" "${yaml_args}"
  WAIT_SECONDS=600 wait_state "${name}" Succeeded
  t_done="$(now)"
  first="$(k logs --timestamps "${name}-worker-0" | grep -m1 ' step [0-9]' | cut -d' ' -f1)"
  echo "$(echo "$(iso_to_s "${first}") - ${t0}" | bc)" >>"${work}/first"
  echo "$(echo "${t_done} - ${t0}" | bc)" >>"${work}/done"
  k delete tj "${name}" --wait=false >/dev/null
done

# One process, in a pod and on the host, alternating.
host_cg=""
for h in /sys/fs/cgroup/cpu /sys/fs/cgroup; do
  if [[ -f "${h}/cgroup.procs" && -w "${h}" ]] && mkdir -p "${h}/kubetrain-bench-host" 2>/dev/null; then
    host_cg="${h}/kubetrain-bench-host"
    break
  fi
done
[[ -n "${host_cg}" ]] || echo "note: no CPU cgroup for the host run; on a busy machine the pod is at a disadvantage" >&2
single='--model=wide_deep --layers=256,128 --data-dir=/tmp/data --generate-data=100000 --steps=300 --batch-size=256 --threads=1 --no-eval'
for ((r = 0; r < rounds; r++)); do
  cat <<POD | k apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: single-${r}}
spec:
  restartPolicy: Never
  nodeSelector: {type: real}
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  volumes: [{name: tmp, emptyDir: {}}]
  containers:
    - name: trainer
      image: ${KUBETRAIN_TRAINER_IMAGE}
      args: $(yaml_list ${single})
      # One CPU's worth of shares, like a process on the host (a BestEffort pod
      # gets almost none when the machine is busy).
      resources: {requests: {cpu: "1", memory: 512Mi}}
      volumeMounts: [{name: tmp, mountPath: /tmp}]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
POD
  pod_done() { [[ "$(k get pod "$1" -o jsonpath='{.status.phase}')" == Succeeded ]]; }
  wait_until "single-${r} to finish" pod_done "single-${r}"
  k get pod "single-${r}" -o jsonpath='{.status.containerStatuses[0].state.terminated.message}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["samples_per_second"])' >>"${work}/pod"
  rm -rf "${work}/hostdata"
  # The host run gets its own CPU cgroup beside the node's, so on a busy machine
  # both compete as one group each (the pod's group is the kubelet's cgroup root).
  # shellcheck disable=SC2086
  (
    [[ -n "${host_cg}" ]] && echo "${BASHPID}" >"${host_cg}/cgroup.procs"
    exec "${build}/trainer/kubetrain-trainer" ${single//\/tmp\/data/${work}/hostdata} \
      --termination-log "${work}/host.json" >/dev/null 2>&1
  )
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples_per_second"])' \
    "${work}/host.json" >>"${work}/host"
done

[[ -n "${host_cg}" ]] && rmdir "${host_cg}"
pod="$(median <"${work}/pod")"
host="$(median <"${work}/host")"
echo "rounds: ${rounds}"
echo "apply -> first training step (worker-0), median: $(median <"${work}/first") s"
echo "apply -> Succeeded (2 PS + 2 workers, 400 steps), median: $(median <"${work}/done") s"
echo "trainer in a pod: ${pod} samples/s; on the host: ${host} samples/s (medians, 1 thread)"
echo "pod/host throughput ratio: $(echo "scale=3; ${pod} / ${host}" | bc)"

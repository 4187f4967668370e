#!/usr/bin/env bash
# What the TrainingJob CRD's CEL rules cost the apiserver, to decide whether
# they are worth keeping:
# on one fresh control plane (tests/cluster/up, no operator), JOBS TrainingJobs
# of 1 PS + 4 workers are created with one `kubectl create`, once with the CRD
# as shipped and once with its x-kubernetes-validations removed, alternating
# ROUNDS times (each round in a fresh namespace, the CRD replaced before it).
# Further variants, e.g. a CRD with some rules rewritten, are given as
# LABEL=CRD_FILE arguments and join the rotation.
# Prints, per variant, the medians of the apiserver's CPU milliseconds per
# create and the wall time of the creates, last.
# Usage: bench/controller/cel_cost.sh [JOBS=300] [ROUNDS=3] [LABEL=CRD_FILE...]
# Bench only.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
jobs="${1:-300}"
rounds="${2:-3}"
shift $(($# < 2 ? $# : 2))
declare -A files
labels=(cel no-cel)
for arg in "$@"; do
  [[ "${arg}" == *=* && -f "${arg#*=}" ]] || { echo "cel_cost.sh: ${arg}: want LABEL=CRD_FILE" >&2; exit 2; }
  labels+=("${arg%%=*}")
  files[${arg%%=*}]="$(realpath "${arg#*=}")"
done
cluster_bin="$("${root}/tests/cluster/build")"  # fails the script if it cannot build
export PATH="${cluster_bin}:${PATH}"
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-cel.XXXXXX")"
dir="${work}/cluster"
cleanup() {
  if [[ -f "${dir}/pids" ]]; then "${root}/tests/cluster/down" "${dir}"; fi
  rm -rf "${work}"
}
trap cleanup EXIT
KUBETRAIN_TEST_NODES=1 "${root}/tests/cluster/up" "${dir}" >/dev/null
export KUBECONFIG="${dir}/kubeconfig"
api_pid=$(awk '$1 == "kube-apiserver" {print $2}' "${dir}/pids")
cpu_ms() { awk -v t="$(getconf CLK_TCK)" '{printf "%d", ($14 + $15) * 1000 / t}' "/proc/$1/stat"; }

crd="${root}/crds/trainingjobs.kubetrain.io.yaml"
python3 - "${crd}" "${work}/no-cel.yaml" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
def strip(node):
    if isinstance(node, dict):
        node.pop("x-kubernetes-validations", None)
        for v in node.values(): strip(v)
    elif isinstance(node, list):
        for v in node: strip(v)
strip(doc)
yaml.safe_dump(doc, open(sys.argv[2], "w"))
PY
files[cel]="${crd}"
files[no-cel]="${work}/no-cel.yaml"

for ((i = 0; i < jobs; i++)); do
  cat <<JOB
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: cel-${i}}
spec:
  replicaSpecs:
    PS:
      replicas: 1
      template: &t
        spec:
          containers: [{name: trainer, image: kubetrain-trainer}]
    Worker:
      replicas: 4
      template: *t
---
JOB
done >"${work}/jobs.yaml"

declare -A cpu wall
for ((r = 1; r <= rounds; r++)); do
  # Rotate the order each round so every variant takes each position.
  order=()
  for ((k = 0; k < ${#labels[@]}; k++)); do order+=("${labels[(k + r - 1) % ${#labels[@]}]}"); done
  for v in "${order[@]}"; do
    file="${files[${v}]}"
    kubectl replace -f "${file}" >/dev/null 2>&1 || kubectl create -f "${file}" >/dev/null
    "${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
    ns="cel-${v}-${r}"
    kubectl create namespace "${ns}" >/dev/null
    c0=$(cpu_ms "${api_pid}"); t0=$(date +%s.%N)
    kubectl create -n "${ns}" -f "${work}/jobs.yaml" >/dev/null
    c1=$(cpu_ms "${api_pid}"); t1=$(date +%s.%N)
    per=$(echo "(${c1} - ${c0}) / ${jobs}" | bc -l)
    w=$(echo "${t1} - ${t0}" | bc -l)
    printf 'round %d %-8s: %.1f apiserver CPU ms per create, %.1f s for %d creates\n' "${r}" "${v}" "${per}" "${w}" "${jobs}"
    cpu[${v}]+="${per} " wall[${v}]+="${w} "
    kubectl delete namespace "${ns}" --wait=false >/dev/null
  done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "medians of ${rounds} rounds, ${jobs} creates each:"
for v in "${labels[@]}"; do
  printf '  %-8s %.1f ms apiserver CPU per create (%.1f s)\n' "${v}" "$(median <<<"${cpu[${v}]}")" "$(median <<<"${wall[${v}]}")"
done

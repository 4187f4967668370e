#!/usr/bin/env bash
# Benchmark of `kubetrain convert` as a migration uses it: a GitOps directory of
# TFJobs converted in one call. Generates JOBS TFJobs of 1 PS + 4 workers (v1's
# defaults, like bench/controller's jobs) as one multi-document file, converts
# it RUNS times and prints the median wall time and TFJobs per second, last.
# Usage: bench/cli/convert_bench.sh <build dir> [jobs=1000] [runs=5]
set -euo pipefail
build=${1:?usage: convert_bench.sh <build dir> [jobs] [runs]}
jobs=${2:-1000}
runs=${3:-5}
kt=$build/operator/cli/kubetrain
[[ -x $kt ]] || { echo "build kubetrain first" >&2; exit 2; }
dir=$(mktemp -d /tmp/kubetrain-convert-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

for ((i = 0; i < jobs; i++)); do
  cat <<YAML
---
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job-$i, namespace: team-a, labels: {team: a}}
spec:
  runPolicy: {backoffLimit: 3}
  tfReplicaSpecs:
    PS:
      replicas: 1
      template: {spec: {containers: [{name: tensorflow, image: "registry.example/tf:2.16", args: [--ps]}]}}
    Worker:
      replicas: 4
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: registry.example/tf:2.16
              args: [--steps=1000]
              resources: {limits: {cpu: "2", memory: 4Gi}}
YAML
done >"$dir/tfjobs.yaml"
echo "$jobs TFJobs, $(wc -c <"$dir/tfjobs.yaml") bytes"

ms=()
for ((r = 0; r < runs; r++)); do
  t0=$(date +%s%N)
  "$kt" convert -f "$dir/tfjobs.yaml" >"$dir/out" 2>"$dir/err" || { cat "$dir/err"; exit 1; }
  t1=$(date +%s%N)
  ms+=($(((t1 - t0) / 1000000)))
done
n=$(grep -c '^kind: TrainingJob$' "$dir/out")
[[ $n -eq $jobs ]] || { echo "converted $n of $jobs" >&2; exit 1; }
echo "runs (ms): ${ms[*]}"
m=$(printf '%s\n' "${ms[@]}" | median)
echo "convert of $jobs TFJobs, median: $m ms ($(awk -v n="$jobs" -v m="$m" 'BEGIN {printf "%d", n * 1000 / (m > 0 ? m : 1)}') TFJobs/s)"

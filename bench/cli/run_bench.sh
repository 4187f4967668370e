#!/usr/bin/env bash
# Benchmark of `kubetrain run` (the local runner), medians over N runs:
#  - start latency: from exec of `kubetrain run` to the last of 8 replicas
#    (2 PS + 6 workers, shell commands) running its first command, in ms;
#  - runner fixed cost: wall time of the whole run of that job (parse, plan,
#    spawn 8 process groups, reap, stop the 2 PS, summary), in ms;
#  - Wide & Deep overhead: wall time of tests/cli/jobs/wide-deep-small.yaml
#    under `kubetrain run`, and the runner's own CPU time during it, in ms.
# Usage: bench/cli/run_bench.sh <build dir> [runs]   (e.g. build/cli 10)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run_bench.sh <build dir> [runs]}
runs=${2:-10}
kt=$build/operator/cli/kubetrain
export KUBETRAIN_TRAINER=$build/trainer/kubetrain-trainer
[[ -x $kt && -x $KUBETRAIN_TRAINER ]] || { echo "build kubetrain and kubetrain-trainer first" >&2; exit 2; }
export KT_BENCH_DIR
KT_BENCH_DIR=$(mktemp -d /tmp/kubetrain-cli-bench.XXXXXX)
trap 'rm -rf "$KT_BENCH_DIR"' EXIT

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

start_ms=() total_ms=()
for ((i = 0; i < runs; i++)); do
  rm -f "$KT_BENCH_DIR"/*-*
  t0=$(date +%s%N)
  "$kt" run -f "$here/startup.yaml" >"$KT_BENCH_DIR/out" 2>&1 || { cat "$KT_BENCH_DIR/out"; exit 1; }
  t1=$(date +%s%N)
  n=$(ls "$KT_BENCH_DIR" | grep -c -- '-[0-9]$')
  [[ $n -eq 8 ]] || { echo "only $n replicas recorded a start" >&2; exit 1; }
  last=$(cat "$KT_BENCH_DIR"/*-[0-9] | sort -n | tail -1)
  start_ms+=($(((last - t0) / 1000000)))
  total_ms+=($(((t1 - t0) / 1000000)))
done

wd_ms=() cpu_ms=()
wd_runs=$(((runs + 1) / 2))
for ((i = 0; i < wd_runs; i++)); do
  t0=$(date +%s%N)
  "$kt" run -f "$here/../../tests/cli/jobs/wide-deep-small.yaml" >"$KT_BENCH_DIR/out" 2>&1 ||
    { tail -40 "$KT_BENCH_DIR/out"; exit 1; }
  t1=$(date +%s%N)
  wd_ms+=($(((t1 - t0) / 1000000)))
  # kubetrain reports its own CPU time (getrusage RUSAGE_SELF, children excluded).
  cpu_ms+=("$(sed -nE 's/^result: .*runner CPU ([0-9]+) ms.*/\1/p' "$KT_BENCH_DIR/out")")
done

echo "runs: $runs (startup job), $wd_runs (wide-deep-small)"
echo "wide-deep-small wall time, median: $(printf '%s\n' "${wd_ms[@]}" | median) ms"
echo "runner CPU during wide-deep-small (runner only, children excluded), median: $(printf '%s\n' "${cpu_ms[@]}" | median) ms"
echo "8-replica job end to end (runner fixed cost), median: $(printf '%s\n' "${total_ms[@]}" | median) ms"
echo "kubetrain run start -> all 8 replicas started, median: $(printf '%s\n' "${start_ms[@]}" | median) ms"

#!/usr/bin/env bash
# Time for tests/cluster/up to report a ready control plane (apiserver ready,
# every kwok node Ready, default service account present), over N runs.
# Usage: bench/cluster/up_bench.sh [N=5]. Prints each run, then the median.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
n="${1:-5}"
"${root}/tests/cluster/build" >/dev/null  # not part of the figure
times=()
for ((i = 1; i <= n; i++)); do
  dir="$(mktemp -d)"
  start=$(date +%s.%N)
  "${root}/tests/cluster/up" "${dir}" >/dev/null
  end=$(date +%s.%N)
  "${root}/tests/cluster/down" "${dir}"
  t=$(echo "${end} - ${start}" | bc -l)
  times+=("${t}")
  printf 'run %d: %.2f s\n' "${i}" "${t}"
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')
printf 'cluster up to ready: median %.2f s over %d runs\n' "${median}" "${n}"

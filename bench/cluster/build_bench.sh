#!/usr/bin/env bash
# Cold and warm build of the control-plane binaries (tests/cluster/build).
# Cold: an empty binary cache and an empty Go build cache (the Go module
# download cache is kept: downloading is the registry's speed, not ours).
# Peak memory is the largest total RSS of the whole build process tree,
# sampled every 0.5 s. Usage: bench/cluster/build_bench.sh
# Takes ~10-20 minutes on 2 cores; it is not part of the test suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
scratch="$(mktemp -d)"
trap 'chmod -R u+w "${scratch}" 2>/dev/null; rm -rf "${scratch}"' EXIT

tree_rss_kb() {  # total RSS of PID and its descendants
  local pids
  pids="$(pstree -p "$1" 2>/dev/null | grep -o '([0-9]\+)' | tr -d '()' | tr '\n' ',')"
  [[ -n "${pids}" ]] || { echo 0; return; }
  ps -o rss= -p "${pids%,}" 2>/dev/null | awk '{s+=$1} END {print s+0}'
}

run() {  # run LABEL: one build with the scratch caches; prints seconds and peak MiB
  local start end peak=0 rss pid
  start=$(date +%s.%N)
  KUBETRAIN_CACHE="${scratch}/cache" GOCACHE="${scratch}/gocache" "${root}/tests/cluster/build" \
    >/dev/null 2>"${scratch}/$1.log" &
  pid=$!
  while kill -0 "${pid}" 2>/dev/null; do
    rss=$(tree_rss_kb "${pid}")
    ((rss > peak)) && peak=${rss}
    sleep 0.5
  done
  wait "${pid}"
  end=$(date +%s.%N)
  printf '%s build: %.1f s, peak memory of the build tree %d MiB\n' "$1" \
    "$(echo "${end} - ${start}" | bc -l)" $((peak / 1024))
}
run cold
run warm

#!/usr/bin/env bash
# SIGTERM with the default model: time from SIGTERM to the exit with a
# committed checkpoint (ms, median of the runs), steps lost (last step logged before the
# signal minus the checkpoint's step, floored at 0; goal 0), and the checkpoint save rate
# (MB/s) that sizes the grace period, to local disk and to the real S3 server (tests/s3/up).
#
#   bench/trainer/sigterm_bench.sh [BUILD_DIR]   (default build/release; needs
#                                                 kubetrain-trainer and checkpoint_save_bench)
# Environment: KT_BENCH_RUNS (default 5).
# Each run: the default model (batch 512, layers 1024,512,256, dim 16, Adagrad) on 2
# threads, --checkpoint-every far away, signalled once it has logged step 20; "one process"
# signals the single process, "suspend" signals 1 PS + 1 worker at once (every process must
# exit 143; the time is until the last one has). Prints the figures last.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${root}/build/release}"
runs="${KT_BENCH_RUNS:-5}"
trainer="${build}/trainer/kubetrain-trainer"
save_bench="${build}/bench/trainer/checkpoint_save_bench"
[[ -x ${trainer} && -x ${save_bench} ]] || { echo "build kubetrain-trainer and checkpoint_save_bench in ${build}" >&2; exit 1; }

work="$(mktemp -d /tmp/kubetrain-sigterm-bench.XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "${p}" 2>/dev/null || true; done
  "${root}/tests/s3/down" "${work}/s3" >/dev/null 2>&1 || true
  rm -rf "${work}"
}
trap cleanup EXIT
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
now_ms() { date +%s%3N; }
last_step() { grep -o '\] step [0-9]* loss' "$1" | tail -1 | awk '{ print $3 }'; }
newest_ckpt() { local n=-1 d; for d in "$1"/ckpt-*; do [[ -f ${d}/MANIFEST ]] && n=$(( ${d##*-} > n ? ${d##*-} : n )); done; echo "${n}"; }
# Polls (20 ms) until file $1 logs step >= $2; fails after 300 s.
wait_step() {
  local deadline=$(( $(date +%s) + 300 ))
  until [[ $(last_step "$1") -ge $2 ]] 2>/dev/null; do
    (( $(date +%s) < deadline )) || { echo "no step $2 in $1" >&2; tail -5 "$1" >&2; exit 1; }
    sleep 0.02  # poll interval
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

data="${work}/data"
"${trainer}" --generate-data 200000 --data-dir "${data}" --steps 0 --no-eval --metrics-port 0 \
  --termination-log "" >/dev/null 2>&1
flags=(--data-dir "${data}" --steps 1000000 --threads 2 --checkpoint-every 100000000 --log-every 1
       --no-eval --metrics-port 0 --termination-log "")
key=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef

: >"${work}/one_ms"; : >"${work}/one_lost"; : >"${work}/all_ms"; : >"${work}/all_lost"
for ((i = 1; i <= runs; ++i)); do
  # One process.
  ckpt="${work}/one-${i}"
  "${trainer}" "${flags[@]}" --checkpoint-dir "${ckpt}" >"${work}/one-${i}.log" 2>&1 &
  pid=$!; pids+=("${pid}")
  wait_step "${work}/one-${i}.log" 20
  at=$(last_step "${work}/one-${i}.log"); t0=$(now_ms)
  kill -TERM "${pid}"; code=0; wait "${pid}" || code=$?
  t1=$(now_ms)
  [[ ${code} == 143 ]] || { echo "one process exited ${code}" >&2; tail -5 "${work}/one-${i}.log" >&2; exit 1; }
  saved=$(newest_ckpt "${ckpt}")
  echo $(( t1 - t0 )) >>"${work}/one_ms"; echo $(( at > saved ? at - saved : 0 )) >>"${work}/one_lost"
  echo "one process run ${i}: SIGTERM at step ${at}, checkpoint ${saved}, exit 143 after $(( t1 - t0 )) ms" >&2
  # Suspend: 1 PS + 1 worker, both signalled at once.
  ckpt="${work}/all-${i}"
  cluster="{\"ps\":[\"127.0.0.1:$(free_port)\"],\"worker\":[\"127.0.0.1:$(free_port)\"]}"
  CLUSTER_CONFIG="${cluster}" POD_NAME=ps-0 KUBETRAIN_AUTH_KEY=${key} \
    "${trainer}" "${flags[@]}" --checkpoint-dir "${ckpt}" >"${work}/ps-${i}.log" 2>&1 &
  ps=$!; pids+=("${ps}")
  CLUSTER_CONFIG="${cluster}" POD_NAME=worker-0 KUBETRAIN_AUTH_KEY=${key} \
    "${trainer}" "${flags[@]}" --checkpoint-dir "${ckpt}" >"${work}/w-${i}.log" 2>&1 &
  w=$!; pids+=("${w}")
  wait_step "${work}/w-${i}.log" 20
  at=$(last_step "${work}/w-${i}.log"); t0=$(now_ms)
  kill -TERM "${ps}" "${w}"
  for p in "${ps}" "${w}"; do
    code=0; wait "${p}" || code=$?
    [[ ${code} == 143 ]] || { echo "a process exited ${code}" >&2; tail -5 "${work}/ps-${i}.log" "${work}/w-${i}.log" >&2; exit 1; }
  done
  t1=$(now_ms)
  saved=$(newest_ckpt "${ckpt}")
  echo $(( t1 - t0 )) >>"${work}/all_ms"; echo $(( at > saved ? at - saved : 0 )) >>"${work}/all_lost"
  echo "suspend run ${i}: SIGTERM at step ${at}, checkpoint ${saved}, all exited 143 after $(( t1 - t0 )) ms" >&2
done

local_rate=$("${save_bench}" "${work}/save" 1000000 "${runs}" | tail -1)
"${root}/tests/s3/up" "${work}/s3" >/dev/null
set -a
# shellcheck disable=SC1091
source "${work}/s3/s3.env"
set +a
s3_rate=$("${save_bench}" "s3://sigterm-bench/ckpt/" 1000000 "${runs}" | tail -1)

echo "${local_rate}"
echo "${s3_rate}"
echo "steps lost per SIGTERM: one process max $(sort -g "${work}/one_lost" | tail -1), suspend max $(sort -g "${work}/all_lost" | tail -1) (goal 0)"
echo "SIGTERM to exit 143 with a committed checkpoint, default model: one process $(median <"${work}/one_ms") ms, 1 PS + 1 worker at once $(median <"${work}/all_ms") ms (median of ${runs})"

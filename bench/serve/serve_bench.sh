#!/usr/bin/env bash
# kubetrain-serve's figures beside onnxruntime's, in one run:
#   - batch-1 latency p50/p99 over HTTP on loopback (v2 JSON, a new connection per request,
#     one client at a time), kubetrain-serve --threads 1;
#   - throughput at batch 256 (examples/s; requests of 256 examples, 2 clients so that one
#     request's JSON is parsed while another's batch computes) with --threads 1 and 2;
#   - onnxruntime (tests/onnx/venv) running the exported model.onnx in-process (no HTTP, no
#     JSON) with intra_op_num_threads 1 and 2: batch-1 latency and batch-256 throughput.
#
#   bench/serve/serve_bench.sh [BUILD_DIR]   (default build/release; needs kubetrain-trainer,
#                                             kubetrain-serve and bench/serve/serve_load)
# Model: the trainer's default Wide & Deep (--layers 1024,512,256, --embedding-dim 16) trained
# for 20 steps on generated data (~5,200 embedding rows). Inputs: 256 evaluation examples as
# the trainer's --predict gives them. Environment: KT_BENCH_REQUESTS (default 2000 batch-1
# requests), KT_BENCH_BATCHES (default 200 batch-256 requests). Prints the table last.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${root}/build/release}"
trainer="${build}/trainer/kubetrain-trainer"
serve="${build}/trainer/kubetrain-serve"
load="${build}/bench/serve/serve_load"
for b in "${trainer}" "${serve}" "${load}"; do [[ -x ${b} ]] || { echo "build ${b}" >&2; exit 1; }; done
requests="${KT_BENCH_REQUESTS:-2000}"
batches="${KT_BENCH_BATCHES:-200}"
work="$(mktemp -d /tmp/kubetrain-serve-bench.XXXXXX)"
server_pid=""
cleanup() {
  if [[ -n ${server_pid} ]]; then kill "${server_pid}" 2>/dev/null || true; wait "${server_pid}" 2>/dev/null || true; fi
  rm -rf "${work}"
}
trap cleanup EXIT
export OMP_WAIT_POLICY=passive
wd=(--model wide_deep --threads 2 --metrics-port 0 --termination-log "" --log-every 0 --no-eval)

echo "training the default Wide & Deep for 20 steps" >&2
"${trainer}" "${wd[@]}" --data-dir "${work}/criteo" --generate-data 50000 --steps 20 \
  --output "${work}/out" >"${work}/train.log" 2>&1 || { cat "${work}/train.log"; exit 1; }
"${trainer}" "${wd[@]}" --data-dir "${work}/criteo" --checkpoint-dir "${work}/out/model" \
  --eval-examples 256 --predict "${work}/inputs.jsonl" >"${work}/predict.log" 2>&1 ||
  { cat "${work}/predict.log"; exit 1; }
python3 - "${work}" <<'PY'
import json, sys
w = sys.argv[1]
rows = [json.loads(l) for l in open(w + "/inputs.jsonl")]
def body(rs):
    return json.dumps({"inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [len(rs), 13],
         "data": [v for r in rs for v in r["dense"]]},
        {"name": "cat_ids", "datatype": "INT64", "shape": [len(rs), 26],
         "data": [v for r in rs for v in r["cat_ids"]]}]})
open(w + "/body1.json", "w").write(body(rows[:1]))
open(w + "/body256.json", "w").write(body(rows[:256]))
PY

port_of() { sed -n 's/.* on port \([0-9]*\):.*/\1/p' "$1" | head -n1; }
start_server() {  # start_server THREADS: sets server_pid and port
  "${serve}" --model "${work}/out" --model-name m --host 127.0.0.1 --port 0 --threads "$1" \
    --max-batch-size 256 --max-batch-wait 0 --poll-interval 3600 >"${work}/serve-$1.log" 2>&1 &
  server_pid=$!
  local deadline=$((SECONDS + 60))
  port=""
  while ((SECONDS < deadline)); do
    port="$(port_of "${work}/serve-$1.log" 2>/dev/null || true)"
    if [[ -n ${port} ]] && grep -q "serving the model" "${work}/serve-$1.log"; then return; fi
    sleep 0.1  # poll interval while the server starts
  done
  cat "${work}/serve-$1.log" >&2
  exit 1
}
stop_server() {
  kill -TERM "${server_pid}"
  wait "${server_pid}" || { echo "kubetrain-serve did not exit 0" >&2; exit 1; }
  server_pid=""
}

declare -A fig
for threads in 1 2; do
  start_server "${threads}"
  echo "kubetrain-serve --threads ${threads} on port ${port}" >&2
  if [[ ${threads} == 1 ]]; then
    out="$("${load}" --port "${port}" --path /v2/models/m/infer --body "${work}/body1.json" \
      --examples 1 --requests "${requests}" --concurrency 1)"
    echo "  batch 1: ${out}" >&2
    fig[serve_p50]="$(sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p' <<<"${out}")"
    fig[serve_p99]="$(sed -n 's/.*p99 \([0-9.]*\) ms.*/\1/p' <<<"${out}")"
  fi
  out="$("${load}" --port "${port}" --path /v2/models/m/infer --body "${work}/body256.json" \
    --examples 256 --requests "${batches}" --concurrency 2 --warmup 10)"
  echo "  batch 256: ${out}" >&2
  fig[serve_tput_${threads}]="$(sed -n 's/.*, \([0-9]*\) examples\/s.*/\1/p' <<<"${out}")"
  # The forward pass alone (the server's own account): seconds per example in batches.
  fig[serve_compute_${threads}]="$(python3 -c '
import sys, urllib.request
m = {}
for line in urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1]).read().decode().splitlines():
    if not line.startswith("#") and " " in line:
        k, v = line.rsplit(" ", 1)
        m[k] = float(v)
print("%.0f" % (m["kubetrain_serve_examples_total"] / m["kubetrain_serve_compute_seconds_total"]))
' "${port}")"
  stop_server
done

python="$("${root}/tests/onnx/venv")"
ort="$("${python}" - "${work}" "${requests}" "${batches}" <<'PY'
import json, sys, time
import numpy as np
import onnxruntime as ort
w, requests, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(w + "/inputs.jsonl")]
dense = np.array([r["dense"] for r in rows], np.float32)
cat = np.array([r["cat_ids"] for r in rows], np.int64)
for threads in (1, 2):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(w + "/out/model.onnx", o, providers=["CPUExecutionProvider"])
    want = np.array([r["probs"] for r in rows], np.float32)
    got = s.run(["probability"], {"dense": dense, "cat_ids": cat})[0]
    assert np.max(np.abs(got - want)) < 1e-5, np.max(np.abs(got - want))
    if threads == 1:
        lat = []
        for i in range(100 + requests):
            t0 = time.perf_counter()
            s.run(["probability"], {"dense": dense[i % 256:i % 256 + 1], "cat_ids": cat[i % 256:i % 256 + 1]})
            if i >= 100:
                lat.append((time.perf_counter() - t0) * 1e3)
        lat.sort()
        print(f"ort_p50={lat[len(lat) // 2]:.3f} ort_p99={lat[int(0.99 * len(lat))]:.3f}")
    for _ in range(10):
        s.run(["probability"], {"dense": dense, "cat_ids": cat})
    t0 = time.perf_counter()
    for _ in range(batches):
        s.run(["probability"], {"dense": dense, "cat_ids": cat})
    print(f"ort_tput_{threads}={batches * 256 / (time.perf_counter() - t0):.0f}")
PY
)"
eval "${ort}"
echo
echo "Wide & Deep 1024-512-256, embedding 16, FP32, $(nproc) cores; onnxruntime $("${python}" -c 'import onnxruntime; print(onnxruntime.__version__)')"
printf '%-46s %14s %14s\n' "" "kubetrain-serve" "onnxruntime"
printf '%-46s %14s %14s\n' "" "(HTTP, JSON)" "(in-process)"
printf '%-46s %11s ms %11s ms\n' "batch-1 latency p50, 1 thread" "${fig[serve_p50]}" "${ort_p50}"
printf '%-46s %11s ms %11s ms\n' "batch-1 latency p99, 1 thread" "${fig[serve_p99]}" "${ort_p99}"
printf '%-46s %9s ex/s %9s ex/s\n' "batch-256 throughput, 1 thread" "${fig[serve_tput_1]}" "${ort_tput_1}"
printf '%-46s %9s ex/s %9s ex/s\n' "batch-256 throughput, 2 threads" "${fig[serve_tput_2]}" "${ort_tput_2}"
printf '%-46s %9s ex/s\n' "  kubetrain-serve forward pass alone, 1 thread" "${fig[serve_compute_1]}"
printf '%-46s %9s ex/s\n' "  kubetrain-serve forward pass alone, 2 threads" "${fig[serve_compute_2]}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

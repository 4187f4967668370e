#!/usr/bin/env bash
# kubetrain-serve's figures beside onnxruntime's and KServe's, in one run, side by side:
#   - batch-1 latency p50/p99 over HTTP on loopback (v2 JSON, one client at a time,
#     keep-alive as real clients use it) on 1 thread;
#   - throughput at batch 256 over HTTP (examples/s; requests of 256 examples, 2 clients so
#     that one request's JSON is read while another's batch computes) on 1 and 2 threads;
#   for: kubetrain-serve of this build (its embeddings folded into the first layer, the
#   default), the same build unfolded (--fold-embeddings-max-mb 0, the "unfolded" column);
#   optionally an older kubetrain-serve
#   (KT_BENCH_BEFORE=path/to/kubetrain-serve, the "before" column); KServe's Python model
#   server (kserve.ModelServer, bench/serve/kserve_venv) with onnxruntime running the
#   exported model.onnx (intra_op_num_threads = the same threads); and onnxruntime
#   in-process (no HTTP, no JSON; same venv) on the same threads. Every figure is the
#   median of KT_BENCH_ROUNDS rounds (default 3); a round measures every server in turn
#   and then onnxruntime in-process,
#   so a busy machine slows all columns alike. kubetrain-serve's batch-256 throughput also
#   with the v2 binary tensor data extension (binary inputs and output). Beside the throughput: CPU milliseconds per
#   1,000 examples at batch 256 (the server's process and its children, from /proc; with
#   the load client's own, which shares the cores; onnxruntime in-process: its process),
#   and examples per server CPU-second (every contender, 1 and 2 threads, JSON and binary),
#   which a loaded machine disturbs less than ex/s; the load average before and after.
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
before="${KT_BENCH_BEFORE:-}"
for b in "${trainer}" "${serve}" "${load}" ${before}; do
  [[ -x ${b} ]] || { echo "build ${b}" >&2; exit 1; }
done
requests="${KT_BENCH_REQUESTS:-2000}"
batches="${KT_BENCH_BATCHES:-200}"
rounds="${KT_BENCH_ROUNDS:-3}"
work="$(mktemp -d /tmp/kubetrain-serve-bench.XXXXXX)"
server_pid=""
cleanup() {
  if [[ -n ${server_pid} ]]; then kill "${server_pid}" 2>/dev/null || true; wait "${server_pid}" 2>/dev/null || true; fi
  rm -rf "${work}"
}
trap cleanup EXIT
export OMP_WAIT_POLICY=passive
kpython="$("${root}/bench/serve/kserve_venv")"
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
# The same 256 examples in the binary tensor data extension (binary inputs, binary output);
# the JSON header's length goes in Inference-Header-Content-Length.
import struct
rs = rows[:256]
head = json.dumps({"inputs": [
    {"name": "dense", "datatype": "FP32", "shape": [256, 13],
     "parameters": {"binary_data_size": 256 * 13 * 4}},
    {"name": "cat_ids", "datatype": "INT64", "shape": [256, 26],
     "parameters": {"binary_data_size": 256 * 26 * 8}}],
    "outputs": [{"name": "probability", "parameters": {"binary_data": True}}]}).encode()
dense = [v for r in rs for v in r["dense"]]
cat = [v for r in rs for v in r["cat_ids"]]
open(w + "/body256.bin", "wb").write(
    head + struct.pack(f"<{len(dense)}f", *dense) + struct.pack(f"<{len(cat)}q", *cat))
open(w + "/body256.bin.header", "w").write(str(len(head)))
PY

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port_of() { sed -n 's/.* on port \([0-9]*\):.*/\1/p' "$1" | head -n1; }
start_server() {  # start_server IMPL THREADS: sets server_pid and port
  local impl="$1" threads="$2" log="${work}/${1}-${2}.log"
  case "${impl}" in
    after | before | unfolded)
      local bin="${serve}" extra=()
      [[ ${impl} == before ]] && bin="${before}"
      [[ ${impl} == unfolded ]] && extra=(--fold-embeddings-max-mb 0)
      "${bin}" --model "${work}/out" --model-name m --host 127.0.0.1 --port 0 \
        --threads "${threads}" --max-batch-size 256 --max-batch-wait 0 --poll-interval 3600 \
        "${extra[@]}" >"${log}" 2>&1 &
      server_pid=$!
      ;;
    kserve)
      port="$(free_port)"
      OMP_NUM_THREADS="${threads}" "${kpython}" "${root}/bench/serve/kserve_ort.py" \
        --model-file "${work}/out/model.onnx" --model-name m --port "${port}" \
        --threads "${threads}" >"${log}" 2>&1 &
      server_pid=$!
      ;;
  esac
  local deadline=$((SECONDS + 120))
  while ((SECONDS < deadline)); do
    [[ ${impl} == kserve ]] || port="$(port_of "${log}" 2>/dev/null || true)"
    if [[ -n ${port} ]] && curl -sf -o /dev/null "http://127.0.0.1:${port}/v2/models/m/ready"; then
      return
    fi
    kill -0 "${server_pid}" 2>/dev/null || break
    sleep 0.1  # poll interval while the server starts
  done
  cat "${log}" >&2
  exit 1
}
stop_server() {
  kill -TERM "${server_pid}"
  wait "${server_pid}" || true
  server_pid=""
}
record() {  # IMPL THREADS METRIC VALUE (none: a failed run, not recorded)
  if [[ -n ${4:-} ]]; then echo "$1 $2 $3 $4" >>"${work}/figures"; fi
}
# CPU seconds (user + system, every thread) of the server and its child processes.
cpu_of() {
  local tick total=0 p
  tick="$(getconf CLK_TCK)"
  for p in "$1" $(pgrep -P "$1" || true); do
    [[ -r /proc/${p}/stat ]] || continue
    total=$((total + $(sed 's/.*) //' "/proc/${p}/stat" | awk '{print $12 + $13}')))
  done
  echo "scale=3; ${total} / ${tick}" | bc
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
impls=(after unfolded kserve)
[[ -n ${before} ]] && impls=(after unfolded before kserve)
# One round of onnxruntime in-process (sessions made afresh), appended to the figures: run
# inside each round, beside the servers, so that its column sees the same load as theirs.
ort_round() {
  "${kpython}" - "${work}" "${requests}" "${batches}" <<'PY' >>"${work}/figures"
import json, sys, time
import numpy as np
import onnxruntime as ort
w, requests, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(w + "/inputs.jsonl")]
dense = np.array([r["dense"] for r in rows], np.float32)
cat = np.array([r["cat_ids"] for r in rows], np.int64)
want = np.array([r["probs"] for r in rows], np.float32)
sessions = {}
for threads in (1, 2):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(w + "/out/model.onnx", o, providers=["CPUExecutionProvider"])
    got = s.run(["probability"], {"dense": dense, "cat_ids": cat})[0]
    assert np.max(np.abs(got - want)) < 1e-5, np.max(np.abs(got - want))
    sessions[threads] = s
for threads, s in sessions.items():
    if threads == 1:
        lat = []
        for i in range(100 + requests):
            t0 = time.perf_counter()
            s.run(["probability"], {"dense": dense[i % 256:i % 256 + 1], "cat_ids": cat[i % 256:i % 256 + 1]})
            if i >= 100:
                lat.append((time.perf_counter() - t0) * 1e3)
        lat.sort()
        print(f"ort 1 p50 {lat[len(lat) // 2]:.3f}")
        print(f"ort 1 p99 {lat[int(0.99 * len(lat))]:.3f}")
    for _ in range(10):
        s.run(["probability"], {"dense": dense, "cat_ids": cat})
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(batches):
        s.run(["probability"], {"dense": dense, "cat_ids": cat})
    t1, c1 = time.perf_counter(), time.process_time()
    print(f"ort {threads} tput {batches * 256 / (t1 - t0):.0f}")
    print(f"ort {threads} cpu {(c1 - c0) * 1e6 / (batches * 256):.3f}")
    print(f"ort {threads} cpuall {(c1 - c0) * 1e6 / (batches * 256):.3f}")
PY
}

for round in $(seq 1 "${rounds}"); do
  for threads in 1 2; do
    for impl in "${impls[@]}"; do
      start_server "${impl}" "${threads}"
      echo "round ${round}: ${impl} --threads ${threads} on port ${port}" >&2
      # The same predictions from every server (the first example, within 1e-5).
      if [[ ${threads} == 1 ]]; then
        out="$("${load}" --port "${port}" --path /v2/models/m/infer --body "${work}/body1.json" \
          --examples 1 --requests "${requests}" --concurrency 1)"
        echo "  batch 1: ${out}" >&2
        record "${impl}" 1 p50 "$(sed -n 's/.*p50 \([0-9.]*\) ms.*/\1/p' <<<"${out}")"
        record "${impl}" 1 p99 "$(sed -n 's/.*p99 \([0-9.]*\) ms.*/\1/p' <<<"${out}")"
      fi
      # The warm-up outside the CPU count.
      "${load}" --port "${port}" --path /v2/models/m/infer --body "${work}/body256.json" \
        --examples 256 --requests 10 --concurrency 2 --warmup 0 >/dev/null
      cpu0="$(cpu_of "${server_pid}")"
      out="$("${load}" --port "${port}" --path /v2/models/m/infer --body "${work}/body256.json" \
        --examples 256 --requests "${batches}" --concurrency 2 --warmup 0)"
      cpu1="$(cpu_of "${server_pid}")"
      echo "  batch 256: ${out}; server CPU $(bc <<<"${cpu1} - ${cpu0}") s" >&2
      record "${impl}" "${threads}" tput "$(sed -n 's/.*, \([0-9]*\) examples\/s.*/\1/p' <<<"${out}")"
      # CPU milliseconds per 1,000 examples: the server's, and the server's with the client's.
      client="$(sed -n 's/.*client CPU \([0-9.]*\) s.*/\1/p' <<<"${out}")"
      record "${impl}" "${threads}" cpu "$(bc <<<"scale=3; (${cpu1} - ${cpu0}) * 1000000 / (${batches} * 256)")"
      record "${impl}" "${threads}" cpuall \
        "$(bc <<<"scale=3; (${cpu1} - ${cpu0} + ${client}) * 1000000 / (${batches} * 256)")"
      if [[ ${impl} != kserve ]]; then  # binary tensor data: kubetrain-serve only
        "${load}" --port "${port}" --path /v2/models/m/infer --body "${work}/body256.bin" \
          --content-type application/octet-stream --examples 256 --requests 10 \
          --concurrency 2 --warmup 0 \
          --header "Inference-Header-Content-Length: $(cat "${work}/body256.bin.header")" \
          >/dev/null || true
        cpu0="$(cpu_of "${server_pid}")"
        out="$("${load}" --port "${port}" --path /v2/models/m/infer --body "${work}/body256.bin" \
          --content-type application/octet-stream --examples 256 --requests "${batches}" \
          --concurrency 2 --warmup 0 \
          --header "Inference-Header-Content-Length: $(cat "${work}/body256.bin.header")")" ||
          out="failed"
        cpu1="$(cpu_of "${server_pid}")"
        echo "  batch 256, binary: ${out}; server CPU $(bc <<<"${cpu1} - ${cpu0}") s" >&2
        record "${impl}" "${threads}" bintput "$(sed -n 's/.*, \([0-9]*\) examples\/s.*/\1/p' <<<"${out}")"
        [[ ${out} == failed ]] ||
          record "${impl}" "${threads}" bincpu "$(bc <<<"scale=3; (${cpu1} - ${cpu0}) * 1000000 / (${batches} * 256)")"
      fi
      if [[ ${round} == 1 ]]; then
        curl -sf -X POST -H 'Content-Type: application/json' --data-binary "@${work}/body1.json" \
          "http://127.0.0.1:${port}/v2/models/m/infer" >"${work}/answer-${impl}-${threads}.json"
      fi
      stop_server
    done
  done
  ort_round
done


sed 's/^/figure: /' "${work}/figures" >&2  # the rounds, for the record
"${kpython}" - "${work}" "${rounds}" "$(nproc)" \
  "$("${kpython}" -c 'from importlib.metadata import version as v; print(v("onnxruntime"), v("kserve"))')" <<'PY'
import json, statistics, sys
w, rounds, cores, versions = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split()
fig = {}
for line in open(w + "/figures"):
    impl, threads, metric, value = line.split()
    fig.setdefault((impl, threads, metric), []).append(float(value))
med = {k: statistics.median(v) for k, v in fig.items()}
# Every server gave the trainer's own prediction for the first example.
want = json.loads(open(w + "/inputs.jsonl").readline())["probs"][0]
for impl in ("after", "unfolded", "before", "kserve"):
    for t in ("1", "2"):
        try:
            got = json.load(open(f"{w}/answer-{impl}-{t}.json"))["outputs"][0]["data"][0]
        except FileNotFoundError:
            continue
        assert abs(got - want) < 1e-5, (impl, t, got, want)
cols = [("after", "kubetrain-serve", "(HTTP, JSON)"), ("unfolded", "unfolded", "(HTTP, JSON)")]
if ("before", "1", "p50") in med:
    cols.append(("before", "before", "(HTTP, JSON)"))
cols += [("kserve", "KServe + ORT", "(HTTP, JSON)"), ("ort", "onnxruntime", "(in-process)")]
print()
print(f"Wide & Deep 1024-512-256, embedding 16, FP32, {cores} cores; onnxruntime {versions[0]}, "
      f"kserve {versions[1]}; medians of {rounds} rounds")
print(f"{'':34}" + "".join(f"{c[1]:>17}" for c in cols))
print(f"{'':34}" + "".join(f"{c[2]:>17}" for c in cols))
rows = [("batch-1 latency p50, 1 thread", "1", "p50", "ms"),
        ("batch-1 latency p99, 1 thread", "1", "p99", "ms"),
        ("batch-256 throughput, 1 thread", "1", "tput", "ex/s"),
        ("batch-256 throughput, 2 threads", "2", "tput", "ex/s"),
        ("batch-256, binary tensors, 1 thread", "1", "bintput", "ex/s"),
        ("batch-256, binary tensors, 2 threads", "2", "bintput", "ex/s"),
        ("server CPU per 1k ex, 1 thread", "1", "cpu", "cpu"),
        ("server CPU per 1k ex, 2 threads", "2", "cpu", "cpu"),
        ("+ client CPU per 1k ex, 2 threads", "2", "cpuall", "cpu"),
        ("ex per server CPU-s, 1 thread", "1", "pcpu", "ex/s"),
        ("ex per server CPU-s, 2 threads", "2", "pcpu", "ex/s"),
        ("ex per server CPU-s, binary, 1 thread", "1", "pbincpu", "ex/s"),
        ("ex per server CPU-s, binary, 2 threads", "2", "pbincpu", "ex/s")]
for impl, _, _ in cols:
    for t in ("1", "2"):
        if (impl, t, "cpu") in med:
            med[(impl, t, "pcpu")] = 1e6 / med[(impl, t, "cpu")]
        if (impl, t, "bincpu") in med:
            med[(impl, t, "pbincpu")] = 1e6 / med[(impl, t, "bincpu")]
for label, t, m, unit in rows:
    cells = []
    for impl, _, _ in cols:
        v = med.get((impl, t, m))
        if v is None:
            cells.append("-")
        elif unit == "cpu":
            cells.append(f"{v:.1f} ms")
        else:
            cells.append(f"{v:.3f} {unit}" if unit == "ms" else f"{v:.0f} {unit}")
    print(f"{label:34}" + "".join(f"{c:>17}" for c in cells))
for t in ("1", "2"):
    a = med[("after", t, "tput")]
    print(f"kubetrain-serve / onnxruntime in-process, batch 256, {t} thread(s): "
          f"{a / med[('ort', t, 'tput')]:.2f}x; / KServe + ORT over HTTP: "
          f"{a / med[('kserve', t, 'tput')]:.2f}x")
for t in ("1", "2"):
    a = med[("after", t, "pcpu")]
    print(f"per server CPU-second, batch 256, {t} thread(s): kubetrain-serve / onnxruntime "
          f"in-process {a / med[('ort', t, 'pcpu')]:.2f}x, / KServe + ORT "
          f"{a / med[('kserve', t, 'pcpu')]:.2f}x, / unfolded {a / med[('unfolded', t, 'pcpu')]:.2f}x; "
          f"binary: / onnxruntime {med[('after', t, 'pbincpu')] / med[('ort', t, 'pcpu')]:.2f}x")
for t in ("1", "2"):
    print(f"embedding fold, batch 256, {t} thread(s): {med[('after', t, 'tput')] / med[('unfolded', t, 'tput')]:.2f}x "
          f"unfolded (JSON), {med[('after', t, 'bintput')] / med[('unfolded', t, 'bintput')]:.2f}x (binary)")
print(f"KServe + ORT / kubetrain-serve batch-1 p99: "
      f"{med[('kserve', '1', 'p99')] / med[('after', '1', 'p99')]:.2f}x")
PY
echo "load average: before ${load_before}, after $(cut -d' ' -f1-3 /proc/loadavg)"

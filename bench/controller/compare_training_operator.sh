#!/usr/bin/env bash
# kubetrain's operator side by side with Kubeflow training-operator v1.9.3,
# the operator it replaces. Each run gives every contender a fresh control plane
# (tests/cluster/up, 10 kwok nodes, an apiserver audit log of every write)
# and the same JOBS jobs of 1 PS + 4 workers, created at once with one
# `kubectl create`; the contenders alternate within a run (their order flips
# every run) so both see the same machine noise. Per contender and run:
#   - job creates: first job create to last job create (admission cost, e.g.
#     CEL), and the apiserver's CPU seconds over it;
#   - the operator's last pod create, from the first job create (audit log);
#   - all pods Running, from the first job create (polled once a second);
#   - operator CPU seconds and peak RSS (VmHWM) once every job reports Running;
#   - writes per job by user agent from the audit log (the operator's, and the
#     controller-manager's Endpoints + EndpointSlices that its Services cause),
#     each run's line also by resource (and, for the endpoints, by verb),
#     counted once the controller-manager has caught up with the Services
#     (settle_endpoints; before, a run ended while it was still writing, which
#     undercounted whoever makes more Services);
# Prints the runs, then the medians as the issue's table, last.
#
# Usage: bench/controller/compare_training_operator.sh OPERATOR_BINARY [JOBS=500] [RUNS=3]
# Environment:
#   BENCH_MODE=unthrottled (default): ours --qps 500 --burst 1000 --workers 8,
#     the peer --kube-api-qps 500 --kube-api-burst 1000 --controller-threads 8;
#   BENCH_MODE=default: both at their default client limits and threads.
#   BENCH_CONTENDERS="kubetrain peer" (default): labels; "peer" is
#     training-operator, any other label is kubetrain's operator, configured by
#     BIN_<label> (binary, default OPERATOR_BINARY), FLAGS_<label> (extra
#     operator flags), SPEC_<label> (a YAML line added under the job's spec)
#     CRD_<label> (the TrainingJob CRD file) and KIND_<label>=tfjob (the
#     label runs the peer's very TFJobs, with --tfjob=all and v1.9.3's TFJob
#     CRD, or CRD_<label>: the TFJob figures), e.g.
#     BENCH_CONTENDERS="old new" BIN_old=/tmp/old-operator, or
#     KIND_kubetrain=tfjob for TFJobs side by side.
#   BENCH_KEEP_AUDIT=DIR: keep each run's audit log there (audit-LABEL-RUN.log).
# Both operators run outside a cluster with the admin kubeconfig and no leader
# election; ours with --progress-qps 0 (the peer reads no metrics either, and
# kwok pod IPs serve none). The peer is built by build-training-operator (Go
# module proxy, cached); it needs MY_POD_NAMESPACE, its webhook Secret (its
# cert rotator fills it) and a certificate in its fixed webhook cert dir
# /tmp/k8s-webhook-server/serving-certs (made here, self-signed, if absent).
# Bench only: not part of CI. Stops only the processes it started, by PID.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=lib.sh
source "${root}/bench/controller/lib.sh"
operator="$(realpath "${1:?usage: compare_training_operator.sh OPERATOR_BINARY [JOBS] [RUNS]}")"
jobs="${2:-500}"
runs="${3:-3}"
mode="${BENCH_MODE:-unthrottled}"
read -r -a contenders <<<"${BENCH_CONTENDERS:-kubetrain peer}"
timeout_s="${KUBETRAIN_BENCH_TIMEOUT:-1200}"
cluster_bin="$("${root}/tests/cluster/build")"  # fails the script if it cannot build
export PATH="${cluster_bin}:${PATH}"
peer_dir=""
tfjob_contender=0
for c in "${contenders[@]}"; do
  kind_var="KIND_${c}"
  [[ "${!kind_var:-}" == tfjob ]] && tfjob_contender=1
done
if [[ " ${contenders[*]} " == *" peer "* || ${tfjob_contender} == 1 ]]; then
  peer_dir="$("$(dirname "${BASH_SOURCE[0]}")/build-training-operator")"
fi
pods=$((jobs * 5))

dir="" op_pid="" work=""
stop_run() {
  if [[ -n "${op_pid}" ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null || true; fi
  if [[ -n "${dir}" ]]; then "${root}/tests/cluster/down" "${dir}"; fi
  op_pid="" dir=""
}
cleanup() {
  stop_run
  if [[ -n "${work}" ]]; then rm -rf "${work}"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-compare.XXXXXX")"
results="${work}/results.jsonl"

case "${mode}" in
  unthrottled)
    ours_flags=(--qps 500 --burst 1000 --workers 8)
    peer_flags=(--kube-api-qps 500 --kube-api-burst 1000 --controller-threads 8) ;;
  default) ours_flags=() peer_flags=() ;;
  *) echo "BENCH_MODE must be unthrottled or default" >&2; exit 2 ;;
esac

# Every write at Metadata level; reads, and the kwok nodes' lease renewals, not at all.
cat >"${work}/audit-policy.yaml" <<'POL'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: None
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
POL

certs=/tmp/k8s-webhook-server/serving-certs  # fixed in training-operator's pkg/cert
if [[ ! -s "${certs}/tls.crt" || ! -s "${certs}/tls.key" ]]; then
  mkdir -p "${certs}"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=training-operator.kubeflow.svc" \
    -keyout "${certs}/tls.key" -out "${certs}/tls.crt" 2>/dev/null
fi

# The same job for both: 1 PS + 4 workers on the kwok nodes.
make_jobs() {  # make_jobs peer|ours SPEC_LINE
  if [[ "$1" == peer ]]; then bench_jobs "${jobs}" tfjob; else bench_jobs "${jobs}" trainingjob "${2:-}"; fi
}


# settle_endpoints LABEL RUN AUDIT: the controller-manager writes each Service's
# Endpoints and EndpointSlice at its own client rate (20 QPS), so with one
# Service per replica it is minutes behind the operator when the last job says
# Running. The writes a job causes are counted once it has caught up: every
# Service in the namespace has its Endpoints and an EndpointSlice, and its
# endpoint writes in the audit log have stopped for 10 s (at most 900 s).
settle_endpoints() {
  local label="$1" r="$2" audit="$3" svcs eps slices n last=-1 quiet_since=${SECONDS}
  local deadline=$((SECONDS + 900))
  local pat='"userAgent":"kube-controller-manager[^"]*","objectRef":\{"resource":"endpoint'
  local slice_svc='{range .items[*]}{.metadata.labels.kubernetes\.io/service-name}{"\n"}{end}'
  while :; do
    svcs=$(kubectl get services -n bench -o name 2>/dev/null | wc -l)
    eps=$(kubectl get endpoints -n bench -o name 2>/dev/null | wc -l)
    slices=$(kubectl get endpointslices -n bench -o jsonpath="${slice_svc}" 2>/dev/null | sort -u | grep -c . || true)
    n=$(grep -cE "${pat}" "${audit}" || true)
    if ((n != last)); then last=${n} quiet_since=${SECONDS}; fi
    if ((eps >= svcs && slices >= svcs && SECONDS - quiet_since >= 10)); then return 0; fi
    if ((SECONDS >= deadline)); then
      echo "${label} run ${r}: controller-manager not settled after 900 s (${svcs} Services, ${eps} Endpoints, ${slices} with EndpointSlices); counting what it wrote" >&2
      return 0
    fi
    sleep 2
  done
}

run_one() {  # run_one LABEL RUN: appends one JSON line of figures to ${results}
  local label="$1" r="$2" kind ready_url
  dir="${work}/cluster-${label}-${r}"
  local audit="${work}/audit-${label}-${r}.log"
  KUBETRAIN_TEST_NODES=10 KUBETRAIN_APISERVER_FLAGS="--audit-policy-file ${work}/audit-policy.yaml --audit-log-path ${audit} --audit-log-format json ${KUBETRAIN_APISERVER_FLAGS:-}" \
    "${root}/tests/cluster/up" "${dir}" >/dev/null
  export KUBECONFIG="${dir}/kubeconfig"
  kubectl create namespace bench >/dev/null
  local health; health="$(free_port)"
  if [[ "${label}" == peer ]]; then
    kind=tfjobs
    kubectl apply --server-side -f "${peer_dir}/crds/kubeflow.org_tfjobs.yaml" >/dev/null
    "${root}/tests/tools/wait-crds" crd/tfjobs.kubeflow.org >/dev/null
    kubectl create namespace kubeflow >/dev/null
    kubectl -n kubeflow create secret generic training-operator-webhook-cert >/dev/null
    make_jobs peer "" >"${work}/jobs.yaml"
    MY_POD_NAMESPACE=kubeflow "${peer_dir}/bin/training-operator" --enable-scheme=tfjob \
      --leader-elect=false --zap-log-level=info "${peer_flags[@]}" \
      --metrics-bind-address "127.0.0.1:$(free_port)" --health-probe-bind-address "127.0.0.1:${health}" \
      --webhook-server-port "$(free_port)" >"${work}/operator-${label}-${r}.log" 2>&1 &
    op_pid=$!
  else
    local bin_var="BIN_${label}" flags_var="FLAGS_${label}" spec_var="SPEC_${label}" crd_var="CRD_${label}" kind_var="KIND_${label}"
    local bin="${!bin_var:-${operator}}" spec="${!spec_var:-}"
    local -a extra; read -r -a extra <<<"${!flags_var:-}"
    if [[ "${!kind_var:-}" == tfjob ]]; then  # the peer's TFJobs, taken over
      kind=tfjobs
      kubectl apply --server-side -f "${!crd_var:-${peer_dir}/crds/kubeflow.org_tfjobs.yaml}" >/dev/null
      kubectl apply -f "${root}/crds/trainingjobs.kubetrain.io.yaml" >/dev/null  # the operator needs its own
      "${root}/tests/tools/wait-crds" crd/tfjobs.kubeflow.org crd/trainingjobs.kubetrain.io >/dev/null
      make_jobs peer "" >"${work}/jobs.yaml"
      extra+=(--tfjob=all)
    else
      kind=trainingjobs
      kubectl apply -f "${!crd_var:-${root}/crds/trainingjobs.kubetrain.io.yaml}" >/dev/null
      "${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null
      make_jobs ours "${spec}" >"${work}/jobs.yaml"
    fi
    "${bin}" "${ours_flags[@]}" "${extra[@]}" --progress-qps 0 --metrics-addr 127.0.0.1:0 \
      --health-addr "127.0.0.1:${health}" >"${work}/operator-${label}-${r}.log" 2>&1 &
    op_pid=$!
  fi
  until kubectl -n bench get sa default >/dev/null 2>&1; do sleep 0.2; done
  local deadline=$((SECONDS + 120))
  until curl -sf "127.0.0.1:${health}/readyz" >/dev/null 2>&1; do
    kill -0 "${op_pid}" 2>/dev/null || { echo "${label} exited:" >&2; tail -n 20 "${work}/operator-${label}-${r}.log" >&2; exit 1; }
    ((SECONDS < deadline)) || { echo "${label} not ready in 120 s" >&2; tail -n 20 "${work}/operator-${label}-${r}.log" >&2; exit 1; }
    sleep 0.2
  done
  local api_pid; api_pid=$(awk '$1 == "kube-apiserver" {print $2}' "${dir}/pids")
  local api0; api0=$(cpu_s "${api_pid}")
  kubectl create -f "${work}/jobs.yaml" >/dev/null
  local api1; api1=$(cpu_s "${api_pid}")
  deadline=$((SECONDS + timeout_s))
  local running=0 running_at=""
  while :; do
    running=$(kubectl get pods -n bench --field-selector=status.phase=Running -o name 2>/dev/null | wc -l)
    if ((running >= pods)); then running_at=$(now); break; fi
    ((SECONDS < deadline)) || { echo "${label} run ${r}: only ${running}/${pods} pods Running after ${timeout_s} s" >&2; exit 1; }
    sleep 1
  done
  # Until every job says Running: its status writes count too.
  # (Polled: kubectl wait fails at once on an object with no conditions yet.)
  local jp='{range .items[*]}{.status.conditions[?(@.type=="Running")].status}{"\n"}{end}'
  until (($(kubectl get -n bench "${kind}" -o jsonpath="${jp}" | grep -c '^True$') >= jobs)); do
    ((SECONDS < deadline)) || { echo "${label} run ${r}: not every job Running after ${timeout_s} s" >&2; exit 1; }
    sleep 1
  done
  local cpu rss
  cpu=$(cpu_s "${op_pid}")
  rss=$(awk '/VmHWM/ {print $2}' "/proc/${op_pid}/status")
  settle_endpoints "${label}" "${r}" "${audit}"
  stop_run
  (python3 - "${audit}" "${label}" "${jobs}" "${running_at}" "${cpu}" "${rss}" "$(echo "${api1} - ${api0}" | bc -l)" <<'PY'
import json, sys, collections
from datetime import datetime
audit, label, jobs, running_at, cpu, rss, api_cpu = sys.argv[1:]
jobs = int(jobs)
def utc(s):
    from datetime import timezone
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()
events = []
for line in open(audit):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    if e.get("stage") == "ResponseComplete":
        events.append(e)
def who(ua):
    ua = ua or ""
    if ua.startswith("kubetrain") or ua.startswith("training-operator"): return "operator"
    if ua.startswith("kube-controller-manager"): return "kcm"
    return ua.split("/")[0]
job_creates = [e for e in events if e["verb"] == "create" and e.get("objectRef", {}).get("resource") in ("trainingjobs", "tfjobs")]
t0 = min(utc(e["requestReceivedTimestamp"]) for e in job_creates)
t_jobs = max(utc(e["stageTimestamp"]) for e in job_creates) - t0
pod_creates = [utc(e["stageTimestamp"]) for e in events
               if who(e.get("userAgent")) == "operator" and e["verb"] == "create"
               and e.get("objectRef", {}).get("resource") == "pods" and not e["objectRef"].get("subresource")
               and e.get("responseStatus", {}).get("code") == 201]
writes = collections.Counter()
kcm = collections.Counter()  # the controller-manager's endpoint writes by resource and verb
failed = collections.Counter()
for e in events:
    if e["verb"] not in ("create", "update", "patch", "delete", "deletecollection"): continue
    if utc(e["requestReceivedTimestamp"]) < t0: continue
    w = who(e.get("userAgent")); ref = e.get("objectRef", {})
    res = ref.get("resource", "") + ("/" + ref["subresource"] if ref.get("subresource") else "")
    writes[(w, res)] += 1
    if w == "kcm" and res in ("endpoints", "endpointslices"): kcm[res + " " + e["verb"]] += 1
    if e.get("responseStatus", {}).get("code", 200) >= 400: failed[w] += 1
op = {res: n for (w, res), n in writes.items() if w == "operator"}
kcm_eps = sum(n for (w, res), n in writes.items() if w == "kcm" and res in ("endpoints", "endpointslices"))
print(json.dumps({
    "label": label, "jobs_s": t_jobs, "api_cpu": float(api_cpu),
    "last_pod_s": max(pod_creates) - t0, "pods_created": len(pod_creates),
    "running_s": float(running_at) - t0, "cpu": float(cpu), "rss_mib": int(rss) / 1024,
    "op_writes": sum(op.values()) / jobs, "kcm_ep_writes": kcm_eps / jobs,
    "op_failed": failed["operator"], "op_by_resource": {k: round(v / jobs, 2) for k, v in sorted(op.items())},
    "kcm_by_resource": {k: round(v / jobs, 2) for k, v in sorted(kcm.items())}}))
PY
  ) >>"${results}"
  if [[ -n "${BENCH_KEEP_AUDIT:-}" ]]; then mv "${audit}" "${BENCH_KEEP_AUDIT}/"; else rm -f "${audit}"; fi
}

for ((r = 1; r <= runs; r++)); do
  order=("${contenders[@]}")
  if ((r % 2 == 0)); then  # flip the order every other run
    order=(); for ((c = ${#contenders[@]} - 1; c >= 0; c--)); do order+=("${contenders[c]}"); done
  fi
  for label in "${order[@]}"; do
    # Not in a $(...) subshell: an interrupt must find ${dir} to stop its cluster.
    run_one "${label}" "${r}"
    line="$(tail -n 1 "${results}")"
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print("run %s %-10s jobs created in %.1f s (apiserver %.1f CPU s), last pod create %.1f s, all Running %.1f s, operator %.1f CPU s / %.0f MiB, writes/job %.1f operator + %.1f controller-manager endpoints; %d failed; %s; %s" % (sys.argv[2], d["label"], d["jobs_s"], d["api_cpu"], d["last_pod_s"], d["running_s"], d["cpu"], d["rss_mib"], d["op_writes"], d["kcm_ep_writes"], d["op_failed"], d["op_by_resource"], d["kcm_by_resource"]))' "${line}" "${r}"
  done
done

python3 - "${results}" "${mode}" "${jobs}" "${runs}" "${contenders[@]}" <<'PY'
import json, sys, statistics
path, mode, jobs, runs, *labels = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
med = {l: {k: statistics.median(r[k] for r in rows if r["label"] == l)
           for k in ("jobs_s", "api_cpu", "last_pod_s", "running_s", "cpu", "rss_mib", "op_writes", "kcm_ep_writes")}
       for l in labels}
for m in med.values():
    m["cluster_writes"] = m["op_writes"] + m["kcm_ep_writes"]
figures = [
    ("job creates: first to last (s)", "jobs_s", "%.1f"),
    ("apiserver CPU over the job creates (s)", "api_cpu", "%.1f"),
    ("operator's last pod create, from the first job create (s)", "last_pod_s", "%.1f"),
    ("all pods Running, from the first job create (s)", "running_s", "%.1f"),
    ("operator CPU (s)", "cpu", "%.1f"),
    ("operator peak RSS (MiB)", "rss_mib", "%.0f"),
    ("operator writes per job", "op_writes", "%.1f"),
    ("controller-manager Endpoints+EndpointSlice writes per job", "kcm_ep_writes", "%.1f"),
    ("whole-cluster writes per job (operator + endpoints)", "cluster_writes", "%.1f"),
]
print(f"\n{mode}, {jobs} jobs of 1 PS + 4 workers, 10 kwok nodes, medians of {runs} alternating runs:\n")
ratio = len(labels) == 2
print("| | " + " | ".join(labels) + (" | ratio |" if ratio else " |"))
print("|---" * (len(labels) + 1 + ratio) + "|")
for name, key, fmt in figures:
    cells = [fmt % med[l][key] for l in labels]
    if ratio:
        b = med[labels[1]][key]
        cells.append("%.2f" % (med[labels[0]][key] / b) if b else "-")
    print(f"| {name} | " + " | ".join(cells) + " |")
PY

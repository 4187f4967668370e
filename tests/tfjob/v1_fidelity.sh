#!/usr/bin/env bash
# Do operator/planner/tfjob_v1.h's rules create what training-operator v1.9.3
# creates? Starts a control plane with kwok nodes (tests/cluster/up), v1.9.3's
# CRD and operator (built by bench/controller/build-training-operator from its
# Go module), applies each TFJob manifest (ours and v1.9.3's examples) and
# compares, field by field, every Pod and Service v1.9.3 created with what
# tfjob_v1_render prints: names, labels, the tensorflow container's ports and
# env (TF_CONFIG parsed and compared whole), restartPolicy; Service selector
# and ports. Prints each difference; exits 1 if there is any.
# Usage: tests/tfjob/v1_fidelity.sh <build dir>
# Manual (not in CI: it builds the peer). Stops only the processes it started.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$(realpath "${1:?usage: v1_fidelity.sh <build dir>}")"
render="${build}/tests/tfjob/tfjob_v1_render"
[[ -x ${render} ]] || { echo "build tfjob_v1_render first" >&2; exit 2; }
bin="$("${root}/tests/cluster/build")" || exit 2
export PATH="${bin}:${PATH}"
peer="$("${root}/bench/controller/build-training-operator")" || exit 2
moddir="$(go env GOMODCACHE)/github.com/kubeflow/training-operator@v1.9.3"
work="$(mktemp -d /tmp/kubetrain-v1-fidelity.XXXXXX)"
op_pid=""
cleanup() {
  if [[ -n ${op_pid} ]]; then kill -TERM "${op_pid}" 2>/dev/null; wait "${op_pid}" 2>/dev/null; fi
  "${root}/tests/cluster/down" "${work}/cluster" >/dev/null 2>&1
  rm -rf "${work}"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

KUBETRAIN_TEST_NODES=3 "${root}/tests/cluster/up" "${work}/cluster" >/dev/null || { echo "FAIL: no cluster"; exit 1; }
export KUBECONFIG="${work}/cluster/kubeconfig"
kubectl apply --server-side -f "${peer}/crds/kubeflow.org_tfjobs.yaml" >/dev/null
"${root}/tests/tools/wait-crds" crd/tfjobs.kubeflow.org >/dev/null
kubectl create namespace kubeflow >/dev/null
kubectl create namespace fid >/dev/null
kubectl -n kubeflow create secret generic training-operator-webhook-cert >/dev/null
mkdir -p /tmp/k8s-webhook-server/serving-certs
if [[ ! -f /tmp/k8s-webhook-server/serving-certs/tls.crt ]]; then
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
    -keyout /tmp/k8s-webhook-server/serving-certs/tls.key \
    -out /tmp/k8s-webhook-server/serving-certs/tls.crt >/dev/null 2>&1
fi
MY_POD_NAMESPACE=kubeflow "${peer}/bin/training-operator" --enable-scheme=tfjob --leader-elect=false \
  --metrics-bind-address "127.0.0.1:$(free_port)" --health-probe-bind-address "127.0.0.1:$(free_port)" \
  --webhook-server-port "$(free_port)" >"${work}/operator.log" 2>&1 &
op_pid=$!

files=("${root}"/operator/api/testdata/tfjob/{ps-worker,chief-ps-worker-evaluator}.yaml)
while IFS= read -r f; do files+=("$f"); done < <(grep -rlE '^kind: "?TFJob"?' "${moddir}/examples" | sort)
diffs=0
for f in "${files[@]}"; do
  sed '/^  namespace: /d' "$f" >"${work}/job.yaml"
  name="$(kubectl create -n fid -f "${work}/job.yaml" -o jsonpath='{.metadata.name}')" || { echo "FAIL: $f not created"; diffs=$((diffs + 1)); continue; }
  want="$("${render}" "${work}/job.yaml" fid | python3 -c 'import json,sys; print(sum(1 for o in json.load(sys.stdin) if o["kind"]=="Pod"))')"
  deadline=$((SECONDS + 120))
  until [[ "$(kubectl get pods -n fid -l "training.kubeflow.org/job-name=${name}" -o name | wc -l)" -ge ${want} &&
    "$(kubectl get services -n fid -l "training.kubeflow.org/job-name=${name}" -o name | wc -l)" -ge ${want} ]]; do
    ((SECONDS < deadline)) || { echo "FAIL: ${name}: v1.9.3 made no ${want} pods and Services in 120 s"; tail -20 "${work}/operator.log"; exit 1; }
    sleep 0.5
  done
  kubectl get pods,services -n fid -l "training.kubeflow.org/job-name=${name}" -o json >"${work}/peer.json"
  "${render}" "${work}/job.yaml" fid >"${work}/ours.json"
  python3 - "${work}/peer.json" "${work}/ours.json" "$(basename "$f")" <<'PY' || diffs=$((diffs + 1))
import json, sys
peer = {(o["kind"], o["metadata"]["name"]): o for o in json.load(open(sys.argv[1]))["items"]}
ours = {(o["kind"], o["metadata"]["name"]): o for o in json.load(open(sys.argv[2]))}
label = sys.argv[3]
bad = []
if set(peer) != set(ours):
    bad.append(f"objects: v1 {sorted(set(peer) - set(ours))} only, ours {sorted(set(ours) - set(peer))} only")
def tf(pod):
    cs = pod["spec"]["containers"]
    return next((c for c in cs if c["name"] == "tensorflow"), cs[0])
def env(c):
    out = {}
    for e in c.get("env", []):
        v = e.get("value")
        if e["name"] == "TF_CONFIG":
            v = json.loads(v)
        out[e["name"]] = v
    return out
def ports(c):
    return sorted((p.get("name"), p["containerPort"]) for p in c.get("ports", []))
for key in sorted(set(peer) & set(ours)):
    p, o = peer[key], ours[key]
    def cmp(what, a, b):
        if a != b:
            bad.append(f"{key[0]} {key[1]} {what}: v1 {a!r}, ours {b!r}")
    cmp("labels", p["metadata"].get("labels"), o["metadata"].get("labels"))
    if key[0] == "Pod":
        cmp("restartPolicy", p["spec"].get("restartPolicy"), o["spec"].get("restartPolicy"))
        cmp("tensorflow ports", ports(tf(p)), ports(tf(o)))
        cmp("tensorflow env", env(tf(p)), env(tf(o)))
        if "TF_CONFIG" in env(tf(p)):
            raw_p = next(e["value"] for e in tf(p)["env"] if e["name"] == "TF_CONFIG")
            raw_o = next(e["value"] for e in tf(o)["env"] if e["name"] == "TF_CONFIG")
            cmp("TF_CONFIG bytes", raw_p, raw_o)
    else:
        cmp("selector", p["spec"].get("selector"), o["spec"].get("selector"))
        cmp("clusterIP", p["spec"].get("clusterIP"), o["spec"].get("clusterIP"))
        cmp("ports", sorted((x.get("name"), x["port"]) for x in p["spec"]["ports"]),
            sorted((x.get("name"), x["port"]) for x in o["spec"]["ports"]))
for b in bad:
    print(f"DIFF {label}: {b}")
print(f"{label}: {len(set(peer) & set(ours))} objects compared, {len(bad)} differences")
sys.exit(1 if bad else 0)
PY
done
((diffs == 0)) || { echo "FAIL: ${diffs} manifests differ"; exit 1; }
echo "PASS: ${#files[@]} manifests, every Pod and Service as v1.9.3 creates it"

#!/usr/bin/env bash
# The job's NetworkPolicy, enforced for real: the node runs kube-router's
# network policy controller (tests/cluster/node-up). While a 2 PS + 2 worker
# job trains in one namespace, a pod in another namespace cannot open its
# training port or its metrics port; the installed operator still reads
# status.progress through the metrics port; with the policy deleted, the same
# probe connects (so the probe works and the policy was what stopped it); the
# job succeeds. The operator's own namespace policy holds as well.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns outsider
other="${ns}"
restricted_ns netpol

# The outsider: a plain Debian pod that probes with bash's /dev/tcp.
cat <<POD | kubectl -n "${other}" apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: prober}
spec:
  nodeSelector: {type: real}
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
  terminationGracePeriodSeconds: 1
  containers:
    - name: prober
      image: ${KUBETRAIN_DEBIAN_IMAGE}
      command: [sleep, infinity]
      resources: {requests: {cpu: 10m, memory: 16Mi}}
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
POD
# probe IP PORT: "open" when a TCP connection from the outsider succeeds within 3 s.
probe() {
  kubectl -n "${other}" exec prober -- bash -c \
    "if timeout 3 bash -c '</dev/tcp/$1/$2' 2>/dev/null; then echo open; else echo closed; fi" 2>/dev/null
}

# Long enough for the checks below (the test's operator reads a job every 2 s,
# tests/node/lib.sh; the probes take up to 3 s each; 4,000 steps took 28 s on the
# 2-core test machine, this about 80 s), short enough to finish: the job must
# succeed with the policy in force.
args='args: [--model=wide_deep, "--layers=64,32", --data-dir=/tmp/data, --generate-data=50000, --steps=12000, --batch-size=256, --threads=1]'
started=${SECONDS}
trainer_job guarded "${args}"
kubectl -n "${other}" wait --for=condition=Ready pod/prober --timeout "${T}s" >/dev/null ||
  fail "the prober pod is not Ready"
WAIT_SECONDS=300 wait_state guarded Running
policy="$(k get networkpolicy -l kubetrain.io/job-name=guarded -o name)"
check "the job has its NetworkPolicy" "$(grep -c . <<<"${policy}")" 1
programmed() { iptables-save -t filter | grep -q '^:KUBE-NWPLCY-'; }
wait_until "kube-router to program a policy chain" programmed
ip_of() { k get pod "$1" -o jsonpath='{.status.podIP}'; }
ps_ip="$(ip_of guarded-ps-0)" worker_ip="$(ip_of guarded-worker-0)"
has_progress() { [[ -n "$(k get tj guarded -o jsonpath='{.status.progress.step}')" ]]; }
WAIT_SECONDS=180 wait_until "status.progress (the operator reads the metrics port)" has_progress
check "the operator reads worker-0's progress through the policy" \
  "$(k get tj guarded -o jsonpath='{.status.progress.replica}')" worker-0
check "the outsider cannot open the PS's training port ${ps_ip}:2222" "$(probe "${ps_ip}" 2222)" closed
check "the outsider cannot open worker-0's metrics port ${worker_ip}:9090" "$(probe "${worker_ip}" 9090)" closed
check "the outsider cannot open the PS's metrics port ${ps_ip}:9090" "$(probe "${ps_ip}" 9090)" closed
check "the job is still running (the probes ran against live ports)" "$(job_state guarded)" Running
# The operator's own namespace policy (deploy/kustomize/base/networkpolicy.yaml)
# holds too: /metrics only from the monitoring namespace, the health port from anywhere.
op_ip="$(kubectl -n kubetrain-system get pods -l app.kubernetes.io/name=kubetrain-operator \
  -o jsonpath='{.items[0].status.podIP}')"
check "the outsider cannot open the operator's metrics port ${op_ip}:8080" "$(probe "${op_ip}" 8080)" closed
check "the outsider reaches the operator's health port ${op_ip}:8081" "$(probe "${op_ip}" 8081)" open

# The control: without the policy the same probe connects.
k delete ${policy} >/dev/null
open_now() { [[ "$(probe "${worker_ip}" 9090)" == open ]]; }
WAIT_SECONDS=60 wait_until "the outsider to reach the metrics port once the policy is gone" open_now
check "without the policy the outsider opens worker-0's metrics port" "$(probe "${worker_ip}" 9090)" open

WAIT_SECONDS=600 wait_state guarded Succeeded
check "the job succeeded" "$(job_state guarded)" Succeeded
echo "  Running to Succeeded: $((SECONDS - started)) s after the job was created"
if ((failures)); then
  k get tj guarded -o yaml | tail -40; k get pods -o wide; k get networkpolicy -o yaml
  iptables-save -t filter | grep -E 'KUBE-(ROUTER|POD-FW|NWPLCY)' | head -60
  tail -n 30 "${node_cluster}/logs/kube-router.log"
fi
k delete tj guarded --wait=false >/dev/null
((failures == 0)) && echo "network policy test passed"
((failures == 0))

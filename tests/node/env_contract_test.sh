#!/usr/bin/env bash
# Any image: a plain Debian image running a shell script, in a namespace that
# enforces Pod Security `restricted`, gets CLUSTER_CONFIG, POD_NAME, TF_CONFIG
# and KUBETRAIN_AUTH_KEY, resolves every peer host in CLUSTER_CONFIG through
# the cluster DNS, and exits 0; the job succeeds. Runs on the real node. Also:
# `kubectl exec` and `kubectl logs` work, and the kubernetes Service resolves.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns env

# Every replica checks its environment and resolves its peers (with retries:
# a peer's DNS record appears when its pod has an address), then reports.
script='
set -eu
[ -n "${CLUSTER_CONFIG:-}" ] || { echo "no CLUSTER_CONFIG" >&2; exit 1; }
[ -n "${POD_NAME:-}" ] || { echo "no POD_NAME" >&2; exit 1; }
case "${TF_CONFIG:-}" in *"\"task\""*) ;; *) echo "no TF_CONFIG task" >&2; exit 1 ;; esac
[ "${#KUBETRAIN_AUTH_KEY}" -eq 64 ] || { echo "bad KUBETRAIN_AUTH_KEY length ${#KUBETRAIN_AUTH_KEY}" >&2; exit 1; }
hosts=$(echo "$CLUSTER_CONFIG" | grep -o "[a-z0-9.-]*:[0-9]*" | cut -d: -f1)
n=0
for h in $hosts; do
  tries=0
  until getent hosts "$h" >/dev/null; do
    tries=$((tries + 1)); [ $tries -lt 120 ] || { echo "cannot resolve $h" >&2; exit 1; }
    sleep 0.5
  done
  n=$((n + 1))
done
printf "{\"pod\":\"%s\",\"resolved\":%d,\"hosts\":\"%s\"}" "$POD_NAME" "$n" "$(echo $hosts)" >/dev/termination-log
echo "$POD_NAME resolved $n peers"
'
sh_job contract "PS=1 Worker=2" "${script}"
wait_state contract Succeeded
check "the job succeeded" "$(job_state contract)" Succeeded
msg="$(k get pod contract-worker-0 -o jsonpath='{.status.containerStatuses[0].state.terminated.message}')"
check "worker-0 resolved all 3 peers by DNS" "$(sed -n 's/.*"pod":"\([^"]*\)","resolved":\([0-9]*\).*/\1 \2/p' <<<"${msg}")" "worker-0 3"
check "worker-0 exited 0" \
  "$(k get pod contract-worker-0 -o jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}')" 0
# serviceMode JobWide (the default): each pod's hostname under the job's Service.
want="contract-ps-0.contract.${ns}.svc.cluster.local contract-worker-0.contract.${ns}.svc.cluster.local"
want+=" contract-worker-1.contract.${ns}.svc.cluster.local"
check "CLUSTER_CONFIG names every peer by its cluster DNS name" \
  "$(sed -n 's/.*"hosts":"\([^"]*\)".*/\1/p' <<<"${msg}" | tr ' ' '\n' | sort | xargs)" "${want}"
# kubectl exec and logs reach the kubelet; the kubernetes Service resolves in-cluster.
cat <<POD | k apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: shell}
spec:
  nodeSelector: {type: real}
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: sh
      image: ${KUBETRAIN_DEBIAN_IMAGE}
      command: [sh, -c, "echo hello from the node; exec sleep 600"]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
POD
k wait --for=condition=Ready pod/shell --timeout "${T}s" >/dev/null
check "kubectl exec works" "$(k exec shell -- sh -c 'echo exec-ok')" exec-ok
check "kubectl logs works" "$(k logs shell)" "hello from the node"
check "kubernetes.default resolves to the Service IP" \
  "$(k exec shell -- getent hosts kubernetes.default.svc.cluster.local | awk '{print $1}')" "${KT_KUBERNETES_SERVICE_IP}"
k delete pod shell --wait=false >/dev/null
if ((failures)); then k get pods -o wide; k describe tj contract | tail -20; k logs contract-worker-0 2>&1 | tail; fi
((failures == 0)) && echo "env contract test passed"
((failures == 0))

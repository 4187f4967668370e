#!/usr/bin/env bash
# Failure: a PS process is SIGKILLed inside its container after the first
# checkpoint. The pod fails with a retryable exit code (137), the operator
# replaces it (restartPolicy ExitCode), the new PS restores its shard from the
# checkpoint on the volume it shares with the coordinator (a PersistentVolume on
# this node), and the job succeeds with exactly one PS restart.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1
restricted_ns failure

ckpt="${work}/ckpt"
mkdir -p "${ckpt}"
chmod 0777 "${ckpt}"
pv="kubetrain-ckpt-${ns}"
cat <<PV | kubectl apply -f - >/dev/null
apiVersion: v1
kind: PersistentVolume
metadata: {name: ${pv}}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: ${ns}, name: ckpt}
  hostPath: {path: ${ckpt}, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ckpt, namespace: ${ns}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: ${pv}
  resources: {requests: {storage: 1Gi}}
PV
trap 'kubectl delete pv "${pv}" --wait=false >/dev/null 2>&1; node_cleanup' EXIT
bound() { [[ "$(k get pvc ckpt -o jsonpath='{.status.phase}')" == Bound ]]; }
wait_until "the checkpoint claim to bind" bound

args='args: [--model=wide_deep, "--layers=64,32", --data-dir=/tmp/data, --generate-data=50000, --steps=3000, --batch-size=128, --threads=1, --checkpoint-dir=/ckpt, --checkpoint-every=100]'
vol=', {name: ckpt, persistentVolumeClaim: {claimName: ckpt}}'
mnt=', {name: ckpt, mountPath: /ckpt}'
trainer_job resume "${args}" "${vol}" "${mnt}"

checkpointed() { compgen -G "${ckpt}/ckpt-*/MANIFEST" >/dev/null; }
WAIT_SECONDS=300 wait_until "the first complete checkpoint" checkpointed
first_uid="$(k get pod resume-ps-0 -o jsonpath='{.metadata.uid}')"
# The PS's container, found through the node's containerd, killed from outside.
cid="$(ctr_ containers ls -q "labels.\"io.kubernetes.pod.name\"==resume-ps-0,labels.\"io.kubernetes.container.name\"==trainer" | sed -n 1p)"
check "found resume-ps-0's container in containerd" "$([[ -n "${cid}" ]] && echo yes)" yes
ctr_ tasks kill --signal SIGKILL "${cid}" >/dev/null
check "SIGKILL delivered" "$?" 0

replaced() { local u; u="$(k get pod resume-ps-0 -o jsonpath='{.metadata.uid}' 2>/dev/null)"; [[ -n "${u}" && "${u}" != "${first_uid}" ]]; }
wait_until "resume-ps-0 to be replaced" replaced
# Read before success: cleanPodPolicy Running removes the PS pods then.
restored() { k logs resume-ps-0 2>/dev/null | grep -q 'restored shard from checkpoint'; }
wait_until "the new PS to restore its shard from the checkpoint" restored
k logs resume-ps-0 >"${work}/ps0.log" 2>&1
check "the new PS restored its shard from the checkpoint" \
  "$(grep -c 'restored shard from checkpoint' "${work}/ps0.log")" 1
WAIT_SECONDS=600 wait_state resume Succeeded
check "the job succeeded" "$(job_state resume)" Succeeded
check "one PS restart" "$(k get tj resume -o jsonpath='{.status.replicaStatuses.PS.restarts}')" 1
check "the failure was exit code 137" \
  "$(k get tj resume -o jsonpath='{.status.replicaStatuses.PS.lastFailure.exitCode}')" 137
events="$(k get events --field-selector involvedObject.name=resume -o jsonpath='{range .items[*]}{.reason} {end}')"
echo "  job events: ${events}"
if ((failures)); then
  k get tj resume -o yaml | tail -40; k get pods -o wide; tail -20 "${work}/ps0.log"
fi
((failures == 0)) && echo "failure test passed"
((failures == 0))

#!/usr/bin/env bash
# Seed 004's flow on the real node: a job trains Wide & Deep with its data in S3
# (versitygw on the node's bridge address) and writes --output to S3; a Deployment of
# kubetrain-serve (the trainer image) loads the model from S3, in a namespace enforcing Pod
# Security `restricted`; a client on the host computes the AUC over the evaluation file
# through the Service (TF Serving REST, raw Criteo lines, requests of the job's batch size)
# and gets the job's own evaluation AUC (within 1e-6). Then a second job commits a newer
# model to the same --output and the same pod serves it (hot reload, no restart).
# The data's categorical values all occur in training (a small vocabulary), so the job's
# evaluation and the server use the same trained rows.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap node_cleanup EXIT
ensure_operator || exit 1
restricted_ns serve
node_s3_up ktserve || exit 1
python3 - "${work}" <<'PY'
import random, sys
rnd = random.Random(11)
def rows(n):
    out = []
    for _ in range(n):
        c1 = rnd.choice(["aa", "bb"])
        label = int(rnd.random() < (0.8 if c1 == "aa" else 0.2))
        dense = [str(rnd.randint(0, 100)) for _ in range(13)]
        cats = [c1] + ["v%d" % rnd.randint(0, 7) for _ in range(25)]
        out.append("\t".join([str(label)] + dense + cats))
    return "\n".join(out) + "\n"
open(f"{sys.argv[1]}/train.tsv", "w").write(rows(8000))
open(f"{sys.argv[1]}/eval.tsv", "w").write(rows(2000))
PY
for f in train eval; do
  s3 PUT "/data/${f}.tsv" "${work}/${f}.tsv" >/dev/null || fail "cannot upload ${f}.tsv"
done
k create secret generic s3-credentials --from-literal=AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID}" \
  --from-literal=AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY}" \
  --from-literal=AWS_REGION="${AWS_REGION}" \
  --from-literal=AWS_ENDPOINT_URL_S3="${AWS_ENDPOINT_URL_S3}" >/dev/null
env_from=$'\n              envFrom: [{secretRef: {name: s3-credentials}}]'

train() {  # train NAME STEPS: one worker (single process), --output to S3
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  runPolicy: {backoffLimit: 2, activeDeadlineSeconds: 600}
  replicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: ExitCode
$(pod_template "${KUBETRAIN_TRAINER_IMAGE}" "args: [--model=wide_deep, \"--layers=32,16\", --threads=1, --data=s3://${bucket}/data/, --steps=$2, --batch-size=128, --output=s3://${bucket}/out/]${env_from}")
JOB
  WAIT_SECONDS=600 wait_state "$1" Succeeded
  check "job $1 succeeded" "$(job_state "$1")" Succeeded
}
train serve-train-1 200

cat <<DEP | k apply -f - >/dev/null
apiVersion: apps/v1
kind: Deployment
metadata: {name: ctr}
spec:
  replicas: 1
  selector: {matchLabels: {app: ctr}}
  template:
    metadata: {labels: {app: ctr}}
    spec:
      nodeSelector: {type: real}
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: serve
          image: ${KUBETRAIN_TRAINER_IMAGE}
          command: [/usr/local/bin/kubetrain-serve]
          args: [--model=s3://${bucket}/out/, --model-name=ctr, --port=8080, --threads=1, --poll-interval=1]
          envFrom: [{secretRef: {name: s3-credentials}}]
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /v2/health/ready, port: http}, periodSeconds: 1}
          resources: {requests: {cpu: 50m, memory: 64Mi}}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Service
metadata: {name: ctr}
spec:
  selector: {app: ctr}
  ports: [{name: http, port: 80, targetPort: http}]
DEP
k rollout status deployment/ctr --timeout=180s >/dev/null || fail "the kubetrain-serve Deployment did not become ready"
ip="$(jpath service/ctr '{.spec.clusterIP}')"
pod="$(k get pods -l app=ctr -o jsonpath='{.items[0].metadata.name}')"
# A Ready pod is not yet a reachable Service: the proxy programs the ClusterIP's rules
# after the endpoints change. Wait (with wait_until's deadline) until the Service answers.
wait_until "the Service ${ip} to answer /v2/health/ready" \
  curl -sf -o /dev/null --max-time 2 "http://${ip}/v2/health/ready"

# auc: the AUC over eval.tsv through the Service (the trainer's Mann-Whitney with average
# ranks for ties), in requests of 128 lines (the job's evaluation batch size).
auc() {
  python3 - "${ip}" "${work}/eval.tsv" <<'PY'
import json, sys, urllib.request
ip, path = sys.argv[1], sys.argv[2]
lines = [l for l in open(path).read().split("\n") if l]
scores = []
for b in range(0, len(lines), 128):
    req = urllib.request.Request(f"http://{ip}/v1/models/ctr:predict",
                                 json.dumps({"instances": lines[b:b + 128]}).encode(),
                                 {"Content-Type": "application/json"})
    scores += [p[0] for p in json.load(urllib.request.urlopen(req, timeout=30))["predictions"]]
labels = [int(l.split("\t", 1)[0]) for l in lines]
order = sorted(range(len(scores)), key=lambda i: scores[i])
rank_sum = pos = 0.0
i = 0
while i < len(order):
    j = i
    while j < len(order) and scores[order[j]] == scores[order[i]]:
        j += 1
    avg = (i + j + 1) / 2
    for k in range(i, j):
        if labels[order[k]]:
            rank_sum += avg
            pos += 1
    i = j
neg = len(order) - pos
print((rank_sum - pos * (pos + 1) / 2) / (pos * neg))
PY
}
job_auc() { s3 GET /out/metrics.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["eval"]["auc"])'; }
close() { python3 -c 'import sys; a, b = map(float, sys.argv[1:]); print(abs(a - b) <= 1e-6 and a > 0.7)' "$1" "$2"; }
served="$(auc)" || fail "the client could not score eval.tsv through the Service ${ip}"
want="$(job_auc)"
check "AUC through the Service (${served}) equals the job's (${want}) within 1e-6" "$(close "${served:-0}" "${want:-1}")" True

# Hot reload: a newer model committed to the same --output.
train serve-train-2 300
version() { python3 -c 'import json,sys,urllib.request; print(json.load(urllib.request.urlopen("http://%s/v2/models/ctr" % sys.argv[1], timeout=5))["versions"][0])' "${ip}"; }
wait_until "the served model is the step-300 one" bash -c "[[ \$(python3 -c 'import json,sys,urllib.request; print(json.load(urllib.request.urlopen(\"http://${ip}/v2/models/ctr\", timeout=5))[\"versions\"][0])') == 300 ]]"
check "served version after the second job" "$(version)" 300
check "the same pod serves it (no restart)" "$(k get pods -l app=ctr -o jsonpath='{.items[0].metadata.name}/{.items[0].status.containerStatuses[0].restartCount}')" "${pod}/0"
served="$(auc)" || fail "scoring after the reload failed"
want="$(job_auc)"
check "after the reload: AUC through the Service (${served}) equals the new job's (${want})" "$(close "${served:-0}" "${want:-1}")" True
if ((failures)); then
  k get pods -o wide; k logs deployment/ctr --tail 30 2>&1
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 15 2>&1; done
fi
((failures == 0)) && echo "serve node test passed (AUC ${served})"
((failures == 0))

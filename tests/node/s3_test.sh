#!/usr/bin/env bash
# S3 from pods on the real node, with no shared volume: a real S3 server
# (versitygw, which checks SigV4 signatures) listens on the node's bridge address,
# where pods reach it like any endpoint outside the cluster. Its credentials are in a
# Secret that the pods get with envFrom. 2 PS + 2 workers in a namespace that
# enforces Pod Security `restricted`: the workers stream their data from S3, every
# replica checkpoints to S3, the coordinator writes the model and metrics.json to
# S3. The job succeeds; the checkpoint MANIFEST, the model and metrics.json are in
# the bucket; the AUC shows the model learnt the signal planted in the S3 data.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
trap node_cleanup EXIT
ensure_operator || exit 1
restricted_ns s3
node_s3_up ktnode || exit 1
# Criteo-format data with a planted signal: the label follows C1 ("aa": 80% clicks,
# "bb": 20%), so a model that really read these objects reaches an AUC near 0.8.
python3 - "${work}" <<'PY'
import random, sys
rnd = random.Random(7)
def rows(n):
    out = []
    for _ in range(n):
        c1 = rnd.choice(["aa", "bb"])
        label = int(rnd.random() < (0.8 if c1 == "aa" else 0.2))
        dense = [str(rnd.randint(0, 100)) for _ in range(13)]
        cats = [c1] + ["%08x" % rnd.getrandbits(12) for _ in range(25)]
        out.append("\t".join([str(label)] + dense + cats))
    return "\n".join(out) + "\n"
for i in range(4):
    open(f"{sys.argv[1]}/train-{i}.tsv", "w").write(rows(5000))
open(f"{sys.argv[1]}/eval.tsv", "w").write(rows(2000))
PY
for f in train-0 train-1 train-2 train-3 eval; do
  s3 PUT "/data/${f}.tsv" "${work}/${f}.tsv" >/dev/null || fail "cannot upload ${f}.tsv"
done
k create secret generic s3-credentials --from-literal=AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID}" \
  --from-literal=AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY}" \
  --from-literal=AWS_REGION="${AWS_REGION}" \
  --from-literal=AWS_ENDPOINT_URL_S3="${AWS_ENDPOINT_URL_S3}" >/dev/null

ckpt="--checkpoint-dir=s3://${bucket}/ckpt/"
common='--model=wide_deep, "--layers=32,16", --threads=1'
env_from=$'\n              envFrom: [{secretRef: {name: s3-credentials}}]'
cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: wide-deep-s3}
spec:
  runPolicy: {backoffLimit: 3, activeDeadlineSeconds: 900}
  replicaSpecs:
    PS:
      replicas: 2
      restartPolicy: ExitCode
$(pod_template "${KUBETRAIN_TRAINER_IMAGE}" "args: [${common}, ${ckpt}]${env_from}")
    Worker:
      replicas: 2
      restartPolicy: ExitCode
$(pod_template "${KUBETRAIN_TRAINER_IMAGE}" "args: [${common}, ${ckpt}, --data=s3://${bucket}/data/, --checkpoint-every=100, --steps=300, --batch-size=128, --output=s3://${bucket}/out/]${env_from}")
JOB
WAIT_SECONDS=600 wait_state wide-deep-s3 Succeeded
check "the job with data and checkpoints in S3 succeeded" "$(job_state wide-deep-s3)" Succeeded
listing="$(s3 GET "?list-type=2" || true)"
has_key() { grep -Eq "<Key>$1</Key>" <<<"${listing}" && echo yes; }
check "a committed checkpoint (its MANIFEST) is in S3" "$(has_key 'ckpt/[^<]*/MANIFEST')" yes
check "the model (a committed checkpoint) is in S3" "$(has_key 'out/model/[^<]*/MANIFEST')" yes
metrics="$(s3 GET /out/metrics.json || true)"
auc="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["eval"]["auc"])' "${metrics}" 2>/dev/null)"
check "metrics.json in S3 has an AUC above 0.7 (the planted signal; got '${auc}')" \
  "$(python3 -c "import sys; print(float(sys.argv[1]) > 0.7)" "${auc:-0}" 2>/dev/null)" True
if ((failures)); then
  k get tj wide-deep-s3 -o yaml | tail -30; k get pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 15 2>&1; done
  echo "== S3 objects"; grep -o '<Key>[^<]*</Key>' <<<"${listing}" | head -30
fi
((failures == 0)) && echo "s3 node test passed (AUC ${auc})"
((failures == 0))

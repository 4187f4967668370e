#!/usr/bin/env bash
# examples/wide-deep-s3.yaml under `kubetrain run` against the real S3 server of the
# `s3` fixture: the job file's Secret (its values replaced by this server's) reaches the
# local processes through envFrom; they read the data from S3, checkpoint to it and
# write the model and metrics there.
#   KUBETRAIN, KUBETRAIN_TRAINER: the binaries; KUBETRAIN_TEST_S3_DIR: the fixture's dir.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${KUBETRAIN:?}" "${KUBETRAIN_TRAINER:?}" "${KUBETRAIN_TEST_S3_DIR:?}"
# shellcheck disable=SC1091
source "${KUBETRAIN_TEST_S3_DIR}/s3.env"
tmp="$(mktemp -d /tmp/kubetrain-s3-example.XXXXXX)"
trap 'rm -rf "${tmp}"' EXIT
fail() {
  echo "FAIL: $*" >&2
  [[ -f ${tmp}/out ]] && tail -n 40 "${tmp}/out" >&2
  exit 1
}
empty_sha=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
s3() {  # s3 METHOD PATH [FILE]: a signed request (curl signs SigV4); prints the body
  local method=$1 path=$2 file=${3:-}
  local sha=${empty_sha}
  [[ -n ${file} ]] && sha=$(sha256sum "${file}" | cut -d' ' -f1)
  local verb=(-X "${method}")
  [[ ${method} == HEAD ]] && verb=(-I)  # -X HEAD would wait for a body
  curl -sf --max-time 60 "${verb[@]}" ${file:+-T "${file}"} -H "x-amz-content-sha256: ${sha}" \
    -H 'Content-Type: application/octet-stream' \
    --aws-sigv4 "aws:amz:${AWS_REGION}:s3" --user "${AWS_ACCESS_KEY_ID}:${AWS_SECRET_ACCESS_KEY}" \
    "${AWS_ENDPOINT_URL_S3}${path}"
}

# The data: synthetic Criteo lines, as two training objects and one evaluation object.
"${KUBETRAIN_TRAINER}" --generate-data=20000 --generate-eval=4000 --data-dir="${tmp}/data" \
  --steps=1 --no-eval --threads=1 --termination-log=/dev/null >"${tmp}/gen.log" 2>&1 ||
  { cat "${tmp}/gen.log" >&2; fail "generating data"; }
split -n l/2 -d --additional-suffix=.tsv "${tmp}/data/train.tsv" "${tmp}/train-"
s3 PUT /kubetrain-examples >/dev/null || true  # exists already on a rerun
for f in train-00.tsv train-01.tsv; do s3 PUT "/kubetrain-examples/criteo/${f}" "${tmp}/${f}" >/dev/null; done
s3 PUT /kubetrain-examples/criteo/eval.tsv "${tmp}/data/eval.tsv" >/dev/null

# The example with this server's credentials in its Secret, and a smaller model.
sed -E -e "s|AWS_ACCESS_KEY_ID: .*|AWS_ACCESS_KEY_ID: ${AWS_ACCESS_KEY_ID}|" \
  -e "s|AWS_SECRET_ACCESS_KEY: .*|AWS_SECRET_ACCESS_KEY: ${AWS_SECRET_ACCESS_KEY}|" \
  -e "s|AWS_ENDPOINT_URL_S3: .*|AWS_ENDPOINT_URL_S3: ${AWS_ENDPOINT_URL_S3}|" \
  -e 's|"--layers=256,128"|"--layers=32,16"|' \
  -e 's|^( *)- --model=wide_deep$|\1- --model=wide_deep\n\1- --threads=1\n\1- --embedding-dim=8|' \
  -e 's|--steps=400|--steps=200|' \
  "${here}/../../examples/wide-deep-s3.yaml" >"${tmp}/job.yaml"
grep -q "${AWS_SECRET_ACCESS_KEY}" "${tmp}/job.yaml" || fail "the Secret was not rewritten"
# The processes get the credentials only from the file's Secret.
env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_ENDPOINT_URL_S3 -u AWS_REGION \
  "${KUBETRAIN}" run -f "${tmp}/job.yaml" >"${tmp}/out" 2>&1 || fail "kubetrain run: exit code $?"
grep -q '^result: Succeeded' "${tmp}/out" || fail "the job did not succeed"
grep -Eq 'metrics worker-0: AUC 0\.[0-9]+' "${tmp}/out" || fail "no metrics from worker-0"
metrics="$(s3 GET /kubetrain-examples/output/wide-deep-s3/metrics.json)" || fail "no metrics.json in S3"
echo "${metrics}" | grep -q '"steps": 200' || fail "metrics.json: ${metrics}"
s3 HEAD /kubetrain-examples/output/wide-deep-s3/model/ckpt-200/MANIFEST >/dev/null ||
  fail "no committed model in S3"
s3 HEAD /kubetrain-examples/checkpoints/wide-deep-s3/ckpt-200/MANIFEST >/dev/null ||
  fail "no final checkpoint in S3"
echo "PASS: examples/wide-deep-s3.yaml ran under kubetrain run against the real S3 server"

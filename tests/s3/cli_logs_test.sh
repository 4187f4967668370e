#!/usr/bin/env bash
# `kubetrain logs --dir s3://...` against the real S3 server of the `s3` fixture:
# the saved tails a trainer writes to <output>/logs/<replica>.log are read from
# S3 (the AWS_* variables, as the trainer reads them) and printed per replica.
#   KUBETRAIN: the binary; KUBETRAIN_TEST_S3_DIR: the fixture's dir.
set -uo pipefail
: "${KUBETRAIN:?}" "${KUBETRAIN_TEST_S3_DIR:?}"
# shellcheck disable=SC1091
source "${KUBETRAIN_TEST_S3_DIR}/s3.env"
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_ENDPOINT_URL_S3 AWS_REGION
tmp="$(mktemp -d /tmp/kubetrain-s3-logs.XXXXXX)"
trap 'rm -rf "${tmp}"' EXIT
fail() {
  echo "FAIL: $*" >&2
  [[ -f ${tmp}/out ]] && cat "${tmp}/out" "${tmp}/err" >&2
  exit 1
}
empty_sha=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
s3_put() {  # s3_put PATH [FILE]: a signed PUT (curl signs SigV4)
  local sha=${empty_sha}
  [[ -n ${2:-} ]] && sha=$(sha256sum "$2" | cut -d' ' -f1)
  curl -sf --max-time 60 -X PUT ${2:+-T "$2"} -H "x-amz-content-sha256: ${sha}" \
    -H 'Content-Type: application/octet-stream' \
    --aws-sigv4 "aws:amz:${AWS_REGION}:s3" --user "${AWS_ACCESS_KEY_ID}:${AWS_SECRET_ACCESS_KEY}" \
    "${AWS_ENDPOINT_URL_S3}$1"
}
bucket=kubetrain-cli-logs
s3_put "/${bucket}" >/dev/null || true  # exists already on a rerun
run="run-$$-${RANDOM}"
printf 'ps line\n' >"${tmp}/ps-0.log"
printf 'step 1\nstep 2\n' >"${tmp}/worker-0.log"
for f in ps-0.log worker-0.log; do
  s3_put "/${bucket}/${run}/logs/${f}" "${tmp}/${f}" >/dev/null || fail "PUT ${f}"
done
"${KUBETRAIN}" logs --dir "s3://${bucket}/${run}" >"${tmp}/out" 2>"${tmp}/err" ||
  fail "kubetrain logs --dir s3://: exit code $?"
[[ "$(cat "${tmp}/out")" == $'ps-0     | ps line\nworker-0 | step 1\nworker-0 | step 2' ]] ||
  fail "unexpected output"
"${KUBETRAIN}" logs --dir "s3://${bucket}/${run}-absent" >"${tmp}/out" 2>"${tmp}/err"
rc=$?
[[ ${rc} -eq 4 ]] || fail "no saved logs: exit code ${rc}, want 4"
echo "PASS: kubetrain logs --dir s3://"

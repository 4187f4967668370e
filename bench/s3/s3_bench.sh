#!/usr/bin/env bash
# S3 throughput of the kubetrain client next to the AWS CLI, and training from S3 next to
# training from local disk, all on one real S3 server (tests/s3/up: versitygw on loopback).
#
#   bench/s3/s3_bench.sh [BUILD_DIR]     (default build/release; needs s3_transfer and
#                                         kubetrain-trainer built)
# Environment: KT_BENCH_RUNS (default 3) runs of each, alternating; KT_BENCH_MIB (256)
# object size; KT_BENCH_STEPS (300) training steps.
#
# Upload/download: one 256 MiB object of random bytes, the same for both tools, timed
# wall-clock per process (so the AWS CLI's Python start-up counts, as it does for a user);
# downloads go to a file in the same directory for both. The AWS CLI is PyPI awscli
# (pinned below) in a venv this script makes under ${KUBETRAIN_CACHE:-~/.cache/kubetrain}.
# Training: one trainer process, the same generated Criteo files read from local disk or
# streamed from S3 (--data s3://...); samples/s from its final metrics. Medians of the
# runs; the runs of the two sides alternate so drift hits both.
# Prints the figures last: MB/s for each tool and direction, samples/s and the ratio.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${root}/build/release}"
runs="${KT_BENCH_RUNS:-3}"
mib="${KT_BENCH_MIB:-256}"
steps="${KT_BENCH_STEPS:-300}"
awscli_version=1.36.0
transfer="${build}/bench/s3/s3_transfer"
trainer="${build}/trainer/kubetrain-trainer"
[[ -x ${transfer} && -x ${trainer} ]] || { echo "build s3_transfer and kubetrain-trainer in ${build}" >&2; exit 1; }

work="$(mktemp -d /tmp/kubetrain-s3-bench.XXXXXX)"
cleanup() { "${root}/tests/s3/down" "${work}/s3" >/dev/null 2>&1 || true; rm -rf "${work}"; }
trap cleanup EXIT
"${root}/tests/s3/up" "${work}/s3" >/dev/null
set -a
# shellcheck disable=SC1091
source "${work}/s3/s3.env"
set +a

venv="${KUBETRAIN_CACHE:-${HOME}/.cache/kubetrain}/awscli-${awscli_version}-venv"
if [[ ! -x ${venv}/bin/aws ]]; then
  python3 -m venv "${venv}.tmp" && "${venv}.tmp/bin/pip" install -q "awscli==${awscli_version}"
  rm -rf "${venv}" && mv "${venv}.tmp" "${venv}"  # complete or absent; run as python -m
fi
aws() { "${venv}/bin/python" -m awscli --endpoint-url "${AWS_ENDPOINT_URL_S3}" "$@"; }
"${venv}/bin/python" -m awscli --version >&2

bucket=bench
aws s3 mb "s3://${bucket}" >/dev/null
head -c "$((mib << 20))" /dev/urandom >"${work}/object"
now() { date +%s.%N; }
mbps() { awk -v b="$((mib << 20))" -v s="$1" 'BEGIN { printf "%.1f", b / 1e6 / s }'; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
timed() { local t0; t0=$(now); "$@" >/dev/null; awk -v a="${t0}" -v b="$(now)" 'BEGIN { print b - a }'; }

: >"${work}/ours_put"; : >"${work}/aws_put"; : >"${work}/ours_get"; : >"${work}/aws_get"
for ((i = 1; i <= runs; ++i)); do
  mbps "$(timed "${transfer}" put "${bucket}" ours.bin "${work}/object")" >>"${work}/ours_put"; echo >>"${work}/ours_put"
  mbps "$(timed aws s3 cp --only-show-errors "${work}/object" "s3://${bucket}/aws.bin")" >>"${work}/aws_put"; echo >>"${work}/aws_put"
  mbps "$(timed "${transfer}" get "${bucket}" ours.bin "${work}/down")" >>"${work}/ours_get"; echo >>"${work}/ours_get"
  cmp -s "${work}/object" "${work}/down" || { echo "download differs" >&2; exit 1; }
  rm -f "${work}/down"
  mbps "$(timed aws s3 cp --only-show-errors "s3://${bucket}/aws.bin" "${work}/down")" >>"${work}/aws_get"; echo >>"${work}/aws_get"
  cmp -s "${work}/object" "${work}/down" || { echo "aws download differs" >&2; exit 1; }
  rm -f "${work}/down"
  echo "run ${i}: put ours $(tail -1 "${work}/ours_put") aws $(tail -1 "${work}/aws_put"); get ours $(tail -1 "${work}/ours_get") aws $(tail -1 "${work}/aws_get") MB/s" >&2
done
rm -f "${work}/object"

# Training: the same data from local disk and from S3.
"${trainer}" --generate-data=100000 --generate-eval=1000 --data-dir="${work}/data" --steps=1 \
  --no-eval --termination-log=/dev/null >/dev/null 2>&1
split -n l/2 -d --additional-suffix=.tsv "${work}/data/train.tsv" "${work}/data/train-"
rm "${work}/data/train.tsv"
for f in "${work}"/data/*.tsv; do aws s3 cp --only-show-errors "$f" "s3://${bucket}/data/${f##*/}"; done
train() {  # train DATA: samples/s of one single-process run
  "${trainer}" --data="$1" --steps="${steps}" --no-eval --log-every=1000 \
    --termination-log="${work}/metrics.json" >"${work}/train.log" 2>&1 || { cat "${work}/train.log" >&2; exit 1; }
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["samples_per_second"])' "${work}/metrics.json"
}
: >"${work}/local"; : >"${work}/s3train"
for ((i = 1; i <= runs; ++i)); do
  train "${work}/data" >>"${work}/local"
  train "s3://${bucket}/data/" >>"${work}/s3train"
  echo "run ${i}: training local $(tail -1 "${work}/local") s3 $(tail -1 "${work}/s3train") samples/s" >&2
done

op=$(median <"${work}/ours_put"); ap=$(median <"${work}/aws_put")
og=$(median <"${work}/ours_get"); ag=$(median <"${work}/aws_get")
lt=$(median <"${work}/local"); st=$(median <"${work}/s3train")
echo "medians of ${runs} alternating runs, ${mib} MiB object, loopback versitygw:"
echo "upload   kubetrain ${op} MB/s   aws-cli ${ap} MB/s"
echo "download kubetrain ${og} MB/s   aws-cli ${ag} MB/s"
awk -v l="${lt}" -v s="${st}" 'BEGIN { printf "training samples/s: local disk %.0f, S3 %.0f, S3/local %.2fx\n", l, s, s / l }'

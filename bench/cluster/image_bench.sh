#!/usr/bin/env bash
# Build times and sizes of the real-node test images (tests/cluster/build-images),
# in a scratch cache so the user's cache is neither used nor touched:
#   cold     empty cache: mmdebstrap of the base, apt-get of the runtime libraries,
#            both Dockerfile targets, the pause and Debian images, checks, export
#   cached   the same inputs again (every archive is in the cache)
#   rebuild  the operator and trainer binaries changed (base cached)
# Usage: bench/cluster/image_bench.sh [BINDIR]   (default build/release; needs root)
# Takes ~3-6 minutes; it is not part of the test suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bindir="$(cd "${1:-${root}/build/release}" && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "${scratch}"' EXIT

run() {  # run LABEL BINDIR: one build in the scratch cache; sets $secs
  local start end
  start=$(date +%s.%N)
  KUBETRAIN_CACHE="${scratch}/cache" "${root}/tests/cluster/build-images" "$2" "${scratch}/out-$1" \
    2>"${scratch}/$1.log" || { rc=$?; cat "${scratch}/$1.log" >&2; echo "image_bench: $1 build failed (exit ${rc})" >&2; exit 1; }
  end=$(date +%s.%N)
  secs=$(echo "${end} - ${start}" | bc -l)
}

run cold "${bindir}"
cold=${secs}
run cached "${bindir}"
cached=${secs}
# Changed binaries: the same files with one byte appended (still valid ELF).
changed="${scratch}/bin"
mkdir -p "${changed}/operator/cli" "${changed}/trainer"
for f in operator/cli/kubetrain-operator operator/cli/kubetrain trainer/kubetrain-trainer; do
  cp "${bindir}/${f}" "${changed}/${f}"
  printf '\0' >>"${changed}/${f}"
done
run rebuild "${changed}"
rebuild=${secs}

echo "sizes (uncompressed, as buildah images reports them; archive = gzip OCI archive):"
sed -n 's/^build-images: \([^ ]*:[^ ]*\) \+/  \1  /p' "${scratch}/cold.log"
printf 'cold build (empty cache, includes mmdebstrap): %.1f s\n' "${cold}"
printf 'cached build (all archives cached):            %.2f s\n' "${cached}"
printf 'rebuild after the binaries changed:            %.1f s\n' "${rebuild}"

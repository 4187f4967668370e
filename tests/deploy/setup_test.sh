#!/usr/bin/env bash
# .ci/quickstart's installs (.ci/setup build --list): what building and running
# locally needs, and nothing for the tests' cluster (no container runtime, Go,
# buildah or iptables); .ci/setup for the full suite wants those. With Docker CE's
# containerd.io installed (a dpkg-query on PATH that says so: only the query is
# replaced) the full list leaves out Debian's containerd and runc, which would
# remove it, and says why. Both scripts use apt-get --no-remove.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
source "${root}/tests/tools/testlib.sh"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
build="$("${root}/.ci/setup" build --list | tr '\n' ' ')"
for p in build-essential cmake ninja-build libdnnl-dev libcurl4-openssl-dev; do
  [[ " ${build}" == *" ${p} "* ]] || fail "quickstart does not install ${p}"
done
for p in containerd runc buildah iptables mmdebstrap golang-go clang lua5.1; do
  [[ " ${build}" != *" ${p} "* ]] || fail "quickstart installs ${p}, which only the tests need"
done
all="$("${root}/.ci/setup" --list | tr '\n' ' ')"
for p in containerd runc buildah iptables; do
  [[ " ${all}" == *" ${p} "* ]] || fail ".ci/setup (the full suite) does not install ${p}"
done
# dpkg-query that reports containerd.io installed and nothing else.
cat >"${work}/dpkg-query" <<'Q'
#!/bin/sh
for a; do last="$a"; done
[ "$last" = containerd.io ] && { printf 'install ok installed'; exit 0; }
exit 1
Q
chmod +x "${work}/dpkg-query"
docker_all="$(PATH="${work}:${PATH}" "${root}/.ci/setup" --list 2>"${work}/err" | tr '\n' ' ')"
[[ " ${docker_all}" != *" containerd "* && " ${docker_all}" != *" runc "* ]] ||
  fail "with containerd.io installed, .ci/setup still wants Debian's containerd or runc"
grep -q "containerd.io is installed" "${work}/err" || fail ".ci/setup does not say why: $(cat "${work}/err")"
check "every apt-get install in .ci/setup has --no-remove" \
  "$(grep -c 'apt-get install' "${root}/.ci/setup")" "$(grep -c 'apt-get install.*--no-remove' "${root}/.ci/setup")"
check "quickstart installs through .ci/setup build only" "$(grep -v '^ *#' "${root}/.ci/quickstart" | grep -c -E 'apt-get install|\.ci/setup( |$)')" \
  "$(grep -c '^\.ci/setup build$' "${root}/.ci/quickstart")"
((failures == 0)) && echo "setup test passed"
((failures == 0))

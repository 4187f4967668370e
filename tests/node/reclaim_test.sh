#!/usr/bin/env bash
# tests/cluster/node-up meets another real-node cluster's bridge (one such cluster per
# machine): while that cluster's processes run it waits (here for 3 s) and then fails
# saying so; once they are all gone (a run killed before its `down`) it cleans up what
# that cluster recorded and goes on. Runs before node.up, on node 1's bridge; skipped
# (77) if a real-node cluster already holds it.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
source "${root}/tests/tools/testlib.sh"
source "${root}/tests/cluster/node.env"
[[ $(id -u) -eq 0 ]] || { echo "needs root"; exit 77; }
if ip link show "${KT_NODE_BRIDGE}" >/dev/null 2>&1; then
  echo "skipped: ${KT_NODE_BRIDGE} is held by a real-node cluster on this machine"
  exit 77
fi
work="$(mktemp -d)"
holder_pid=""
cleanup() {
  [[ -n "${holder_pid}" ]] && kill "${holder_pid}" 2>/dev/null && wait "${holder_pid}" 2>/dev/null
  ip link delete "${KT_NODE_BRIDGE}" 2>/dev/null
  for d in "${work}/old" "${work}/new"; do
    [[ "$(cat "${KT_NODE_OWNERS}/${KT_NODE_BRIDGE}" 2>/dev/null)" == "${d}" ]] &&
      rm -f "${KT_NODE_OWNERS}/${KT_NODE_BRIDGE}"
  done
  rm -rf "${work}"
}
trap cleanup EXIT
mkdir -p "${work}/old" "${work}/new"

# The old cluster: node-up prepare makes its bridge and records it; one process of
# its own (a sleep this test started, as the cluster's pids file lists its processes).
KUBETRAIN_NODE_WAIT_SECONDS=0 "${root}/tests/cluster/node-up" prepare "${work}/old" 1 ||
  fail "preparing the old cluster's node failed"
sleep 600 &
holder_pid=$!
echo "sleep ${holder_pid}" >"${work}/old/pids"
check "node-up records the bridge's cluster" "$(cat "${KT_NODE_OWNERS}/${KT_NODE_BRIDGE}" 2>/dev/null)" "${work}/old"

# While it runs: the new cluster waits, then refuses and names the holder.
out="$(KUBETRAIN_NODE_WAIT_SECONDS=3 "${root}/tests/cluster/node-up" prepare "${work}/new" 1 2>&1)"
check "node-up refuses while the holder runs" "$?" 1
check "the refusal names the holder" "$(grep -c "another real-node cluster (${work}/old) still runs" <<<"${out}")" 1
check "the old bridge is untouched" "$(cat "${KT_NODE_OWNERS}/${KT_NODE_BRIDGE}" 2>/dev/null)" "${work}/old"

# Its processes gone (killed, no `down`): the new cluster takes the bridge over.
kill "${holder_pid}"
wait "${holder_pid}" 2>/dev/null
holder_pid=""
out="$(KUBETRAIN_NODE_WAIT_SECONDS=3 "${root}/tests/cluster/node-up" prepare "${work}/new" 1 2>&1)"
check "node-up goes on after the holder stopped" "$?" 0
check "it says what it cleaned up" "$(grep -c "belongs to ${work}/old, whose processes are all gone" <<<"${out}")" 1
check "the bridge is now the new cluster's" "$(cat "${KT_NODE_OWNERS}/${KT_NODE_BRIDGE}" 2>/dev/null)" "${work}/new"
check "the old cluster's records are spent" "$(wc -l <"${work}/old/node/resources")" 0
check "the new cluster recorded its bridge" "$(grep -cx "bridge ${KT_NODE_BRIDGE}" "${work}/new/node/resources")" 1
"${root}/tests/cluster/node-down" cleanup "${work}/new"
check "node-down removes the bridge and its record" \
  "$(ip link show "${KT_NODE_BRIDGE}" >/dev/null 2>&1 && echo present; cat "${KT_NODE_OWNERS}/${KT_NODE_BRIDGE}" 2>/dev/null)" ""
((failures == 0)) && echo "reclaim test passed"
((failures == 0))

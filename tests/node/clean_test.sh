#!/usr/bin/env bash
# After `tests/cluster/down` of the real-node cluster (the `node` fixture's
# cleanup, which this test runs after): no process, bridge, CNI netns, mount,
# cgroup, iptables chain or ipset of that node is left on the machine.
# Usage: clean_test.sh CLUSTER_DIR
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
dir="${1:?usage: clean_test.sh CLUSTER_DIR}"
source "${root}/tests/tools/testlib.sh"
source "${root}/tests/cluster/node.env"

check "the cluster dir is gone" "$([[ -e "${dir}" ]] && echo present || echo gone)" gone
check "no process runs from the cluster dir" "$(pgrep -fc -- "${dir}/")" 0
for n in 1 2; do  # (node 2's are there only with KUBETRAIN_REAL_NODE=2)
  kt_node "${n}"
  check "no bridge ${KT_NODE_BRIDGE}" "$(ip link show "${KT_NODE_BRIDGE}" >/dev/null 2>&1 && echo present || echo gone)" gone
  check "no cgroup root of node ${n}" \
    "$(ls -d /sys/fs/cgroup/*${KT_NODE_CGROUP} /sys/fs/cgroup${KT_NODE_CGROUP} 2>/dev/null | wc -l)" 0
  check "no veth on ${KT_NODE_BRIDGE}" "$(ip -o link show master "${KT_NODE_BRIDGE}" 2>/dev/null | wc -l)" 0
done
kt_node 1
check "nothing mounted under the cluster dir" "$(grep -c -- " ${dir}/" /proc/self/mountinfo)" 0
check "no KUBE-* iptables chains" "$(iptables-save 2>/dev/null | grep -c '^:KUBE-')" 0
check "no ipset of kube-router" \
  "$(ipset list -n 2>/dev/null | grep -cE '^KUBE-(SRC|DST)-')" 0
check "no CNI netns with an address on a node subnet" \
  "$(for ns in $(ls /var/run/netns 2>/dev/null); do ip -n "${ns}" -4 addr 2>/dev/null; done | grep -c " ${KT_PODS_CIDR%.*.*}\.")" 0
((failures == 0)) && echo "clean test passed"
((failures == 0))

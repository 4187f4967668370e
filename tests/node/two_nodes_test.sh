#!/usr/bin/env bash
# The two real nodes (KUBETRAIN_REAL_NODE=2, the `node2` fixture): both Ready; a
# pod on each serves on its pod IP and a ClusterIP Service; each pod reaches the
# other node's pod (by IP, by Service name through CoreDNS and kube-proxy), the
# `kubernetes` Service (the control plane) and resolves cluster names; the
# apiserver reaches both kubelets (logs, exec). Then tests/cluster/node-drain
# empties node 2 through the Eviction API (the pod there goes, node 1's stays)
# and the node is uncordoned. (node-kill is exercised by kill_node_test.sh,
# which runs last: a killed node stays dead until `down`.)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
((real_nodes == 2)) || { fail "the cluster has ${real_nodes} real node(s), this test needs 2"; exit 1; }
restricted_ns twonodes
node_name() { (kt_node "$1" && echo "${KT_NODE_NAME}"); }
n1="$(node_name 1)" n2="$(node_name 2)"

ready() { kubectl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}'; }
check "node 1 (${n1}) is Ready" "$(ready "${n1}")" True
check "node 2 (${n2}) is Ready" "$(ready "${n2}")" True
check "both carry type=real and their kubetrain.io/test-node" \
  "$(kubectl get nodes -l type=real -o jsonpath='{range .items[*]}{.metadata.labels.kubetrain\.io/test-node}{end}')" 12

# echo-N: on node N, answers every TCP connection on 8080 with "hello from node N"
# (perl-base is in the minbase image); a Service echo-N in front of it.
for i in 1 2; do
  cat <<YAML | k apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: echo-${i}, labels: {app: echo-${i}}}
spec:
  nodeSelector: {kubetrain.io/test-node: "${i}"}
  terminationGracePeriodSeconds: 1
  securityContext: {runAsNonRoot: true, runAsUser: 65532, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: echo
      image: ${KUBETRAIN_DEBIAN_IMAGE}
      command: [perl, -MIO::Socket::INET, -e,
        '\$s = IO::Socket::INET->new(LocalPort => 8080, Listen => 8, ReuseAddr => 1) or die "listen: \$!";
         while (\$c = \$s->accept) { print \$c "hello from node ${i}\n"; close \$c }']
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
---
apiVersion: v1
kind: Service
metadata: {name: echo-${i}}
spec:
  selector: {app: echo-${i}}
  ports: [{port: 80, targetPort: 8080}]
YAML
done
for i in 1 2; do
  k wait --for=condition=Ready "pod/echo-${i}" --timeout "${T}s" >/dev/null || fail "echo-${i} is not Ready"
done
check "echo-1 runs on node 1" "$(k get pod echo-1 -o jsonpath='{.spec.nodeName}')" "${n1}"
check "echo-2 runs on node 2" "$(k get pod echo-2 -o jsonpath='{.spec.nodeName}')" "${n2}"
ip1="$(k get pod echo-1 -o jsonpath='{.status.podIP}')" ip2="$(k get pod echo-2 -o jsonpath='{.status.podIP}')"
kt_node 1; check "echo-1's IP is on node 1's subnet (${ip1})" "${ip1%.*}.0/24" "${KT_NODE_SUBNET}"
kt_node 2; check "echo-2's IP is on node 2's subnet (${ip2})" "${ip2%.*}.0/24" "${KT_NODE_SUBNET}"
kt_node 1

# from POD, connect to HOST:PORT and print the first line (or "unreachable"), in at most 5 s
# with the connect included. (A connect to a Service IP before kube-proxy has written its
# rules sends a SYN that conntrack then remembers un-NATed: its retries never reach a pod and
# an unbounded connect hung ~2 min, past the wait below; the next connect, from a new port,
# is NATed. That made this test fail on a fixture just brought up.)
probe() {
  k exec "$1" -- timeout 5 bash -c "exec 3<>/dev/tcp/$2/$3 && head -n1 <&3" 2>/dev/null || echo unreachable
}
# (Services take kube-proxy a moment: poll, then check.)
for pair in "1 2" "2 1"; do
  read -r from to <<<"${pair}"
  ip="$([[ ${to} == 1 ]] && echo "${ip1}" || echo "${ip2}")"
  check "node ${from}'s pod reaches node ${to}'s pod by IP" "$(probe "echo-${from}" "${ip}" 8080)" "hello from node ${to}"
  svc_answers() { [[ "$(probe "echo-${from}" "echo-${to}.${ns}.svc.${KT_CLUSTER_DOMAIN}" 80)" == "hello from node ${to}" ]]; }
  WAIT_SECONDS=30 wait_until "the Service echo-${to} from node ${from}" svc_answers
  check "node ${from}'s pod reaches node ${to}'s pod through its Service, by DNS name" \
    "$(probe "echo-${from}" "echo-${to}.${ns}.svc.${KT_CLUSTER_DOMAIN}" 80)" "hello from node ${to}"
  check "node ${from}'s pod resolves the kubernetes Service" \
    "$(k exec "echo-${from}" -- getent hosts "kubernetes.default.svc.${KT_CLUSTER_DOMAIN}" | awk '{print $1}')" \
    "${KT_KUBERNETES_SERVICE_IP}"
  check "node ${from}'s pod reaches the apiserver through the kubernetes Service" \
    "$(k exec "echo-${from}" -- bash -c "timeout 5 bash -c '</dev/tcp/${KT_KUBERNETES_SERVICE_IP}/443' && echo open" 2>/dev/null)" open
done
check "the apiserver reads node 2's pod logs (kubelet 2)" "$(k logs echo-2 2>&1 | wc -l)" 0

# Drain node 2 (bare pods need --force) while node 1 keeps its pod.
drain_out="$("${root}/tests/cluster/node-drain" "${node_cluster}" 2 --ignore-daemonsets --delete-emptydir-data \
  --force --timeout 120s 2>&1)" || fail "node-drain failed: ${drain_out}"
check "node 2 is cordoned" "$(kubectl get node "${n2}" -o jsonpath='{.spec.unschedulable}')" true
check "no pod of ours is left on node 2" "$(k get pods --field-selector "spec.nodeName=${n2}" -o name | wc -l)" 0
check "echo-1 still runs on node 1" "$(k get pod echo-1 -o jsonpath='{.status.phase}')" Running
kubectl uncordon "${n2}" >/dev/null || fail "uncordon ${n2} failed"
check "node 2 is schedulable again" "$(kubectl get node "${n2}" -o jsonpath='{.spec.unschedulable}')" ""
((failures)) && k get pods -o wide
((failures == 0)) && echo "two nodes test passed"
((failures == 0))

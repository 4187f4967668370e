// Where the operator reads a pod's metrics: the pod IP directly.
//
// Why the pod IP and not the apiserver's pod proxy: a read through the proxy
// costs the apiserver a request and a connection per read, needs RBAC on
// pods/proxy (which is also a way into every pod's ports), and puts the
// trainers' load on the control plane that every tenant shares. The pod IP is
// what Prometheus uses too; the operator runs in the cluster network, and the
// job's NetworkPolicy (if any) must admit it to the "metrics" port.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace kubetrain::progress {

// http://<status.podIP>:<port>/metrics for a Pod as the apiserver serves it,
// where port is the main container's (named "trainer", else the first) port
// named "metrics". nullopt when the pod has no IP yet or declares no such port.
// IPv6 addresses are bracketed.
std::optional<std::string> PodMetricsUrl(const nlohmann::json& pod);

}  // namespace kubetrain::progress

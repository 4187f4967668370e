# Helpers shared by tests/cluster/node-down and tests/cluster/node-kill (sourced).

descendants() {  # descendants PID: its children, grandchildren, ... (deepest last)
  local c
  for c in $(pgrep -P "$1" 2>/dev/null); do
    echo "$c"
    descendants "$c"
  done
}

# kill_shims NODE_DIR: SIGKILL the container shims of that node's containerd (they
# outlive it) and every process under them, deepest first.
kill_shims() {
  local sock="$1/containerd.sock" pid victim
  for pid in $(pgrep -f "containerd-shim.*-address ${sock}" 2>/dev/null); do
    for victim in $(descendants "${pid}" | tac) "${pid}"; do kill -KILL "${victim}" 2>/dev/null; done
  done
}

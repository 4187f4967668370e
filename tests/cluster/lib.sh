# Helpers shared by tests/cluster/up and tests/cluster/node-up (sourced).
# Callers set: dir (the cluster dir), timeout_s, and define fail MESSAGE.

start() {  # start NAME CMD...: run in the background, record its PID in DIR/pids.
  local name="$1"; shift
  "$@" >"${dir}/logs/${name}.log" 2>&1 </dev/null &
  echo "${name} $!" >>"${dir}/pids"
}

wait_for() {  # wait_for WHAT CMD...: poll CMD until it succeeds, up to timeout_s.
  local what="$1"; shift
  local deadline=$((SECONDS + timeout_s))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "timed out after ${timeout_s}s waiting for ${what}"
    sleep 0.2
  done
}

free_ports() {  # free_ports N: N distinct free loopback ports, space-separated.
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# Helpers shared by tests/cluster/up, node-up and down (sourced).
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

ours() {  # ours NAME PID: true if PID is alive and still runs NAME.
  # (Read, then searched: `tr | grep -q` under pipefail fails when grep exits at
  # the first match and tr dies of SIGPIPE, and the process would be left running.)
  local cmd
  [[ -r "/proc/$2/cmdline" ]] && cmd="$(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null)" && grep -q -- "$1" <<<"${cmd}"
}

cluster_alive() {  # cluster_alive DIR: true if any process DIR/pids records still runs.
  local name pid
  [[ -f "$1/pids" ]] || return 1
  while read -r name pid; do
    [[ -n "${pid:-}" ]] && ours "${name}" "${pid}" && return 0
  done <"$1/pids"
  return 1
}

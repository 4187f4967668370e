# Shared helpers for the shell tests; source it. Each check is counted in
# `failures`; a test script ends with `((failures == 0))`.
#   fail MESSAGE...                 count a failure
#   check DESCRIPTION ACTUAL WANT   pass when ACTUAL == WANT
#   wait_until DESCRIPTION CMD...   poll CMD until it succeeds, up to WAIT_SECONDS (default 60)
#   run_cases CASE...               run each case function, print PASS/FAILED per case and a
#                                   summary; returns non-zero if any check failed
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); return 1; }
check() {
  if [[ "$2" == "$3" ]]; then echo "  ok: $1"; else fail "$1: got '$2', want '$3'"; fi
}
wait_until() {
  local what="$1"; shift
  local deadline=$((SECONDS + ${WAIT_SECONDS:-60}))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || { fail "timed out waiting for ${what}"; return 1; }
    sleep 0.2
  done
}
run_cases() {
  local c before
  for c in "$@"; do
    echo "== ${c}"
    before=${failures}
    "${c}" || true
    ((failures == before)) && echo "PASS ${c}" || echo "FAILED ${c}"
  done
  echo "$# cases, ${failures} failed checks"
  ((failures == 0))
}

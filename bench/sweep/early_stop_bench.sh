#!/usr/bin/env bash
# What early stopping saves: a local sweep's wall time with and without early stopping on the
# same search space, and the best metric each finds. The sweep is tests/cli/jobs/sweep-early-
# stop.yaml (a grid over Adam's learning rate: 0.01, 0.003, 1, 10, 0.02, 20; the last three
# diverge to a training loss of 4 to 80), one trial at a time, STEPS steps per trial; "off" is
# the same file without spec.earlyStopping. The two variants alternate, RUNS times each (they
# never run at once: the machine is shared); medians are printed.
# Usage: bench/sweep/early_stop_bench.sh KUBETRAIN TRAINER [STEPS=6000] [RUNS=3]
# Only processes this script started are stopped (`kubetrain run` stops its own trials).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
kubetrain="$(realpath "${1:?usage: early_stop_bench.sh KUBETRAIN TRAINER [STEPS] [RUNS]}")"
trainer="$(realpath "${2:?usage: early_stop_bench.sh KUBETRAIN TRAINER [STEPS] [RUNS]}")"
steps="${3:-6000}"
runs="${4:-3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/kubetrain-early-stop-bench.XXXXXX")"
run_pid=""
cleanup() {
  if [[ -n "${run_pid}" ]]; then kill -TERM "${run_pid}" 2>/dev/null; wait "${run_pid}" 2>/dev/null || true; fi
  rm -rf "${work}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sed "s/STEPS/${steps}/; s/parallelism: 2/parallelism: 1/" "${root}/tests/cli/jobs/sweep-early-stop.yaml" >"${work}/on.yaml"
grep -v '^  earlyStopping:' "${work}/on.yaml" >"${work}/off.yaml"
grep -q earlyStopping "${work}/on.yaml" && ! grep -q earlyStopping "${work}/off.yaml"

# sweep on|off RUN -> "<wall seconds> <best trial> <best auc> <early stopped>"
sweep() {
  local out="${work}/$1-$2.out"
  "${kubetrain}" run -f "${work}/$1.yaml" --trainer "${trainer}" --work-dir "${work}/$1-$2" >"${out}" 2>&1 &
  run_pid=$!
  wait "${run_pid}" || { echo "the $1 sweep failed:" >&2; tail -20 "${out}" >&2; exit 1; }
  run_pid=""
  local wall best table stopped at
  wall="$(sed -nE 's/^result: TrainingSweep .* Succeeded in ([0-9.]+)s .*/\1/p' "${out}")"
  best="$(sed -nE 's/^best: ([^ ]+) eval.auc=([0-9.]+).*/\1 \2/p' "${out}")"
  table="$(tac "${out}" | sed -n '/^sweep early-stop: Succeeded/,/^TRIAL/p')"
  stopped="$(grep -c ' EarlyStopped ' <<<"${table}" || true)"
  at="$(sed -nE 's/.* EarlyStopped +stopped at step ([0-9]+):.*/\1/p' <<<"${table}" | sort -n | paste -sd, -)"
  echo "${wall} ${best} ${stopped} ${at:--}"
}

on=() off=()
for ((r = 0; r < runs; r++)); do
  off+=("$(sweep off "${r}")")
  echo "run ${r} without early stopping: ${off[-1]} (wall s, best, auc, early stopped, at steps)" >&2
  on+=("$(sweep on "${r}")")
  echo "run ${r} with early stopping:    ${on[-1]} (wall s, best, auc, early stopped, at steps)" >&2
done

python3 - "${steps}" "$(printf '%s\n' "${off[@]}")" "$(printf '%s\n' "${on[@]}")" <<'PY'
import statistics, sys
steps = sys.argv[1]
off = [l.split() for l in sys.argv[2].splitlines()]
on = [l.split() for l in sys.argv[3].splitlines()]
def med(rows):
    return statistics.median(float(r[0]) for r in rows)
def bests(rows):
    return sorted({f"{r[1]} {float(r[2]):.5f}" for r in rows})
print(f"sweep: 6 trials, grid over Adam lr (0.01 0.003 1 10 0.02 20), {steps} steps each, one at a time, {len(off)} runs each way")
print(f"without early stopping: median wall {med(off):.1f} s, best {', '.join(bests(off))}, each run: " + ", ".join(r[0] + " s" for r in off))
print(f"with early stopping:    median wall {med(on):.1f} s, best {', '.join(bests(on))}, early stopped per run: " + ", ".join(r[3] for r in on) + ", each run: " + ", ".join(r[0] + " s" for r in on))
same = bests(off) == bests(on)
print(f"early-stopped trials stopped at steps (of {steps}), per run: " + "; ".join(r[4] for r in on))
ratios = [float(a[0]) / float(b[0]) for a, b in zip(off, on)]
print("speed-up of each adjacent pair (without / with): " + ", ".join(f"{x:.2f}x" for x in ratios))
print(f"same best metric: {'yes' if same else 'NO'}")
print(f"speed-up from early stopping (median wall time without / with): {med(off) / med(on):.2f}x")
PY

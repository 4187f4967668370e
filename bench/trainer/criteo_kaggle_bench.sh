#!/usr/bin/env bash
# Issue 30's figures at real cardinalities: the same Wide & Deep model (batch 512, layers
# 1024,512,256, embedding dim 16, Adagrad 0.05) on N lines of --generate-profile
# criteo-kaggle (Kaggle's 26 cardinalities, Zipf-like) against N lines of the small profile
# (200 values per field), one epoch each.
#   one process: samples/s (median of `reps` alternating rounds; the ratio is the median of
#     the per-round ratios), eval AUC, peak RSS;
#   with PS=1 in the environment, also once per profile 2 PS + 2 workers over 127.0.0.1:
#     samples/s, and each PS's peak RSS against its rows x payload (dim 16 + wide weight,
#     with Adagrad's accumulators: 2 x 17 floats = 136 bytes per row).
#   with BOUNDS=1, also one process on criteo-kaggle with --embedding-admit-count 2 and with
#     --embedding-capacity half the rows of the unbounded run: AUC, rows, samples/s.
# Samples per CPU-second (the trainer's own figure) is printed beside samples/s: on a machine
# shared with other work the wall-clock rate mostly says how much CPU each run was given.
# Peak RSS is /usr/bin/time's maximum resident set size. The last lines are the figures.
# Each run also prints one line as it ends (its samples/s, AUC, rows, peak RSS, seconds and
# the load average then), so a long run that is stopped early still leaves figures; with
# KEEP=DIR the data and the runs' outputs stay in DIR instead of a removed temporary one, and
# a re-run with the same KEEP resumes: data already generated for these lines and runs whose
# termination message and peak RSS are there are not done again (a long set can span sittings).
# Usage: criteo_kaggle_bench.sh <kubetrain-trainer> [lines=2000000] [reps=3] [threads=1]
set -euo pipefail
trainer="$1"
lines="${2:-2000000}"
reps="${3:-3}"
threads="${4:-1}"
if [[ -n "${KEEP:-}" ]]; then
  mkdir -p "${KEEP}"
  work="$(cd "${KEEP}" && pwd)"
else
  work="$(mktemp -d)"
fi
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "${p}" 2>/dev/null || true; done
  [[ -n "${KEEP:-}" ]] || rm -rf "${work}"
}
trap cleanup EXIT
common=(--batch-size 512 --layers 1024,512,256 --embedding-dim 16 --optimizer adagrad --lr 0.05
  --threads "${threads}" --metrics-port 0 --log-every 0 --eval-examples 100000)
steps=$((lines / 512))
payload=136

report() {  # report NAME RSS-FILE JSON-FILE... : one line per finished run, as it ends
  local name="$1" rss="$2" secs="$3"
  shift 3
  python3 - "${name}" "${rss}" "${secs}" "$(cut -d' ' -f1-3 /proc/loadavg)" "$@" <<'PY'
import json, sys
name, rss, secs, load, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
parts = []
for f in files:
    k = json.load(open(f))
    e = k.get("embedding", {})
    rows = e.get("rows", k.get("embedding_rows"))
    auc = k.get("eval", {}).get("auc")
    parts.append(f"{k.get('samples_per_second', 0):.0f} samples/s"
                 + (f", AUC {auc:.4f}" if auc is not None else "") + (f", rows {rows}" if rows else ""))
mb = ", ".join(f"{int(open(r).read().split()[-1]) * 1024 / 1e6:.0f} MB" for r in rss.split(","))
print(f"[run] {name}: " + "; ".join(parts) + f"; peak RSS {mb}; {secs} s; load {load}", flush=True)
PY
}

# done FILE...: with KEEP, every FILE is there and not empty, and no termination message among
# them is a stopped run's (that part of the set is done).
done_already() {
  [[ -n "${KEEP:-}" ]] || return 1
  local f
  for f in "$@"; do
    [[ -s "${f}" ]] || return 1
    [[ "${f}" != *.json ]] || ! grep -q '"stopped"' "${f}" || return 1
  done
  echo "[kept] $(basename "$1") and the rest from ${work}" >&2
}

for profile in small criteo-kaggle; do
  done_already "${work}/${profile}/.generated-${lines}" && continue
  "${trainer}" --data-dir "${work}/${profile}" --generate-data "${lines}" --generate-eval 100000 \
    --generate-profile "${profile}" --steps 0 --no-eval --termination-log /dev/null \
    "${common[@]}" >"${work}/gen.log" 2>&1 || { cat "${work}/gen.log" >&2; exit 1; }
  echo "${lines}" >"${work}/${profile}/.generated-${lines}"
done

one() {  # one PROFILE ROUND [flags...]
  local profile="$1" round="$2" t0="${SECONDS}"
  shift 2
  done_already "${work}/one.${profile}.${round}.json" "${work}/rss.${profile}.${round}" && return 0
  /usr/bin/time -f %M -o "${work}/rss.${profile}.${round}" "${trainer}" --data-dir "${work}/${profile}" \
    --steps "${steps}" --termination-log "${work}/one.${profile}.${round}.json" "${common[@]}" "$@" \
    >"${work}/one.log" 2>&1 || { cat "${work}/one.log" >&2; exit 1; }
  report "one process, ${profile}, ${round} $*" "${work}/rss.${profile}.${round}" $((SECONDS - t0)) \
    "${work}/one.${profile}.${round}.json"
}
for r in $(seq 1 "${reps}"); do
  one small "${r}"
  one criteo-kaggle "${r}"
done

cluster() {  # cluster PROFILE: 2 PS + 2 workers, each worker half the epoch
  local profile="$1" ports=() procs=() t0="${SECONDS}"
  done_already "${work}/${profile}".{worker,ps}-{0,1}.json "${work}/rss.${profile}".ps-{0,1} && return 0
  for _ in 1 2 3 4; do
    ports+=("$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')")
  done
  local cfg="{\"ps\":[\"127.0.0.1:${ports[0]}\",\"127.0.0.1:${ports[1]}\"],\"worker\":[\"127.0.0.1:${ports[2]}\",\"127.0.0.1:${ports[3]}\"]}"
  for task in ps-0 ps-1 worker-0 worker-1; do
    CLUSTER_CONFIG="${cfg}" POD_NAME="${task}" KUBETRAIN_AUTH_KEY="$(printf '0123456789abcdef%.0s' 1 2 3 4)" \
      /usr/bin/time -f %M -o "${work}/rss.${profile}.${task}" "${trainer}" --data-dir "${work}/${profile}" \
      --steps $((steps / 2)) --startup-timeout 120 --termination-log "${work}/${profile}.${task}.json" \
      "${common[@]}" >"${work}/${profile}.${task}.log" 2>&1 &
    procs+=($!)
    pids+=($!)
  done
  for p in "${procs[@]}"; do
    wait "${p}" || { tail -n 20 "${work}/${profile}".*.log >&2; exit 1; }
  done
  report "2 PS + 2 workers, ${profile} (workers; PS)" "${work}/rss.${profile}.ps-0,${work}/rss.${profile}.ps-1" \
    $((SECONDS - t0)) "${work}/${profile}".worker-{0,1}.json "${work}/${profile}".ps-{0,1}.json
}
if [[ "${PS:-0}" == 1 ]]; then
  cluster small
  cluster criteo-kaggle
fi
if [[ "${BOUNDS:-0}" == 1 ]]; then
  half=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["embedding"]["rows"] // 2)' \
    "${work}/one.criteo-kaggle.1.json")
  one criteo-kaggle admit2 --embedding-admit-count 2
  one criteo-kaggle capacity --embedding-capacity "${half}"
fi

python3 - "${work}" "${reps}" "${lines}" "${payload}" "${PS:-0}" "${BOUNDS:-0}" <<'PY'
import glob, json, os, statistics, sys
work, reps, lines, payload, ps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
bounds = sys.argv[6] == "1"
med = statistics.median
def j(p): return json.load(open(p))
def rss(p): return int(open(p).read().split()[-1]) * 1024  # KiB -> bytes
rounds = range(1, reps + 1)
one = {p: [j(f"{work}/one.{p}.{r}.json") for r in rounds] for p in ("small", "criteo-kaggle")}
mem = {p: [rss(f"{work}/rss.{p}.{r}") for r in rounds] for p in one}
print(f"{lines} lines per profile, one epoch, batch 512, layers 1024,512,256, dim 16, Adagrad; "
      f"median of {reps} alternating rounds")
for p in one:
    print(f"one process, {p}: {med(k['samples_per_second'] for k in one[p]):.0f} samples/s "
          f"({med(k['samples_per_cpu_second'] for k in one[p]):.0f} per CPU-second), "
          f"eval AUC {med(k['eval']['auc'] for k in one[p]):.4f}, peak RSS {med(mem[p]) / 1e6:.0f} MB")
ratio = med(k["samples_per_second"] / s["samples_per_second"] for k, s in zip(one["criteo-kaggle"], one["small"]))
cpu_ratio = med(k["samples_per_cpu_second"] / s["samples_per_cpu_second"] for k, s in zip(one["criteo-kaggle"], one["small"]))
lines_out = [f"one process: criteo-kaggle / small = {ratio:.2f}x samples/s, {cpu_ratio:.2f}x samples "
             f"per CPU-second (goal >= 0.85x)"]
if ps:
    for p in ("small", "criteo-kaggle"):
        sps = sum(j(f"{work}/{p}.worker-{w}.json")["samples_per_second"] for w in (0, 1))
        parts = []
        for k in (0, 1):
            rows = j(f"{work}/{p}.ps-{k}.json")["embedding_rows"]
            m = rss(f"{work}/rss.{p}.ps-{k}")
            parts.append((rows, m))
        print(f"2 PS + 2 workers, {p}: {sps:.0f} samples/s (both workers), PS rows "
              + ", ".join(f"{r}" for r, _ in parts) + ", PS peak RSS "
              + ", ".join(f"{m / 1e6:.0f} MB" for _, m in parts))
        if p == "criteo-kaggle":
            base = [rss(f"{work}/rss.small.ps-{k}") for k in (0, 1)]
            for k, (rows, m) in enumerate(parts):
                lines_out.append(
                    f"ps-{k} criteo-kaggle: peak RSS / (rows x {payload} B) = {m / (rows * payload):.2f}x; "
                    f"above the small-profile PS ({base[k] / 1e6:.0f} MB): {(m - base[k]) / (rows * payload):.2f}x")
if bounds:
    base = one["criteo-kaggle"][0]
    for name in ("admit2", "capacity"):
        k = j(f"{work}/one.criteo-kaggle.{name}.json")
        e = k["embedding"]
        lines_out.append(
            f"one process, criteo-kaggle, {name}: eval AUC {k['eval']['auc']:.4f} (unbounded "
            f"{base['eval']['auc']:.4f}, cost {base['eval']['auc'] - k['eval']['auc']:+.4f}), rows {e['rows']} "
            f"(unbounded {base['embedding']['rows']}), filtered {e['filtered']}, evicted {e['evicted']}, "
            f"{k['samples_per_second']:.0f} samples/s, peak RSS {rss(f'{work}/rss.criteo-kaggle.{name}') / 1e6:.0f} MB")
print("\n".join(lines_out))
PY

#!/usr/bin/env bash
# The accuracy cost of bounded embeddings: one process trains one epoch of
# the criteo-kaggle profile (Wide & Deep, layers 256,128, dim 16, Adagrad, batch 512, 2
# threads) three ways: unbounded, --embedding-admit-count 2, and --embedding-capacity half the
# rows the unbounded run ended with. Prints AUC, rows, bytes per row, filtered and evicted
# (from the termination message's "embedding"), one line each, the table last.
#
#   bench/trainer/embedding_bounds_auc.sh [BUILD_DIR] [LINES=300000]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-${root}/build/release}"
lines="${2:-300000}"
trainer="${build}/trainer/kubetrain-trainer"
[[ -x ${trainer} ]] || { echo "build kubetrain-trainer in ${build}" >&2; exit 1; }
work="$(mktemp -d /tmp/kubetrain-bounds-bench.XXXXXX)"
trap 'rm -rf "${work}"' EXIT
steps=$(( lines / 512 ))
run() {  # name, extra flags...
  local name="$1"; shift
  "${trainer}" --generate-data "${lines}" --generate-profile criteo-kaggle --data-dir "${work}/data" \
    --steps "${steps}" --batch-size 512 --layers 256,128 --embedding-dim 16 --threads 2 \
    --eval-examples 20000 --metrics-port 0 --log-every 1000 \
    --termination-log "${work}/${name}.json" "$@" >"${work}/${name}.log" 2>&1 ||
    { tail -5 "${work}/${name}.log" >&2; exit 1; }
  python3 - "${work}/${name}.json" "${name}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); e = m["embedding"]
print(f'{sys.argv[2]:<22} AUC {m["eval"]["auc"]:.4f}  rows {e["rows"]:>9}  '
      f'bytes/row {e["bytes"] / max(1, e["rows"]):6.1f}  filtered {e["filtered"]:>9}  evicted {e["evicted"]:>9}')
PY
}
out=()
out+=("$(run unbounded)")
rows=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["embedding"]["rows"])' "${work}/unbounded.json")
out+=("$(run admit-2 --embedding-admit-count 2)")
out+=("$(run "capacity-$(( rows / 2 ))" --embedding-capacity $(( rows / 2 )))")
echo "embedding bounds, one epoch of ${lines} criteo-kaggle lines (${steps} steps of 512):"
printf '%s\n' "${out[@]}"

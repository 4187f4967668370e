#!/usr/bin/env bash
# docs/first-cluster.md as printed: its ```sh blocks, in order,
# on the real node. The blocks marked `<!-- not run by node.guide ... -->` (steps
# 1 and 2: docker build, kind load / docker push) are replaced by what the fixture
# already did (the images built with buildah from this build's binaries, loaded into
# the node's containerd), tagged here under "$REGISTRY/kubetrain-{operator,trainer}:$TAG"
# as `kind load` would. Every other block runs verbatim with bash -euo pipefail in
# the checkout, except a `kubectl get ... -w` line, which becomes a poll of the same
# command until STATE is Succeeded or Failed (with a deadline). Step 6 must print
# numbers: "STEP/TOTAL steps, ETA ..." and "AUC 0.xxx".
# The guide starts from a cluster without kubetrain (helm install creates the CRDs),
# so the test removes the kustomize install the other node tests share first and
# puts it back at the end.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# KUBETRAIN_GUIDE: another copy of the page (to see the test fail on a broken block).
guide="${KUBETRAIN_GUIDE:-${root}/docs/first-cluster.md}"
marker='<!-- not run by node.guide'
export REGISTRY=registry.example.com/ml TAG=guide-test

# The blocks: $work/sh-N, and $work/sh-N.skip for a marked one.
awk -v out="${work}/sh" -v marker="${marker}" '
  /^```sh$/ { n++; on = 1; if (prev ~ "^" marker) printf "" > (out "-" n ".skip"); next }
  on && /^```$/ { on = 0; next }
  on { print > (out "-" n); next }
  /[^ ]/ { prev = $0 }' "${guide}"
mapfile -t blocks < <(ls "${work}"/sh-* | grep -v '\.skip$' | sort -t- -k2 -n)
check "docs/first-cluster.md has 7 shell blocks" "${#blocks[@]}" 7
skipped=()
for b in "${blocks[@]}"; do [[ -e "${b}.skip" ]] && skipped+=("${b}"); done
check "2 of them are marked as not run here" "${#skipped[@]}" 2
# Only image building and loading may be skipped: every command in a skipped block.
for b in "${skipped[@]}"; do
  bad="$(grep -vE '^(#|$|export REGISTRY=|docker (build|push) |kind load )' "${b}")"
  check "the skipped $(basename "${b}") only builds, loads or pushes images" "${bad}" ""
done
((failures == 0)) || exit 1

# Steps 1 and 2, the test's way: the built images under the guide's names.
ctr_ images tag --force "${KUBETRAIN_OPERATOR_IMAGE}" "${REGISTRY}/kubetrain-operator:${TAG}" >/dev/null &&
  ctr_ images tag --force "${KUBETRAIN_TRAINER_IMAGE}" "${REGISTRY}/kubetrain-trainer:${TAG}" >/dev/null ||
  { fail "cannot tag the built images as ${REGISTRY}/...:${TAG}"; exit 1; }

# A cluster without kubetrain: the shared kustomize install (and its CRDs) goes;
# a team-a left by an earlier failed run too.
t0=${SECONDS}
kubectl delete -k "$(kustomize_overlay "${KUBETRAIN_OPERATOR_IMAGE##*:}")" --ignore-not-found --wait=true \
  --timeout "${T}s" >/dev/null 2>&1
helm uninstall kubetrain -n kubetrain-system >/dev/null 2>&1
kubectl delete namespace team-a --ignore-not-found --wait=true --timeout "${T}s" >/dev/null
gone() {
  ! kubectl get namespace kubetrain-system >/dev/null 2>&1 && ! kubectl get namespace team-a >/dev/null 2>&1 &&
    ! kubectl get crd trainingjobs.kubetrain.io >/dev/null 2>&1
}
wait_until "kubetrain-system, team-a and the CRDs to be gone" gone || exit 1
echo "cluster without kubetrain in $((SECONDS - t0)) s"
restore() {
  kubectl delete namespace team-a --ignore-not-found --wait=false >/dev/null 2>&1
  helm uninstall kubetrain -n kubetrain-system --wait --timeout "${T}s" >/dev/null 2>&1
  ensure_operator
}

# run_block FILE: the block as printed, in the checkout; its output on stdout.
run_block() { (cd "${root}" && timeout "${GUIDE_BLOCK_SECONDS:-600}" bash -euo pipefail "$1") 2>&1; }
watch_done() {  # watch_done CMD: CMD's table has a STATE of Succeeded or Failed
  local out
  out="$(cd "${root}" && bash -euo pipefail -c "$1" 2>&1)" || return 1
  printf '%s\n' "${out}" >"${work}/watch.last"
  awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "STATE") c = i; next } c && ($c == "Succeeded" || $c == "Failed") { ok = 1 } END { exit !ok }' <<<"${out}"
}
step=0
for b in "${blocks[@]}"; do
  step=$((step + 1))
  if [[ -e "${b}.skip" ]]; then echo "== step ${step}: not run here (images built and loaded by the fixture)"; continue; fi
  t0=${SECONDS}
  echo "== step ${step}"
  sed 's/^/  $ /' "${b}"
  if grep -qE '^kubectl get .* -w$' "${b}"; then
    check "step ${step} has one command" "$(grep -cvE '^(#|$)' "${b}")" 1
    cmd="$(grep -E '^kubectl get .* -w$' "${b}")"
    cmd="${cmd% -w}"
    WAIT_SECONDS=${GUIDE_JOB_SECONDS:-900} wait_until "'${cmd}' to show Succeeded or Failed" watch_done "${cmd}"
    cat "${work}/watch.last" 2>/dev/null
    check "step ${step}: '${cmd}' shows Succeeded" \
      "$(awk 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "STATE") c = i; next } c { print $c }' "${work}/watch.last" 2>/dev/null)" \
      Succeeded
  else
    out="$(run_block "${b}")"
    rc=$?
    printf '%s\n' "${out}" | head -40 | sed 's/^/  | /'
    check "step ${step} runs as printed" "${rc}" 0
    if grep -q -- '-o jsonpath=' "${b}"; then
      check "step ${step} prints the steps done and the total as numbers" \
        "$(grep -cE '^[0-9]+/[0-9]+ steps' <<<"${out}")" 1
      check "step ${step} prints the AUC as a number" "$(grep -cE '^AUC (0|1)(\.[0-9]+)?$' <<<"${out}")" 1
    fi
  fi
  echo "   step ${step} took $((SECONDS - t0)) s"
  ((failures == 0)) || break
done
((step == ${#blocks[@]})) || echo "stopped after step ${step}"
if ((failures)); then
  kubectl -n team-a get tj,pods -o wide 2>&1
  for p in $(kubectl -n team-a get pods -o name 2>/dev/null); do echo "== ${p}"; kubectl -n team-a logs "${p}" --tail 15 2>&1; done
fi
# Step 7 removed everything, the CRDs too.
((failures)) || check "nothing of kubetrain is left" "$(gone && echo gone)" gone
restore || fail "cannot put the kustomize install back"
((failures == 0)) && echo "guide test passed in ${SECONDS} s"
((failures == 0))

#!/usr/bin/env bash
# The README's headline job as printed: the first ```yaml block of
# README.md that is a TrainingJob, applied verbatim in a fresh namespace on the
# real node, reaches Succeeded before a deadline. Its workers pass
# --generate-data without --data-dir: the trainer image (non-root, no /data)
# must still have somewhere to write. The README names the released trainer
# image; the node has the built one under that name, as a user's registry
# would (a tagged image is IfNotPresent).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_operator || exit 1

job="${work}/readme-job.yaml"
# Every ```yaml block in turn; the first that is a TrainingJob, byte for byte.
awk -v out="${work}/block" '
  /^```yaml$/ { n++; inb = 1; next }
  inb && /^```$/ { inb = 0; next }
  inb { print > (out "-" n) }' "${root}/README.md"
for block in $(ls "${work}"/block-* 2>/dev/null | sort -t- -k2 -n); do
  if grep -q '^kind: TrainingJob$' "${block}"; then cp "${block}" "${job}"; break; fi
done
[[ -s "${job}" ]] || { fail "README.md has no TrainingJob yaml block"; exit 1; }
name="$(sed -nE 's/^metadata: \{name: ([a-z0-9-]+)\}$/\1/p; s/^  name: ([a-z0-9-]+)$/\1/p' "${job}" | sed -n 1p)"
[[ -n "${name}" ]] || { fail "no metadata.name in the README's job"; exit 1; }
mapfile -t images < <(grep -oE 'image: [^],} ]+' "${job}" | sed 's/^image: //' | sort -u)
check "the README's job names one image" "${#images[@]}" 1
image="${images[0]}"
# A registry host and a tag other than latest: pulled IfNotPresent, never from a registry here.
[[ "${image}" =~ ^[a-z0-9.-]+\.[a-z]+/.+:[A-Za-z0-9._-]+$ && "${image}" != *:latest ]] ||
  { fail "the README's image '${image}' is not <registry>/<repo>:<tag>"; exit 1; }
ctr_ images tag --force "${KUBETRAIN_TRAINER_IMAGE}" "${image}" >/dev/null ||
  { fail "cannot tag the trainer image as ${image}"; exit 1; }

ns="readme-$(openssl rand -hex 3)"
namespaces+=("${ns}")
kubectl create namespace "${ns}" >/dev/null
wait_until "the default service account in ${ns}" kubectl -n "${ns}" get sa default
k apply -f "${job}" >/dev/null || { fail "kubectl apply of the README's job failed"; exit 1; }
# Until the job ends either way, or a pod cannot get its image (the node has no
# registry): a trainer that cannot start fails the job in seconds (exit 1 is
# permanent under ExitCode), and the test says why at once instead of waiting
# out the deadline. The job's own activeDeadlineSeconds bounds it too; this
# deadline is shorter.
ended() {
  [[ "$(job_state "${name}")" =~ ^(Succeeded|Failed)$ ]] ||
    k get pods -o jsonpath='{.items[*].status.containerStatuses[*].state.waiting.reason}' |
    grep -qE 'ErrImagePull|ImagePullBackOff|InvalidImageName'
}
WAIT_SECONDS=${README_JOB_SECONDS:-1500} wait_until "${name} to end" ended
check "the README's job succeeded (reason '$(jpath tj/"${name}" '{.status.conditions[-1:].reason}')')" \
  "$(job_state "${name}")" Succeeded
logs="$(k logs "${name}-worker-0" 2>&1)"
check "worker-0 generated its data in a temporary directory" \
  "$(grep -cE 'generated 100000 lines in /tmp/kubetrain-data-[A-Za-z0-9]{6}/train.tsv' <<<"${logs}")" 1
auc="$(k get tj "${name}" -o jsonpath='{.status.metrics.eval.auc}')"
check "status.metrics has an AUC above 0.6 (got '${auc}')" \
  "$(python3 -c "import sys; print(float(sys.argv[1]) > 0.6)" "${auc:-0}" 2>/dev/null)" True
if ((failures)); then
  k get tj "${name}" -o yaml | tail -40; k get pods -o wide
  for p in $(k get pods -o name); do echo "== ${p}"; k logs "${p}" --tail 15 2>&1; done
fi
((failures == 0)) && echo "readme test passed in ${SECONDS} s (AUC ${auc})"
((failures == 0))

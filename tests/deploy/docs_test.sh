#!/usr/bin/env bash
# The docs stay true to the code (issue 31 item 10):
#   - the generated sections are current (docs/generate --check: the printer
#     column tables from the CRDs), and docs/api.md's sample `kubectl get tj`
#     header is the CRD's columns;
#   - docs/operations.md's Flags table names exactly the flags of
#     `kubetrain-operator --help`, with its defaults where --help prints one;
#   - its RBAC table grants what deploy/kustomize/rbac/rbac.yaml grants;
#   - docs/api.md lists every reason the planner fails a job with;
#   - docs/first-cluster.md: every shell block parses; its Helm command renders;
#     the job it applies is accepted by the apiserver (server-side dry run); its
#     JSONPaths read a job whose status holds progress and metrics.
# Usage: docs_test.sh OPERATOR_BINARY (KUBECONFIG: the test cluster).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
operator="${1:?usage: docs_test.sh OPERATOR_BINARY}"
source "${root}/tests/tools/testlib.sh"
use_test_cluster build-helm
NS_PREFIX=docs
work="$(mktemp -d)"
trap 'delete_namespaces; rm -rf "${work}"' EXIT

out="$("${root}/docs/generate" --check)"
check "docs/generate --check: the generated sections are current" "$?/${out}" "0/"
check "docs/api.md's kubectl get tj header is the CRD's columns" \
  "$(grep -m1 '^NAME  *STATE' "${root}/docs/api.md" | tr -s ' ')" \
  "$(python3 -c '
import sys, yaml
crd = yaml.safe_load(open(sys.argv[1]))
v = next(v for v in crd["spec"]["versions"] if v.get("storage"))
print(" ".join(["NAME"] + [c["name"].upper() for c in v["additionalPrinterColumns"] if not c.get("priority")]))' \
    "${root}/crds/trainingjobs.kubetrain.io.yaml")"

# Flags: the table's first column against --help (help and version left out).
"${operator}" --help >"${work}/help" || fail "kubetrain-operator --help"
section() { awk -v h="$1" '$0 == h { on = 1; next } on && /^## / { exit } on' "${root}/docs/operations.md"; }
section "## Flags" | awk -F' [|] ' '/^[|] `--/ { print $1 }' | grep -oE -- '--[a-z0-9-]+' | sort -u >"${work}/doc-flags"
grep -oE -- '^ +(-[a-z],)?--[a-z0-9-]+' "${work}/help" | grep -oE -- '--[a-z0-9-]+' |
  grep -vx -e --help -e --version | sort -u >"${work}/help-flags"
check "the Flags table names every flag of --help, and only those" \
  "$(comm -3 "${work}/doc-flags" "${work}/help-flags" | tr -d '\t' | tr '\n' ' ')" ""
# --help's defaults (NAME TYPE...=DEFAULT) appear in the flag's row.
while read -r flag def; do
  row="$(section "## Flags" | awk -F' [|] ' -v f="\`${flag}\`" 'index($1, f) { print; exit }')"
  default_col="$(awk -F' [|] ' '{ print $2 }' <<<"${row}")"
  [[ " ${default_col//,/ } " == *" ${def} "* || "${default_col}" == *"\`${def}\`"* ]] ||
    fail "${flag}: --help's default ${def} is not in the Flags table's default '${default_col}'"
done < <(sed -nE 's/^ +(--[a-z0-9-]+) [A-Z:]+[^=]*=([^ ]+).*/\1 \2/p' "${work}/help" | sed 's/ 1$/ true/')

# RBAC: the table's verbs per resource against the kustomize ClusterRole and Role.
check "docs/operations.md's RBAC table grants what rbac.yaml grants" "$(python3 - "${root}" <<'PY'
import re, sys, yaml
root = sys.argv[1]
granted = {}
for d in yaml.safe_load_all(open(root + "/deploy/kustomize/rbac/rbac.yaml")):
    if d and d["kind"] in ("ClusterRole", "Role"):
        for r in d["rules"]:
            for res in r["resources"]:
                granted.setdefault(res, set()).update(r["verbs"])
text = open(root + "/docs/operations.md").read()
table = text.split("the least the controller needs:", 1)[1].split("\n\n", 2)[1]
doc = {}
for line in table.splitlines()[2:]:
    cells = [c.strip() for c in line.strip("|").split("|")]
    resources = [r for r in re.findall(r"`([a-z/.]+)`", cells[0]) if "." not in r or "/" in r]
    verbs = set(re.findall(r"\b(get|list|watch|create|update|patch|delete)\b", cells[1]))
    for res in resources:
        doc.setdefault(res, set()).update(verbs)
bad = ["%s: doc %s, rbac.yaml %s" % (r, sorted(doc.get(r, [])), sorted(granted.get(r, [])))
       for r in sorted(set(doc) | set(granted)) if doc.get(r) != granted.get(r)]
print("; ".join(bad))
PY
)" ""

# Failure reasons: every reason the planner finishes a job as failed with.
reasons="$(grep -ohE '(Finish\(false, |make_pair\()"[A-Za-z]+"' "${root}/operator/planner/planner.cc" |
  grep -oE '"[A-Za-z]+"' | tr -d '"' | sort -u)"
line="$(grep -m1 '^Failure reasons:' "${root}/docs/api.md")"
for r in ${reasons}; do
  [[ "${line}" == *"\`${r}\`"* ]] || fail "docs/api.md's failure reasons lack ${r}"
done
check "failure reasons found in the planner" "$(wc -w <<<"${reasons}")" 7

# docs/first-cluster.md: its shell blocks.
guide="${root}/docs/first-cluster.md"
awk -v out="${work}/sh" '/^```sh$/ { n++; on = 1; next } on && /^```$/ { on = 0; next } on { print > (out "-" n) }' "${guide}"
blocks=("${work}"/sh-*)
check "docs/first-cluster.md has its 7 shell blocks" "${#blocks[@]}" 7
for b in "${blocks[@]}"; do bash -n "${b}" || fail "$(basename "${b}") of docs/first-cluster.md does not parse"; done
export REGISTRY=registry.example.com/ml TAG=dev
install_block="$(grep -l '^helm install' "${blocks[@]}")"
helm_cmd="$(sed -n '/^helm install/,/[^\\]$/p' "${install_block}" | sed 's/^helm install/helm template/; s/ --wait//; s/ --create-namespace//')"
rendered="$(cd "${root}" && eval "${helm_cmd}" 2>/dev/null)"
check "its Helm command renders, with the operator image it names" \
  "$(grep -c "image: \"${REGISTRY}/kubetrain-operator:${TAG}\"" <<<"${rendered}")" 1
kubectl apply -k "${root}/crds" >/dev/null || { echo "CRDs rejected"; exit 1; }
"${root}/tests/tools/wait-crds" crd/trainingjobs.kubetrain.io crd/trainingsweeps.kubetrain.io >/dev/null
new_ns guide
apply_block="$(grep -l '^kubectl create namespace team-a' "${blocks[@]}")"
apply_cmd="$(grep -v '^kubectl create namespace' "${apply_block}" | sed "s/kubectl apply -n team-a -f -/kubectl apply -n ${ns} -f - --dry-run=server -o yaml/")"
(cd "${root}" && eval "${apply_cmd}") >"${work}/applied.yaml" 2>&1
check "its job is accepted by the apiserver" "$?" 0
check "with the trainer image it names" \
  "$(grep -c "image: ${REGISTRY}/kubetrain-trainer:${TAG}" "${work}/applied.yaml")/$(grep -c 'image:' "${work}/applied.yaml")" 2/2
# Its JSONPaths, on a job whose status is written as the operator writes it.
(cd "${root}" && eval "${apply_cmd/ --dry-run=server -o yaml/}") >/dev/null || fail "creating the guide's job"
k patch tj wide-deep --subresource=status --type merge -p \
  '{"status":{"progress":{"step":200,"totalSteps":400,"percent":50,"eta":"1m0s"},"metrics":{"eval":{"auc":0.757}}}}' \
  >/dev/null || fail "writing the job's status"
read_block="$(grep -l 'jsonpath=' "${blocks[@]}")"
got="$(grep -- "-o jsonpath" "${read_block}" | sed "s/-n team-a/-n ${ns}/" | (cd "${root}" && bash))"
check "its JSONPaths read progress and the AUC" "${got}" "200/400 steps (50%)
AUC 0.757"
((failures == 0)) && echo "docs test passed"
((failures == 0))

#!/usr/bin/env bash
# Checks crds/trainingjobs.kubetrain.io.yaml against a real kube-apiserver
# (needs KUBECONFIG, e.g. from the ctest "cluster" fixture or tests/cluster/up):
# the CRD is accepted, defaults apply, every CEL and value rule rejects what it
# should (with its message), transition rules guard running jobs, the status
# subresource and printer columns work. The same rules are implemented in C++ by
# operator/api/validation.cc; keep the two in step.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/.." && pwd)"
export PATH="$("${root}/tests/cluster/build"):${PATH}"
: "${KUBECONFIG:?KUBECONFIG must point at the test cluster}"

ns="crd-$(openssl rand -hex 4)"
k() { kubectl -n "${ns}" "$@"; }
fails=0
ok() { echo "ok: $1"; }
fail() { echo "FAIL: $1" >&2; fails=$((fails + 1)); }
check() {  # check DESCRIPTION ACTUAL EXPECTED
  if [[ "$2" == "$3" ]]; then ok "$1"; else fail "$1: got '$2', want '$3'"; fi
}
scratch="$(mktemp -d)"
cleanup() {
  kubectl delete namespace "${ns}" --wait=false >/dev/null 2>&1 || true
  rm -rf "${scratch}"
}
trap cleanup EXIT

kubectl apply -f "${here}/trainingjobs.kubetrain.io.yaml" -f "${here}/trainingsweeps.kubetrain.io.yaml" >/dev/null
kubectl wait --for=condition=Established --timeout=60s crd/trainingjobs.kubetrain.io \
  crd/trainingsweeps.kubetrain.io >/dev/null
ok "CRDs accepted and established"
kubectl create namespace "${ns}" >/dev/null

# job NAME [SPEC-YAML]: a TrainingJob; the spec defaults to one worker.
T='template: {spec: {containers: [{name: trainer, image: kubetrain-trainer}]}}'
one_worker="$(printf '  replicaSpecs:\n    Worker:\n      %s' "${T}")"
job() {
  local name="$1"
  local spec="${2:-${one_worker}}"
  printf 'apiVersion: kubetrain.io/v1alpha1\nkind: TrainingJob\nmetadata:\n  name: %s\nspec:\n%s\n' \
    "${name}" "${spec}"
}

# The C++ rules (operator/api) must give the same verdict on every case: set
# KUBETRAIN_API_CHECK to the kubetrain-api-check binary (found in build/*/ if unset).
api_check="${KUBETRAIN_API_CHECK:-}"
if [[ -z "${api_check}" ]]; then
  api_check="$(ls -t "${root}"/build/*/operator/api/kubetrain-api-check 2>/dev/null | head -1 || true)"
fi
if [[ -x "${api_check}" ]]; then
  echo "checking the C++ rules too, with ${api_check}"
else
  echo "skip: C++ agreement checks (build kubetrain-api-check or set KUBETRAIN_API_CHECK)"
  api_check=""
fi
# cpp_agrees DESCRIPTION VERDICT(accept|reject) MESSAGE FILE [OLD]: the C++ verdict.
cpp_agrees() {
  [[ -n "${api_check}" ]] || return 0
  local out rc=0
  out="$("${api_check}" ${5:+--old "$5"} "$4" 2>&1)" || rc=$?
  if [[ "$2" == accept && ${rc} -ne 0 ]]; then
    fail "$1 (C++): rejected with '${out}'"
  elif [[ "$2" == reject && ${rc} -eq 0 ]]; then
    fail "$1 (C++): accepted, want rejection containing '$3'"
  elif [[ "$2" == reject && "${out}" != *"$3"* ]]; then
    fail "$1 (C++): rejected with '${out}', want '$3'"
  else
    ok "$1 (C++ agrees)"
  fi
}

# rejects DESCRIPTION MESSAGE [C++-MESSAGE] < manifest: the apiserver rejects it
# with MESSAGE, and the C++ rules with C++-MESSAGE (default: the same).
rejects() {
  local out
  cat >"${scratch}/job.yaml"
  if out="$(k apply --dry-run=server -f "${scratch}/job.yaml" 2>&1)"; then
    fail "$1: accepted, want rejection containing '$2'"
  elif [[ "${out}" != *"$2"* ]]; then
    fail "$1: rejected with '${out}', want '$2'"
  else
    ok "$1 is rejected"
  fi
  cpp_agrees "$1" reject "${3:-$2}" "${scratch}/job.yaml"
}
accepts() {
  local out
  cat >"${scratch}/job.yaml"
  if out="$(k apply --dry-run=server -f "${scratch}/job.yaml" 2>&1)"; then
    ok "$1 is accepted"
  else
    fail "$1: ${out}"
  fi
  cpp_agrees "$1" accept "" "${scratch}/job.yaml"
}

# --- defaults
defaulted="$(job defaults | k apply --dry-run=server -o json -f -)"
get() { jq -c "$1" <<<"${defaulted}"; }
check "default replicas" "$(get .spec.replicaSpecs.Worker.replicas)" "1"
check "default restartPolicy" "$(get .spec.replicaSpecs.Worker.restartPolicy)" '"Never"'
check "default port" "$(get .spec.port)" "2222"
check "default successPolicy" "$(get .spec.successPolicy)" '"ChiefOrWorker0"'
check "default runPolicy" "$(get .spec.runPolicy)" '{"cleanPodPolicy":"Running","suspend":false}'
check "no default clusterDomain" "$(get .spec.clusterDomain)" "null"
check "no default serviceMode" "$(get .spec.serviceMode)" "null"
check "template passes through" "$(get .spec.replicaSpecs.Worker.template.spec.containers[0].image)" \
  '"kubetrain-trainer"'

# --- every example is accepted
for f in "${root}"/examples/*.yaml; do
  accepts "example ${f##*/}" <"${f}"
done

# --- structural rules
job bad-role "$(printf '  replicaSpecs:\n    Master:\n      %s' "${T}")" |
  rejects "unknown role" "spec.replicaSpecs keys must be PS, Worker, Chief or Evaluator" \
    'unknown replica type "Master"'
job bad-field "$(printf '  replicaSpecs:\n    Worker:\n      replica: 2\n      %s' "${T}")" |
  rejects "unknown field" 'unknown field "spec.replicaSpecs.Worker.replica"' \
    "spec.replicaSpecs.Worker.replica: unknown field"
job bad-policy "$(printf '  replicaSpecs:\n    Worker:\n      restartPolicy: Sometimes\n      %s' "${T}")" |
  rejects "unknown restartPolicy" 'Unsupported value: "Sometimes"' 'unsupported value "Sometimes"'
job no-template "$(printf '  replicaSpecs:\n    Worker:\n      replicas: 1')" |
  rejects "missing template" 'spec.replicaSpecs.Worker.template: Required value' \
    "spec.replicaSpecs.Worker.template: required field is missing"
job empty-specs "  replicaSpecs: {}" | rejects "empty replicaSpecs" "should have at least 1 properties"
job neg-replicas "$(printf '  replicaSpecs:\n    Worker:\n      replicas: -1\n      %s' "${T}")" |
  rejects "negative replicas" "should be greater than or equal to 0"
job bad-clean "$(printf '  runPolicy: {cleanPodPolicy: Some}\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "unknown cleanPodPolicy" 'Unsupported value: "Some"' 'unsupported value "Some"'
job bad-disruption "$(printf '  runPolicy: {disruptionPolicy: Sometimes}\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "unknown disruptionPolicy" 'Unsupported value: "Sometimes"' 'unsupported value "Sometimes"'
job bad-success "$(printf '  successPolicy: AnyWorker\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "unknown successPolicy" 'Unsupported value: "AnyWorker"' 'unsupported value "AnyWorker"'
job bad-port "$(printf '  port: 70000\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "port out of range" "should be less than or equal to 65535"
job bad-deadline "$(printf '  runPolicy: {activeDeadlineSeconds: 0}\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "activeDeadlineSeconds 0" "should be greater than or equal to 1"
job huge-deadline "$(printf '  runPolicy: {activeDeadlineSeconds: 9223372036854775807}\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "activeDeadlineSeconds above 10 years" "should be less than or equal to 315360000"
job bad-start-deadline "$(printf '  runPolicy: {startDeadlineSeconds: 0}\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "startDeadlineSeconds 0" "should be greater than or equal to 1"
job bad-backoff "$(printf '  runPolicy: {backoffLimit: -1}\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "negative backoffLimit" "should be greater than or equal to 0"
job bad-ttl "$(printf '  runPolicy: {ttlSecondsAfterFinished: -1}\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "negative ttlSecondsAfterFinished" "should be greater than or equal to 0"
job bad-min "$(printf '  runPolicy: {schedulingPolicy: {minAvailable: -1}}\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "negative minAvailable" "should be greater than or equal to 0"
job bad-domain "$(printf '  clusterDomain: Cluster.Local\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "bad clusterDomain" "spec.clusterDomain: Invalid value" \
    "spec.clusterDomain: must be a DNS subdomain"
job bad-mode "$(printf '  serviceMode: Shared\n  replicaSpecs:\n    Worker:\n      %s' "${T}")" |
  rejects "unknown serviceMode" "spec.serviceMode: Unsupported value" \
    "spec.serviceMode: unsupported value"

# --- CEL rules
job two-chiefs "$(printf '  replicaSpecs:\n    Chief:\n      replicas: 2\n      %s' "${T}")" |
  rejects "two chiefs" "spec.replicaSpecs.Chief.replicas must be 0 or 1"
job ps-only "$(printf '  replicaSpecs:\n    PS:\n      %s' "${T}")" |
  rejects "PS without workers" "spec.replicaSpecs.PS needs at least one Worker or Chief replica"
job ps-zero-workers "$(printf '  replicaSpecs:\n    PS:\n      %s\n    Worker:\n      replicas: 0\n      %s' "${T}" "${T}")" |
  rejects "PS with zero workers" "spec.replicaSpecs.PS needs at least one Worker or Chief replica"
job eval-only "$(printf '  replicaSpecs:\n    Evaluator:\n      %s' "${T}")" |
  rejects "no worker or chief" "needs at least one Worker or Chief replica: the success policy"
job ps-chief "$(printf '  replicaSpecs:\n    PS:\n      %s\n    Chief:\n      %s' "${T}" "${T}")" |
  accepts "PS with a chief"
job Bad-Name | rejects "upper-case job name" "metadata.name must be a DNS-1035 label" \
  "must be a DNS-1035 label"
job 1job | rejects "job name starting with a digit" "metadata.name must be a DNS-1035 label" \
  "must be a DNS-1035 label"
job job.v2 | rejects "dotted job name" "metadata.name must be a DNS-1035 label" \
  "must be a DNS-1035 label"
long54="$(printf 'a%.0s' {1..54})"
long55="$(printf 'a%.0s' {1..55})"
job "${long54}" "$(printf '  replicaSpecs:\n    Worker:\n      replicas: 10\n      %s' "${T}")" |
  accepts "54-char name with worker-9 (63 chars)"
job "${long55}" | rejects "55-char name with worker-0 (64 chars)" "would exceed 63 characters"
job "${long54}" "$(printf '  replicaSpecs:\n    Worker:\n      replicas: 11\n      %s' "${T}")" |
  rejects "54-char name with worker-10 (64 chars)" "would exceed 63 characters"
job "${long54}" "$(printf '  replicaSpecs:\n    Worker:\n      %s\n    Evaluator:\n      replicas: 0\n      %s' "${T}" "${T}")" |
  accepts "long name with zero evaluators"

# --- transition rules, on a stored job
job live "$(printf '  replicaSpecs:\n    Worker:\n      replicas: 2\n      %s' "${T}")" | k apply -f - >/dev/null
# No status written yet: it reads state Created (defaulted when read from etcd),
# which the operator's first status write may wait for the pods to run.
check "a job with no status reads state Created" \
  "$(k get tj live -o jsonpath='{.status.state}/{.status.conditions}')" "Created/"
check "and so does its STATE column" "$(k get tj live --no-headers | awk '{print $2}')" "Created"
# patched_cpp DESCRIPTION VERDICT MESSAGE PATCH: the C++ update rules on the
# stored job and the same merge patch applied locally.
patched_cpp() {
  [[ -n "${api_check}" ]] || return 0
  k get tj live -o json >"${scratch}/old.json"
  k patch tj live --type=merge -p "$4" --dry-run=client -o json >"${scratch}/new.json"
  cpp_agrees "$1" "$2" "$3" "${scratch}/new.json" "${scratch}/old.json"
}
patch_rejects() {  # DESCRIPTION MESSAGE PATCH
  local out
  patched_cpp "$1" reject "$2" "$3"
  if out="$(k patch tj live --type=merge -p "$3" 2>&1)"; then
    fail "$1: accepted, want '$2'"
  elif [[ "${out}" != *"$2"* ]]; then
    fail "$1: rejected with '${out}', want '$2'"
  else
    ok "$1 is rejected"
  fi
}
patch_accepts() {
  local out
  patched_cpp "$1" accept "" "$2"
  if out="$(k patch tj live --type=merge -p "$2" 2>&1)"; then ok "$1 is accepted"; else fail "$1: ${out}"; fi
}
patch_rejects "changing replicas of a running job" "spec.replicaSpecs cannot change while the job is running" \
  '{"spec":{"replicaSpecs":{"Worker":{"replicas":3}}}}'
patch_rejects "changing the pod template of a running job" "spec.replicaSpecs cannot change" \
  '{"spec":{"replicaSpecs":{"Worker":{"template":{"spec":{"containers":[{"name":"trainer","image":"other"}]}}}}}}'
patch_rejects "adding a role to a running job" "spec.replicaSpecs cannot change" \
  '{"spec":{"replicaSpecs":{"PS":{"template":{"spec":{"containers":[{"name":"trainer"}]}}}}}}'
patch_rejects "changing the port of a running job" "spec.port cannot change while the job is running" \
  '{"spec":{"port":3000}}'
patch_rejects "setting clusterDomain on a running job" "spec.clusterDomain cannot change" \
  '{"spec":{"clusterDomain":"example.org"}}'
patch_rejects "setting serviceMode on a running job" "spec.serviceMode cannot change" \
  '{"spec":{"serviceMode":"PerReplica"}}'
patch_rejects "changing successPolicy" "spec.successPolicy is immutable" \
  '{"spec":{"successPolicy":"AllWorkers"}}'
patch_accepts "changing runPolicy limits of a running job" \
  '{"spec":{"runPolicy":{"backoffLimit":3,"activeDeadlineSeconds":600}}}'
patch_accepts "suspending and reshaping in one update" \
  '{"spec":{"runPolicy":{"suspend":true},"replicaSpecs":{"Worker":{"replicas":3}}}}'
patch_accepts "reshaping and resuming a suspended job" \
  '{"spec":{"runPolicy":{"suspend":false},"port":3000}}'
check "reshaped replicas stored" "$(k get tj live -o jsonpath='{.spec.replicaSpecs.Worker.replicas}')" "3"

# --- status subresource, printer columns, short name
k patch tj live --subresource=status --type=merge \
  -p '{"status":{"state":"Running","replicaStatuses":{"Worker":{"active":3}},"observedGeneration":4}}' >/dev/null
check "status written through the subresource" "$(k get tj live -o jsonpath='{.status.state}')" "Running"
k patch tj live --type=merge -p '{"status":{"state":"Bogus"}}' >/dev/null 2>&1 || true
check "status ignored on the main resource" "$(k get tj live -o jsonpath='{.status.state}')" "Running"
header="$(k get tj --no-headers=false | sed -n 1p | tr -s ' ')"
check "printer columns" "${header}" "NAME STATE REASON REFUSED PROGRESS ETA RUNNING RESTARTS AUC AGE"
check "wide printer columns" "$(k get tj -o wide | sed -n 1p | tr -s ' ')" \
  "NAME STATE REASON REFUSED PROGRESS ETA RUNNING RESTARTS AUC PS WORKERS AGE"
# No progress, counts or metrics yet: those columns print empty (name, state, age).
row="$(k get tj live --no-headers | awk '{print $1, $2, NF}')"
check "printer row" "${row}" "live Running 3"
k patch tj live --subresource=status --type=merge -p '{"status":{"running":3,"restarts":1,
  "progress":{"step":250,"totalSteps":1000,"percent":25,"samplesPerSecond":5120,"eta":"4m10s",
  "replica":"worker-0","updateTime":"2026-01-02T03:04:05Z"}}}' >/dev/null
check "status.progress kept as written" \
  "$(k get tj live -o jsonpath='{.status.progress.step}/{.status.progress.totalSteps} {.status.progress.samplesPerSecond} {.status.progress.replica} {.status.progress.updateTime}')" \
  "250/1000 5120 worker-0 2026-01-02T03:04:05Z"
row="$(k get tj live --no-headers | awk '{print $1, $2, $3, $4, $5, $6}')"
check "printer row with progress, ETA, running and restarts" "${row}" "live Running 25 4m10s 3 1"
k patch tj live --subresource=status --type=merge \
  -p '{"status":{"metrics":{"steps":400,"eval":{"auc":0.757,"log_loss":0.5},"tags":["a"]}}}' >/dev/null
check "status.metrics kept as written" \
  "$(k get tj live -o jsonpath='{.status.metrics.steps} {.status.metrics.eval.log_loss} {.status.metrics.tags[0]}')" \
  "400 0.5 a"
row="$(k get tj live --no-headers | awk '{print $1, $2, $7}')"
check "printer row with the AUC" "${row}" "live Running 0.757"
# REFUSED: the reason of a CreateRefused condition, empty without one.
k patch tj live --subresource=status --type=merge -p '{"status":{"conditions":[{"type":"CreateRefused",
  "status":"True","reason":"QuotaExceeded","message":"cannot create pod live-worker-2: exceeded quota: q",
  "lastTransitionTime":"2026-01-02T03:04:05Z"}]}}' >/dev/null
row="$(k get tj live --no-headers | awk '{print $1, $2, $3}')"
check "printer row of a refused job" "${row}" "live Running QuotaExceeded"
k patch tj live --subresource=status --type=merge -p '{"status":{"conditions":[]}}' >/dev/null
row="$(k get tj live --no-headers | awk '{print $1, $2, $3}')"
check "printer row once nothing is refused" "${row}" "live Running 25"
check "short name tj" "$(k get tj -o name)" "trainingjob.kubetrain.io/live"
check "the crds folder applies with kubectl apply -f (its Kustomization is no .yaml)" \
  "$(kubectl apply -f "${here}" --dry-run=server 2>&1 | grep -c 'trainingjobs.kubetrain.io')" 1
check "and with kubectl apply -k" \
  "$(kubectl apply -k "${here}" --dry-run=server 2>&1 | grep -c 'trainingjobs.kubetrain.io')" 1

# --- TrainingSweep (crds/trainingsweeps.kubetrain.io.yaml, operator/api/sweep.cc)
# The trial template is the TrainingJob's spec schema, minus its update rules.
tj_spec="$(kubectl get crd trainingjobs.kubetrain.io -o json |
  jq -S '.spec.versions[0].schema.openAPIV3Schema.properties.spec | del(."x-kubernetes-validations", .description)')"
tsw_template="$(kubectl get crd trainingsweeps.kubetrain.io -o json |
  jq -S '.spec.versions[0].schema.openAPIV3Schema.properties.spec.properties.trialTemplate | del(.description)')"
check "trialTemplate schema equals the TrainingJob spec schema" "${tsw_template}" "${tj_spec}"

# sweep NAME [PARAMS-YAML] [EXTRA-SPEC-YAML]: a grid sweep over one double parameter.
P='    - {name: lr, type: double, min: 0.001, max: 0.003, step: 0.001}'
sweep() {
  printf 'apiVersion: kubetrain.io/v1alpha1\nkind: TrainingSweep\nmetadata:\n  name: %s\nspec:\n  objective: {metric: eval.auc}\n  algorithm: {name: grid}\n%s  parameters:\n%s\n  trialTemplate:\n    replicaSpecs:\n      Worker:\n        %s\n' \
    "$1" "${3:-}" "${2:-${P}}" "${T}"
}
sdefaulted="$(sweep sdefaults | k apply --dry-run=server -o json -f -)"
check "sweep defaults" "$(jq -c '[.spec.parallelism, .spec.maxTrials, .spec.suspend, .spec.objective.direction, .spec.algorithm.seed, .spec.parameters[0].scale]' <<<"${sdefaulted}")" \
  '[1,10,false,"maximize",0,"linear"]'
sweep ok-sweep | accepts "a grid sweep"
sweep ok-random '    - {name: lr, type: double, min: 0.001, max: 0.1, scale: log}
    - {name: batch, type: int, min: 128, max: 1024, step: 128}
    - {name: layers, type: categorical, values: ["256,128", "1024,512,256"]}' |
  sed 's/algorithm: {name: grid}/algorithm: {name: random, seed: 7}/' | accepts "a random sweep of every parameter type"
sweep min-max '    - {name: lr, type: double, min: 0.1, max: 0.1, step: 0.01}' |
  rejects "min not below max" "min must be less than max"
sweep log-zero '    - {name: lr, type: double, min: 0, max: 0.1, step: 0.01, scale: log}' |
  rejects "log scale with min 0" "scale log needs min > 0"
sweep grid-nostep '    - {name: lr, type: double, min: 0.001, max: 0.1}' |
  rejects "grid without a step for a double" "grid search needs a finite space"
sweep no-minmax '    - {name: lr, type: double}' |
  rejects "double without min and max" "double and int parameters need min and max"
sweep int-frac '    - {name: steps, type: int, min: 1.5, max: 4}' |
  rejects "int with a fractional min" "int parameters need integer min, max and step"
sweep cat-empty '    - {name: c, type: categorical, values: []}' |
  rejects "categorical without values" "categorical parameters need values"
sweep values-double '    - {name: lr, type: double, min: 0.1, max: 0.2, step: 0.1, values: ["a"]}' |
  rejects "values on a double" "values is only for categorical parameters"
sweep bad-pname '    - {name: learning-rate, type: double, min: 0.1, max: 0.2, step: 0.1}' |
  rejects "parameter name with a dash" "spec.parameters[0].name" "spec.parameters[0].name: must match"
sweep dup-names "$(printf '%s\n%s' "${P}" "${P}")" |
  rejects "duplicate parameter names" "Duplicate value"
sweep zero-step '    - {name: lr, type: double, min: 0.1, max: 0.2, step: 0}' |
  rejects "step 0" "should be greater than 0"
sweep par-zero "" '  parallelism: 0
' | rejects "parallelism 0" "should be greater than or equal to 1"
sweep trials-zero "" '  maxTrials: 0
' | rejects "maxTrials 0" "should be greater than or equal to 1"
sweep failed-neg "" '  maxFailedTrials: -1
' | rejects "maxFailedTrials -1" "should be greater than or equal to 0"
# spec.earlyStopping, plain schema (no CEL: nothing to add to admission cost).
esdefaulted="$(sweep esdefaults "" '  earlyStopping: {}
' | k apply --dry-run=server -o json -f -)"
check "earlyStopping defaults" "$(jq -c '.spec.earlyStopping' <<<"${esdefaulted}")" \
  '{"algorithm":"medianStop","minTrialsRequired":3,"startStep":1}'
sweep es-ok "" '  earlyStopping: {algorithm: medianStop, minTrialsRequired: 2, startStep: 100}
' | accepts "a sweep with early stopping"
sweep es-min-zero "" '  earlyStopping: {minTrialsRequired: 0}
' | rejects "earlyStopping.minTrialsRequired 0" "should be greater than or equal to 1"
sweep es-start-zero "" '  earlyStopping: {startStep: 0}
' | rejects "earlyStopping.startStep 0" "should be greater than or equal to 1"
sweep es-algorithm "" '  earlyStopping: {algorithm: hyperband}
' | rejects "an unknown early stopping algorithm" "medianStop"
sweep bad-metric | sed 's/metric: eval.auc/metric: "eval..auc"/' |
  rejects "metric path with an empty segment" "spec.objective.metric" \
  "spec.objective.metric: must be a dotted path"
sweep no-workers | sed 's/      Worker:/      PS:/' |
  rejects "template without workers" "spec.replicaSpecs needs at least one Worker or Chief replica"
sweep bad-template | sed 's/        template:/        replica: 2\n        template:/' |
  rejects "unknown field in the template" 'unknown field "spec.trialTemplate.replicaSpecs.Worker.replica"' \
    "spec.trialTemplate.replicaSpecs.Worker.replica: unknown field"
sweep Bad-Sweep | rejects "upper-case sweep name" "metadata.name must be a DNS-1035 label"
# "<name>-9-worker-0" with the default 10 trials: a 52-character name fits 63.
long52="$(printf 'a%.0s' {1..52})"
long53="$(printf 'a%.0s' {1..53})"
sweep "${long52}" | accepts "52-char sweep name with trial 9's worker-0 (63 chars)"
sweep "${long53}" | rejects "53-char sweep name (64 chars)" "would exceed 63 characters"
sweep "${long52}" "" '  maxTrials: 11
' | rejects "52-char sweep name with trial 10 (64 chars)" "would exceed 63 characters"

# Status subresource, printer columns, short name.
sweep live-sweep | k apply -f - >/dev/null
k patch tsw live-sweep --subresource=status --type=merge \
  -p '{"status":{"state":"Running","trialProgress":"2/6","bestTrial":{"name":"live-sweep-1","parameters":{"lr":"0.002"},"value":0.81},"trials":[{"name":"live-sweep-0","index":0,"parameters":{"lr":"0.001"},"phase":"Failed","reason":"MetricMissing"}]}}' >/dev/null
check "sweep printer columns" "$(k get tsw --no-headers=false | sed -n 1p | tr -s ' ')" \
  "NAME BEST TRIALS STATE REASON AGE"
check "sweep printer row" "$(k get tsw live-sweep --no-headers | awk '{print $1, $2, $3, $4}')" \
  "live-sweep 0.81 2/6 Running"
check "short name tsw" "$(k get tsw -o name)" "trainingsweep.kubetrain.io/live-sweep"
# Update rules, with the C++ verdict on the same merge patch.
sweep_patch() {  # sweep_patch DESCRIPTION accept|reject MESSAGE PATCH
  local out
  if [[ -n "${api_check}" ]]; then
    k get tsw live-sweep -o json >"${scratch}/old.json"
    k patch tsw live-sweep --type=merge -p "$4" --dry-run=client -o json >"${scratch}/new.json"
    cpp_agrees "$1" "$2" "$3" "${scratch}/new.json" "${scratch}/old.json"
  fi
  if out="$(k patch tsw live-sweep --type=merge -p "$4" 2>&1)"; then
    [[ "$2" == accept ]] && ok "$1 is accepted" || fail "$1: accepted, want '$3'"
  elif [[ "$2" == reject && "${out}" == *"$3"* ]]; then
    ok "$1 is rejected"
  else
    fail "$1: ${out}"
  fi
}
sweep_patch "changing the objective" reject "spec.objective is immutable" '{"spec":{"objective":{"goal":0.9}}}'
sweep_patch "changing parallelism and maxTrials" accept "" '{"spec":{"parallelism":3,"maxTrials":4}}'

if ((fails > 0)); then
  echo "${fails} check(s) failed" >&2
  exit 1
fi
echo "all CRD checks passed"

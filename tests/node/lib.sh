# Shared by the real-node tests (ctest label `node`); source it. Needs
# KUBECONFIG and KUBETRAIN_TEST_NODE_DIR (the `node` or `node2` fixture's cluster
# dir, holding images.env and each node's containerd socket). With two nodes
# (the `node2` fixture, DIR/node2 exists) the operator is pinned to node 1, the
# one tests never kill, and pod_template's pods may land on either node.
#   restricted_ns PREFIX          a new namespace enforcing Pod Security `restricted` -> $ns
#   ensure_operator [TAG]         the kustomize base with the built operator image (TAG:
#                                 another tag of it; plus 2 s progress reads and writes),
#                                 rolled out and Ready
#   sh_job NAME ROLES SCRIPT      a job whose replicas run SCRIPT in the plain Debian image
#   trainer_job NAME ARGS ...     2 PS + 2 workers of the trainer image
#   pod_watch_start / pod_creates count pod creations (distinct UIDs per name) from a watch
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "${here}/../.." && pwd)"
export PATH="$("${root}/tests/cluster/build"):$("${root}/tests/cluster/build-helm"):${PATH}"
: "${KUBECONFIG:?KUBECONFIG must point at the real-node test cluster}"
node_cluster="${KUBETRAIN_TEST_NODE_DIR:?KUBETRAIN_TEST_NODE_DIR must name the real-node cluster dir}"
# shellcheck source=../tools/testlib.sh
source "${root}/tests/tools/testlib.sh"
# shellcheck source=/dev/null
source "${node_cluster}/images.env"
# shellcheck source=../cluster/node.env
source "${root}/tests/cluster/node.env"
work="$(mktemp -d)"
namespaces=()
bg_pids=()
pvs=()  # PersistentVolumes to delete at exit
T=${T:-180}  # seconds any single wait may take
WAIT_SECONDS=${T}
ctr_() { ctr --address "${node_cluster}/node/containerd.sock" -n k8s.io "$@"; }
real_nodes=1
[[ -d "${node_cluster}/node2" ]] && real_nodes=2
node_cleanup() {
  local p
  for p in "${bg_pids[@]}"; do kill "${p}" 2>/dev/null; wait "${p}" 2>/dev/null; done
  if ((failures)); then
    echo "---- operator logs (last 30 lines of each pod)"
    for p in $(kubectl -n kubetrain-system get pods -o name 2>/dev/null); do
      echo "== ${p}"; kubectl -n kubetrain-system logs "${p}" --tail 30 2>&1
    done
  fi
  for p in "${namespaces[@]}"; do kubectl delete namespace "${p}" --wait=false >/dev/null 2>&1; done
  for p in "${pvs[@]}"; do kubectl delete pv "${p}" --wait=false >/dev/null 2>&1; done
  rm -rf "${work}"
}
trap node_cleanup EXIT

restricted_ns() {
  ns="$1-$(openssl rand -hex 3)"
  namespaces+=("${ns}")
  kubectl create namespace "${ns}" >/dev/null
  kubectl label namespace "${ns}" pod-security.kubernetes.io/enforce=restricted \
    pod-security.kubernetes.io/enforce-version=latest >/dev/null
  wait_until "the default service account in ${ns}" kubectl -n "${ns}" get sa default
}
k() { kubectl -n "${ns}" "$@"; }

# kustomize_overlay TAG: an overlay of deploy/kustomize/base that runs the built
# operator image under TAG (in $work/overlay-TAG); prints its directory.
kustomize_overlay() {
  local repo="${KUBETRAIN_OPERATOR_IMAGE%:*}" out="${work}/overlay-$1"
  mkdir -p "${out}"
  cat >"${out}/kustomization.yaml" <<KUST
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="${out}" "${root}/crds")
  - $(realpath --relative-to="${out}" "${root}/deploy/kustomize/base")
images:
  - name: ghcr.io/kubetrain/kubetrain-operator
    newName: ${repo}
    newTag: $1
# Test speed: status.progress read and written every 2 s, not 15 s and 30 s (what
# node.progress, node.network_policy and node.sweep_early_stop wait for).
patches:
  - target: {kind: Deployment, name: kubetrain-operator}
    patch: |
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: --progress-interval=2}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: --progress-write-interval=2}
      - {op: add, path: /spec/template/spec/containers/0/args/-, value: --progress-backoff=2}
KUST
  if ((real_nodes > 1)); then
    cat >>"${out}/kustomization.yaml" <<KUST
      - op: add
        path: /spec/template/spec/nodeSelector
        value: {kubetrain.io/test-node: "1"}
KUST
  fi
  echo "${out}"
}
# tag_operator_image TAG: the built operator image also under TAG in the node's containerd.
tag_operator_image() {
  local repo="${KUBETRAIN_OPERATOR_IMAGE%:*}" d
  for d in "${node_cluster}"/node "${node_cluster}"/node2; do
    [[ -S "${d}/containerd.sock" && ! -f "${d}/killed" ]] || continue
    ctr --address "${d}/containerd.sock" -n k8s.io images tag --force "${KUBETRAIN_OPERATOR_IMAGE}" \
      "${repo}:$1" >/dev/null
  done
}
ensure_operator() {
  local tag="${1:-${KUBETRAIN_OPERATOR_IMAGE##*:}}"
  tag_operator_image "${tag}"
  kubectl apply -k "$(kustomize_overlay "${tag}")" >/dev/null || { fail "kubectl apply -k failed"; return 1; }
  kubectl -n kubetrain-system rollout status deploy/kubetrain-operator --timeout "${T}s" >/dev/null ||
    { fail "the operator did not roll out"; return 1; }
}
lease_holder() {
  kubectl -n kubetrain-system get lease kubetrain-operator -o jsonpath='{.spec.holderIdentity}' 2>/dev/null
}

# pod_template IMAGE ARGS-YAML [VOLUMES MOUNTS]: a restricted-compliant pod template
# on the real node with a writable /tmp (the root filesystem is read-only);
# VOLUMES and MOUNTS (", {...}") extend the volume and mount lists.
pod_template() {
  cat <<TPL
      template:
        spec:
          nodeSelector: {type: real}
          securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
          volumes: [{name: tmp, emptyDir: {}}${3:-}]
          containers:
            - name: trainer
              image: $1
              $2
              resources: {requests: {cpu: 50m, memory: 64Mi}}
              volumeMounts: [{name: tmp, mountPath: /tmp}${4:-}]
              securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
TPL
}
# sh_job NAME "PS=1 Worker=2 ..." SCRIPT: every replica runs SCRIPT with sh.
sh_job() {
  local name="$1" roles="$2" script="$3" role
  {
    printf 'apiVersion: kubetrain.io/v1alpha1\nkind: TrainingJob\nmetadata: {name: %s}\nspec:\n' "${name}"
    printf '  runPolicy: {backoffLimit: 2, activeDeadlineSeconds: 600}\n  replicaSpecs:\n'
    for role in ${roles}; do
      printf '    %s:\n      replicas: %s\n      restartPolicy: Never\n' "${role%%=*}" "${role#*=}"
      pod_template "${KUBETRAIN_DEBIAN_IMAGE}" "command: [sh, -c, $(printf '%s' "${script}" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')]"
    done
  } | k apply -f - >/dev/null
}
# trainer_job NAME ARGS-YAML [VOLUMES MOUNTS]: 2 PS + 2 workers of the trainer
# image, restartPolicy ExitCode (pod_template's optional extra volumes/mounts).
trainer_job() {
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  runPolicy: {backoffLimit: 3, activeDeadlineSeconds: 900}
  replicaSpecs:
    PS:
      replicas: 2
      restartPolicy: ExitCode
$(pod_template "${KUBETRAIN_TRAINER_IMAGE}" "$2" "${3:-}" "${4:-}")
    Worker:
      replicas: 2
      restartPolicy: ExitCode
$(pod_template "${KUBETRAIN_TRAINER_IMAGE}" "$2" "${3:-}" "${4:-}")
JOB
}
job_state() { k get tj "$1" -o jsonpath='{.status.state}' 2>/dev/null; }
wait_state() {  # wait_state JOB STATE
  has_state() { [[ "$(job_state "$1")" == "$2" ]]; }
  wait_until "$1 to be $2" has_state "$1" "$2" || echo "  $1 is '$(job_state "$1")'" >&2
}

# A watch on the pods of namespace $ns: every ADDED event's name and UID, so a
# pod created twice shows as one name with two UIDs.
pod_watch_start() {
  kubectl -n "${ns}" get pods --watch --output-watch-events \
    -o 'custom-columns=EVENT:.type,NAME:.object.metadata.name,UID:.object.metadata.uid' --no-headers \
    >"${work}/watch-${ns}.log" 2>&1 &
  bg_pids+=($!)
}
pod_creates() {  # pod_creates: "NAME UIDS" for every pod seen, UIDS = distinct UIDs
  awk '$1 == "ADDED" {print $2, $3}' "${work}/watch-${ns}.log" | sort -u | awk '{n[$1]++} END {for (p in n) print p, n[p]}'
}

# --- Two real nodes (the `node2` fixture) -----------------------------------
# shared_ns PREFIX: a new `restricted` namespace -> $ns with a claim `ckpt` bound
# to a ReadWriteMany hostPath PersistentVolume both nodes mount (they are one
# machine), standing in for shared storage; the directory, $ckpt_host, is under
# the cluster dir (removed by `down`), the PV is deleted at exit.
shared_ns() {
  restricted_ns "$1"
  ckpt_host="${node_cluster}/shared/${ns}"
  mkdir -p "${ckpt_host}"
  chmod 0777 "${ckpt_host}"
  pvs+=("kubetrain-ckpt-${ns}")
  cat <<PV | kubectl apply -f - >/dev/null
apiVersion: v1
kind: PersistentVolume
metadata: {name: kubetrain-ckpt-${ns}}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  claimRef: {namespace: ${ns}, name: ckpt}
  hostPath: {path: ${ckpt_host}, type: Directory}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: ckpt, namespace: ${ns}}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: kubetrain-ckpt-${ns}
  resources: {requests: {storage: 1Gi}}
PV
  bound() { [[ "$(k get pvc ckpt -o jsonpath='{.status.phase}')" == Bound ]]; }
  wait_until "the checkpoint claim to bind" bound
}
# spread_role ROLE JOB ARGS-YAML: a replica template spread evenly over the real
# nodes (maxSkew 1 per hostname; nodes with a taint the pod does not tolerate,
# such as a dead node's unreachable taint, do not count), mounting the claim
# `ckpt` (shared_ns) at /ckpt. Pods tolerate an unreachable or not-ready node for 10 s (not the default
# 300 s), so the node-lifecycle controller marks a dead node's pods for deletion
# soon after it stops answering; getting them replaced is the operator's part.
spread_role() {
  cat <<TPL
      template:
        spec:
          nodeSelector: {type: real}
          terminationGracePeriodSeconds: 30
          tolerations:
            - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 10}
            - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 10}
          topologySpreadConstraints:
            - maxSkew: 1
              topologyKey: kubernetes.io/hostname
              whenUnsatisfiable: DoNotSchedule
              nodeTaintsPolicy: Honor
              labelSelector: {matchLabels: {kubetrain.io/job-name: $2, kubetrain.io/replica-type: $1}}
          securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
          volumes: [{name: tmp, emptyDir: {}}, {name: ckpt, persistentVolumeClaim: {claimName: ckpt}}]
          containers:
            - name: trainer
              image: ${KUBETRAIN_TRAINER_IMAGE}
              $3
              resources: {requests: {cpu: 50m, memory: 64Mi}}
              volumeMounts: [{name: tmp, mountPath: /tmp}, {name: ckpt, mountPath: /ckpt}]
              securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
TPL
}
# spread_job NAME STEPS [PS WORKERS]: a Wide & Deep job (default 2 PS + 4 workers)
# spread over both nodes, checkpointing every 200 steps to /ckpt/NAME (far apart, so
# a periodic checkpoint is seldom taken for one made at SIGTERM).
spread_job() {
  local args
  args="args: [--model=wide_deep, \"--layers=64,32\", --data-dir=/tmp/data, --generate-data=20000, --steps=$2,"
  args+=" --batch-size=256, --threads=1, --log-every=100, --checkpoint-dir=/ckpt/$1, --checkpoint-every=200]"
  cat <<JOB | k apply -f - >/dev/null
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  runPolicy: {backoffLimit: 3, activeDeadlineSeconds: 1500}
  replicaSpecs:
    PS:
      replicas: ${3:-2}
      restartPolicy: ExitCode
$(spread_role ps "$1" "${args}")
    Worker:
      replicas: ${4:-4}
      restartPolicy: ExitCode
$(spread_role worker "$1" "${args}")
JOB
}
# job_pods JOB: "NAME NODE UID PHASE" per pod of JOB.
job_pods() {
  k get pods -l "kubetrain.io/job-name=$1" --no-headers \
    -o custom-columns='N:.metadata.name,NODE:.spec.nodeName,UID:.metadata.uid,P:.status.phase'
}
# live_step POD: the step worker POD has completed, from its metrics endpoint (the
# port named "metrics") through the apiserver's pod proxy; empty if it does not
# answer. (Its log is no measure: stdout into a pipe is block-buffered, and lines
# arrive kilobytes late, or never when the process is killed.)
live_step() {
  local port
  port="$(k get pod "$1" -o jsonpath='{.spec.containers[0].ports[?(@.name=="metrics")].containerPort}' 2>/dev/null)"
  [[ -n "${port}" ]] || return 0
  kubectl get --request-timeout 3s --raw "/api/v1/namespaces/${ns}/pods/$1:${port}/proxy/metrics" 2>/dev/null |
    awk '$1 == "kubetrain_trainer_step" {printf "%d\n", $2}'
}
# job_step JOB: worker-0's live_step: the coordinator's step, the one that names
# the job's checkpoints.
job_step() { live_step "$1-worker-0"; }
# two_node_test PREFIX: a test on both real nodes starts here: the cluster must have
# two, the operator is installed, and shared_ns PREFIX is the test's namespace ($ns).
two_node_test() {
  ((real_nodes == 2)) || { fail "the cluster has ${real_nodes} real node(s), this test needs 2"; exit 1; }
  ensure_operator || exit 1
  shared_ns "$1"
}
# step_at_least JOB N: worker-0 (the coordinator) has reached step N.
step_at_least() { local s; s="$(job_step "$1")"; [[ -n "${s}" ]] && ((s >= $2)); }
# step_mid_interval JOB: worker-0's step lies between two periodic checkpoints (every 200).
step_mid_interval() { local s; s="$(job_step "$1")"; [[ -n "${s}" ]] && ((s % 200 >= 50 && s % 200 <= 150)); }
# resumed_step POD: the step POD's trainer says it restored ("resumed from checkpoint N",
# "restored shard from checkpoint N", "resuming at step N"); empty if it started fresh.
resumed_step() {
  k logs "$1" 2>/dev/null |
    sed -n -e 's/.*resumed from checkpoint \([0-9][0-9]*\).*/\1/p' \
      -e 's/.*restored shard from checkpoint \([0-9][0-9]*\).*/\1/p' \
      -e 's/.*resuming at step \([0-9][0-9]*\).*/\1/p' | tail -n1
}
# status_count JOB FIELD: .status.FIELD read defensively: a number as is, a map of
# per-role counts summed (a "total" key wins), absent -> "absent".
status_count() {
  k get tj "$1" -o json 2>/dev/null | python3 -c '
import json, sys
v = json.load(sys.stdin).get("status", {}).get(sys.argv[1])
if v is None: print("absent")
elif isinstance(v, dict): print(v.get("total", sum(x for x in v.values() if isinstance(x, int))))
else: print(v)' "$2"
}
# node_s3_up BUCKET: a real S3 server (versitygw, checking SigV4) on the node's bridge
# address, where pods reach it like an endpoint outside the cluster; its s3.env sourced
# (AWS_* for the host's requests and the pods' Secret), BUCKET created, and `s3` defined:
#   s3 METHOD KEY [FILE]   a signed request to BUCKET's KEY (curl signs SigV4); prints the body.
# Sets the EXIT trap to stop the server and clean the node's namespace up.
node_s3_up() {
  bucket="$1"
  s3dir="${work}/s3"
  s3_down() { [[ -f "${s3dir}/pid" ]] && "${root}/tests/s3/down" "${s3dir}" >/dev/null 2>&1; }
  trap 's3_down; node_cleanup' EXIT
  KUBETRAIN_S3_ADDR="${KT_NODE_GATEWAY}" "${root}/tests/s3/up" "${s3dir}" >/dev/null ||
    { fail "tests/s3/up on ${KT_NODE_GATEWAY} failed"; return 1; }
  # shellcheck source=/dev/null
  source "${s3dir}/s3.env"
  s3 PUT "" >/dev/null || { fail "cannot create bucket ${bucket}"; return 1; }
}
s3() {
  local sha args=()
  if [[ -n "${3:-}" ]]; then
    sha="$(sha256sum "$3" | cut -d' ' -f1)"
    args=(--data-binary "@$3" -H "Content-Type: application/octet-stream")
  else
    sha="$(printf '' | sha256sum | cut -d' ' -f1)"
  fi
  curl -sf -X "$1" -H "x-amz-content-sha256: ${sha}" "${args[@]}" \
    --aws-sigv4 "aws:amz:${AWS_REGION}:s3" --user "${AWS_ACCESS_KEY_ID}:${AWS_SECRET_ACCESS_KEY}" \
    "${AWS_ENDPOINT_URL_S3}/${bucket}$2"
}

stamp() { date -u +%H:%M:%S.%3N; }

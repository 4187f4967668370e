# Objects the deploy tests (argocd_health_test.sh, kstatus_test.sh) both drive the
# operator with, created in the test's namespace ($ns, tests/tools/testlib.sh's k).

# kwok_job NAME [RUN-POLICY] [RESTART-POLICY]: a job of one kwok worker
# (restartPolicy Never unless given); the kwok stages end it by its annotations.
kwok_job() {
  cat <<JOB | k apply -f - >/dev/null || fail "creating $1"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  runPolicy: {${2:-}}
  replicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: ${3:-Never}
      template:
        spec:
          nodeSelector: {type: kwok}
          tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
          containers: [{name: trainer, image: kubetrain-trainer}]
JOB
}

# privileged_job: a TrainingJob whose worker asks for a privileged container (a
# namespace enforcing Pod Security `restricted` refuses its pod).
privileged_job() {
  cat <<JOB | k apply -f - >/dev/null || fail "creating privileged"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingJob
metadata: {name: privileged}
spec:
  replicaSpecs:
    Worker:
      template:
        spec:
          containers: [{name: trainer, image: kubetrain-trainer, securityContext: {privileged: true}}]
JOB
}

# kwok_sweep NAME WORKER-ANNOTATIONS [SUSPEND]: a two-trial grid sweep on the kwok
# nodes; the annotations tell the kwok stages how its trials end.
kwok_sweep() {
  cat <<SWEEP | k apply -f - >/dev/null || fail "creating sweep $1"
apiVersion: kubetrain.io/v1alpha1
kind: TrainingSweep
metadata: {name: $1}
spec:
  suspend: ${3:-false}
  objective: {metric: eval.auc, direction: maximize}
  algorithm: {name: grid}
  parallelism: 2
  parameters:
    - {name: x, type: categorical, values: ["1", "5"]}
  trialTemplate:
    replicaSpecs:
      Worker:
        template:
          metadata:
            annotations: {$2}
          spec:
            nodeSelector: {type: kwok}
            tolerations: [{key: kwok.x-k8s.io/node, operator: Exists, effect: NoSchedule}]
            containers: [{name: trainer, image: kubetrain-trainer, args: ["--x=\${params.x}"]}]
SWEEP
}

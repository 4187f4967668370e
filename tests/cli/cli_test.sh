#!/usr/bin/env bash
# End-to-end tests of the `kubetrain` command with real processes.
#   cli_test.sh <case>    KUBETRAIN=<kubetrain binary>, KUBETRAIN_TRAINER=<trainer binary>
# No sleeps as synchronisation: every wait polls a condition until a deadline.
set -u
case_name=$1
here=$(cd "$(dirname "$0")" && pwd)
jobs=$here/jobs
: "${KUBETRAIN:?set KUBETRAIN to the kubetrain binary}"
export KT_TEST_DIR
KT_TEST_DIR=$(mktemp -d /tmp/kubetrain-cli-test.XXXXXX)
runner_pid=
cleanup() {
  # Only what this test started: the runner (if still there).
  if [[ -n $runner_pid ]] && kill -0 "$runner_pid" 2>/dev/null; then kill -KILL "$runner_pid"; fi
  # After a failure, whatever of ours the runner left behind (by pid, from its output).
  if [[ -f $KT_TEST_DIR/out ]]; then
    local pid
    for pid in $(started_pids) $(grandchild_pids); do
      alive "$pid" && kill -KILL "$pid" 2>/dev/null
    done
  fi
  rm -rf "$KT_TEST_DIR"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  if [[ -f $KT_TEST_DIR/out ]]; then
    echo "---- output" >&2
    tail -n 60 "$KT_TEST_DIR/out" >&2
  fi
  if [[ -f $KT_TEST_DIR/err ]]; then
    echo "---- stderr" >&2
    cat "$KT_TEST_DIR/err" >&2
  fi
  exit 1
}

# run_job <file> [flags...]: runs kubetrain run; sets $rc. Its run directory goes under
# $KT_TEST_DIR (TMPDIR), so the one a failed run keeps is removed with it.
run_job() {
  TMPDIR=$KT_TEST_DIR "$KUBETRAIN" run -f "$@" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  rc=$?
}

expect_out() { grep -Eq -- "$1" "$KT_TEST_DIR/out" || fail "output lacks /$1/"; }
expect_err() { grep -Eq -- "$1" "$KT_TEST_DIR/err" || fail "stderr lacks /$1/"; }

# wait_for <seconds> <command...>: polls until the command succeeds.
wait_for() {
  local limit=$1
  shift
  local deadline=$((SECONDS + limit))
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# Every pid started by the runner (replica processes, from its "started" lines)
# and every grandchild the test jobs print.
started_pids() {
  sed -nE 's/.*started [a-z]+-[0-9]+ \(pid ([0-9]+)\).*/\1/p' "$KT_TEST_DIR/out"
}
grandchild_pids() { sed -nE 's/.*\| grandchild ([0-9]+).*/\1/p' "$KT_TEST_DIR/out"; }

# alive <pid>: exists and is not a zombie.
alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

expect_all_gone() {
  local pid
  for pid in $(started_pids) $(grandchild_pids); do
    alive "$pid" && fail "process $pid is still running"
    # Nothing may remain in the replica's process group either.
    if pgrep -g "$pid" >/dev/null 2>&1; then
      for p in $(pgrep -g "$pid"); do alive "$p" && fail "process $p of group $pid is still running"; done
    fi
  done
  return 0
}

case $case_name in
wide_deep)
  run_job "$jobs/wide-deep-small.yaml"
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out '^result: Succeeded'
  ! grep -q '^run directory kept' "$KT_TEST_DIR/out" || fail "a successful run kept its directory"
  expect_out 'state: Succeeded'
  # status.progress as in a cluster: read from worker 0's metrics endpoint (the
  # runner gives it a free --metrics-port, the other trainers none), announced
  # when it changes, 100% once the job succeeded.
  expect_out 'started worker-0 .* --metrics-port=[1-9][0-9]* '
  expect_out 'started worker-1 .* --metrics-port=0 '
  expect_out '^kubetrain +\| progress: [0-9]+% \(step [0-9]+/300\)'
  expect_out '^kubetrain +\| progress: 100% \(step 300/300\)'
  expect_out '^    percent: 100$'
  # Worker 0 (the coordinator) evaluates the trained model: AUC at least 0.80
  # (it also exits 3 below that, failing the job).
  for w in worker-0; do
    auc=$(sed -nE "s/^metrics $w: AUC ([0-9.]+),.*/\1/p" "$KT_TEST_DIR/out")
    [[ -n $auc ]] || fail "no AUC for $w"
    awk -v a="$auc" 'BEGIN { exit !(a >= 0.80) }' || fail "$w AUC $auc < 0.80"
    echo "$w AUC $auc"
  done
  expect_all_gone
  ;;
short_progress)
  # A job that ends before the runner's first metrics read still reports its
  # progress: the deciding replica exits only once its last step was read.
  run_job "$jobs/wide-deep-tiny.yaml"
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out '^result: Succeeded'
  expect_out 'started worker-0 .* --metrics-final-wait=10 '
  expect_out '^kubetrain +\| progress: 100% \(step 5/5\)'
  expect_out '^    percent: 100$'
  expect_all_gone
  ;;
examples)
  # Every image in the examples and in the README's YAML runs on a cluster as
  # printed: a tag other than latest (the kubelet pulls :latest Always), and ours
  # under their registry at this release's tag (a bare kubetrain-trainer is
  # docker.io/library/kubetrain-trainer, which does not exist).
  version=$(sed -nE 's/^project\(kubetrain VERSION ([0-9.]+) .*/\1/p' "$here/../../CMakeLists.txt")
  [[ -n $version ]] || fail "no project version in CMakeLists.txt"
  n=0
  while read -r where image; do
    n=$((n + 1))
    [[ $image =~ :[A-Za-z0-9._-]+$ && $image != *:latest ]] || fail "$where: image $image has no pinned tag"
    [[ $image != *kubetrain-* || $image == ghcr.io/kubetrain/*:"$version" ]] ||
      fail "$where: image $image is not ghcr.io/kubetrain/<image>:$version"
  done < <(
    grep -HnoE 'image: [^],} ]+' "$here"/../../examples/*.yaml | sed 's/:image: / /'
    awk '/^```yaml$/ { y = 1; next } /^```$/ { y = 0 }
      y && match($0, /image: [^],} ]+/) { print FILENAME ":" FNR, substr($0, RSTART + 7, RLENGTH - 7) }' \
      "$here/../../README.md")
  ((n >= 10)) || fail "only $n images found in the examples and the README"
  # The MLP example: init containers write data into an emptyDir (a directory
  # per pod locally), AllWorkers success.
  run_job "$here/../../examples/mlp.yaml"
  [[ $rc -eq 0 ]] || fail "mlp: exit code $rc, want 0"
  expect_out 'worker-0 init container generate-data exited with code 0'
  expect_out '^result: Succeeded'
  acc=$(sed -nE 's/^metrics worker-0: accuracy ([0-9.]+),.*/\1/p' "$KT_TEST_DIR/out")
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.9) }' || fail "mlp accuracy '$acc' < 0.9"
  expect_all_gone
  # The env contract example: what every replica gets.
  run_job "$here/../../examples/env-contract.yaml"
  [[ $rc -eq 0 ]] || fail "env-contract: exit code $rc, want 0"
  # Only worker 0's output is certain: its exit ends the job (ChiefOrWorker0)
  # and the other replicas are stopped, maybe before they print.
  expect_out '^worker-0 +\| POD_NAME=worker-0$'
  expect_out '^worker-0 +\| CLUSTER_CONFIG=\{"ps":\["127.0.0.1:[0-9]+"\],"worker":\["127.0.0.1:[0-9]+","127.0.0.1:[0-9]+"\]\}$'
  expect_out '^worker-0 +\| TF_CONFIG=.*"task":\{"index":0,"type":"worker"\}'
  expect_out 'KUBETRAIN_AUTH_KEY is 64 hex characters'
  expect_all_gone
  ;;
evaluator)
  # examples/evaluator.yaml, its checkpoint directory (a hostPath) made this
  # run's own: the side-car evaluator evaluates every checkpoint and the final
  # one, and the job succeeds only after it exited 0.
  ckpt=$KT_TEST_DIR/checkpoints
  sed "s|path: /tmp/kubetrain-evaluator,|path: $ckpt,|" "$here/../../examples/evaluator.yaml" \
    >"$KT_TEST_DIR/evaluator.yaml"
  grep -q "path: $ckpt," "$KT_TEST_DIR/evaluator.yaml" || fail "the example's hostPath changed"
  run_job "$KT_TEST_DIR/evaluator.yaml"
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out '^result: Succeeded'
  # The evaluator is never stopped: it exits 0 on its own, after the final
  # checkpoint (whether that comes before or after worker 0's exit is a race;
  # evaluator_waits tests the wait itself).
  expect_out 'evaluator-0 exited with code 0'
  ! grep -q 'stopping evaluator-0' "$KT_TEST_DIR/out" || fail "the evaluator was stopped"
  expect_out 'Succeeded .*training succeeded \(Worker 0 succeeded\) and the evaluator evaluated the final checkpoint'
  # Its metrics, per checkpoint and final, next to the checkpoints.
  for step in 100 200 300 400; do
    [[ -f $ckpt/evaluator-0/ckpt-$step.json ]] || fail "no metrics for checkpoint $step"
  done
  [[ -f $ckpt/FINAL ]] || fail "no FINAL marker"
  auc=$(sed -nE 's/^ *"auc": ([0-9.]+),?$/\1/p' "$ckpt/evaluator-0/final.json")
  grep -Eq '"step": 400' "$ckpt/evaluator-0/final.json" || fail "final.json is not step 400"
  awk -v a="$auc" 'BEGIN { exit !(a >= 0.7 && a <= 1) }' || fail "final AUC '$auc' not in [0.7, 1]"
  expect_out '^metrics evaluator-0: AUC [0-9.]+, .* checkpoint 400$'
  expect_out '^    evaluator:$'
  echo "evaluator final AUC $auc"
  expect_all_gone
  ;;
evaluator_waits)
  # Training succeeded, the evaluator still runs: the job stays Running with
  # the reason WaitingForEvaluator until it exits 0; the PS is stopped.
  "$KUBETRAIN" run -f "$jobs/evaluator-waits.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" &
  runner_pid=$!
  wait_for 60 grep -q 'WaitingForEvaluator' "$KT_TEST_DIR/out" || fail "no WaitingForEvaluator"
  expect_out 'job waits: Running \(WaitingForEvaluator: training succeeded \(Worker 0 succeeded\); waiting for 1 of 1 evaluators'
  wait_for 60 grep -q 'ps-0 killed by signal' "$KT_TEST_DIR/out" || fail "the PS was not stopped"
  eval_pid=$(sed -nE 's/.*started evaluator-0 \(pid ([0-9]+)\).*/\1/p' "$KT_TEST_DIR/out")
  [[ -n $eval_pid ]] && alive "$eval_pid" || fail "the evaluator is not running"
  kill -0 "$runner_pid" 2>/dev/null || fail "the runner ended before the evaluator"
  ! grep -q '^result:' "$KT_TEST_DIR/out" || fail "the job finished before the evaluator"
  touch "$KT_TEST_DIR/release"
  wait_for 60 bash -c '! kill -0 "$0" 2>/dev/null' "$runner_pid" || fail "runner did not exit"
  wait "$runner_pid"
  rc=$?
  runner_pid=
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out 'evaluator-0 +\| evaluated'
  expect_out 'evaluator-0 exited with code 0'
  expect_out '^result: Succeeded'
  expect_all_gone
  ;;
one_worker)
  # One Worker and no PS (it used to exit 1, "workers but no parameter
  # servers"): it trains in-process, with checkpoints, --output (ONNX export),
  # progress and metrics; the evaluator evaluates its one-shard checkpoints.
  out_dir=$KT_TEST_DIR/one-worker
  sed "s|path: /tmp/kubetrain-cli-one-worker,|path: $out_dir,|" "$jobs/one-worker.yaml" >"$KT_TEST_DIR/one-worker.yaml"
  [[ $(grep -c "path: $out_dir," "$KT_TEST_DIR/one-worker.yaml") -eq 2 ]] || fail "the job's hostPaths changed"
  run_job "$KT_TEST_DIR/one-worker.yaml"
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out '^result: Succeeded'
  expect_out 'worker-0 +\| .*worker-0 alone, no parameter servers: one process'
  expect_out '^kubetrain +\| progress: 100% \(step 60/60\)'
  expect_out '^metrics worker-0: AUC [0-9.]+, .* 60 steps$'
  expect_out 'evaluator-0 exited with code 0'
  expect_out 'and the evaluator evaluated the final checkpoint'
  for step in 20 40 60; do
    [[ -f $out_dir/ckpt/ckpt-$step/MANIFEST ]] || fail "no checkpoint $step"
    [[ -f $out_dir/ckpt/evaluator-0/ckpt-$step.json ]] || fail "no evaluator metrics for checkpoint $step"
  done
  grep -q '"step": *60' "$out_dir/ckpt/FINAL" || fail "FINAL does not name step 60"
  for f in model.onnx model.json metrics.json model/ckpt-60/MANIFEST; do
    [[ -f $out_dir/result/$f ]] || fail "--output lacks $f"
  done
  # --generate-data without --data-dir: a temporary directory, gone after the run.
  data=$(sed -nE 's/^worker-0 +\| .*generated [0-9]+ lines in (.*)\/train\.tsv .*/\1/p' "$KT_TEST_DIR/out")
  [[ $data == "$KT_TEST_DIR"/kubetrain-data-* ]] ||
    fail "worker-0 generated its data in '$data', want \$TMPDIR/kubetrain-data-* ($KT_TEST_DIR)"
  [[ ! -e $data ]] || fail "$data is still there after the run"
  expect_all_gone
  ;;
sweep_one_worker)
  # A grid sweep of one-worker trials (it used to fail, TooManyFailedTrials in 0.2 s).
  run_job "$jobs/sweep-one-worker.yaml" --work-dir "$KT_TEST_DIR/sweep"
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out '^result: TrainingSweep one-worker-sweep Succeeded in .*AllTrialsFinished'
  table=$(tac "$KT_TEST_DIR/out" | sed -n '/^sweep one-worker-sweep: Succeeded/,/^TRIAL/p' | tac)
  [[ $(grep -cE '^one-worker-sweep-[0-3] .* Succeeded +0\.[0-9]+' <<<"$table") -eq 4 ]] ||
    fail "want 4 succeeded trials in the final table"
  expect_out '^best: one-worker-sweep-[0-3] eval.auc=0\.[0-9]+'
  ;;
sweep_early_stop)
  # A grid over Adam's learning rate where 1, 10 and 20 diverge (training
  # loss 4 to 80 against 0.3). With earlyStopping (medianStop, 2 trials, from step 100) they
  # are stopped once two trials succeeded; the others run to the end and the best is among
  # them. One trial at a time, so the order (the two that set the median first) is fixed.
  # The first two are slow learners (lr 1e-4 and 2e-4: a loss near 0.6 for 2000 steps), so
  # the good lr 0.01 of trial 4 is below their median at every step. The job file's grid
  # (0.01, 0.003, then 0.02 judged against them) made trial 4 a coin toss: per-batch losses
  # of good rates overlap, and CI of 2eb8504 stopped lr 0.02 at step 1824 (0.261 > 0.249).
  sed 's/STEPS/20000/; s/parallelism: 2/parallelism: 1/
       s/values: \[.*\]/values: ["0.0001", "0.0002", "1", "10", "0.01", "20"]/' \
    "$jobs/sweep-early-stop.yaml" >"$KT_TEST_DIR/sweep.yaml"
  grep -q '"0.0001", "0.0002", "1", "10", "0.01", "20"' "$KT_TEST_DIR/sweep.yaml" ||
    fail "the grid was not replaced in $jobs/sweep-early-stop.yaml"
  run_job "$KT_TEST_DIR/sweep.yaml" --work-dir "$KT_TEST_DIR/sweep"
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out '^result: TrainingSweep early-stop Succeeded in .*AllTrialsFinished: 6 trials finished'
  table=$(tac "$KT_TEST_DIR/out" | sed -n '/^sweep early-stop: Succeeded/,/^TRIAL/p' | tac)
  for i in 0 1 4; do
    grep -qE "^early-stop-$i +lr=[0-9.]+ +Succeeded +0\.[0-9]+" <<<"$table" || fail "trial $i (a good lr) did not succeed"
  done
  for i in 2 3 5; do
    row=$(grep -E "^early-stop-$i " <<<"$table")
    [[ $row =~ EarlyStopped\ +stopped\ at\ step\ ([0-9]+):\ loss\ ([0-9.e+]+)\ \>\ median\ ([0-9.e+-]+)\ of\ ([0-9]+)$ ]] ||
      fail "trial $i (a diverging lr) was not early stopped: $row"
    step=${BASH_REMATCH[1]} trials=${BASH_REMATCH[4]}
    ((step >= 100 && step < 20000)) || fail "trial $i stopped at step $step, want 100 <= step < 20000"
    ((trials >= 2)) || fail "trial $i stopped on the median of $trials trials, want >= 2"
    python3 -c "import sys; v, m = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if v > m else 1)" \
      "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}" || fail "trial $i: loss not above the median: $row"
    # Its runner was stopped (SIGTERM): it wrote no final metrics.
    [[ $(jq -r '.progress.step' "$KT_TEST_DIR/sweep/early-stop-$i.status.json") -lt 20000 ]] ||
      fail "trial $i trained to its end"
  done
  best=$(sed -nE 's/^best: (early-stop-[0-9]) eval.auc=.*/\1/p' "$KT_TEST_DIR/out")
  max=$(grep -E ' Succeeded ' <<<"$table" | awk '{print $4, $1}' | sort -rn | sed -n '1s/.* //p')
  [[ -n $best && $best == "$max" ]] || fail "best is '$best', want the highest AUC: $max"
  ;;
no_ps_workers)
  # Two workers and no PS: the trainer refuses the shape at once with a
  # permanent exit code and says why in its termination message.
  # The run directory of the failed run is kept and named.
  run_job "$jobs/no-ps-two-workers.yaml"
  [[ $rc -eq 1 ]] || fail "exit code $rc, want 1"
  expect_out "^run directory kept \\(termination messages, replica volumes\\): $KT_TEST_DIR/kubetrain-"
  kept=$(sed -nE 's/^run directory kept \(termination messages, replica volumes\): //p' "$KT_TEST_DIR/out")
  [[ -f $kept/worker-0.termination-log ]] || fail "no worker-0.termination-log in the kept $kept"
  expect_out 'worker-[01] exited with code 1'
  expect_out '^result: Failed'
  expect_out 'reason: ReplicaFailed'
  expect_out '2 training replicas \(0 chief, 2 workers\) and no parameter servers: kubetrain-trainer trains without a PS only as one replica'
  ! grep -q 'restarting' "$KT_TEST_DIR/out" || fail "a replica was restarted"
  expect_all_gone
  ;;
exit_130_restarts)
  run_job "$jobs/exit130-then-0.yaml"
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out 'worker-0 +\| first run'
  expect_out 'worker-0 exited with code 130'
  expect_out 'worker-0 +\| second run'
  expect_out '^result: Succeeded'
  expect_out '^ +restarts: 1$'
  expect_out '^ +exitCode: 130$'
  [[ $(started_pids | wc -l) -eq 2 ]] || fail "want 2 starts of worker-0"
  ;;
exit_2_fails)
  run_job "$jobs/exit2.yaml"
  [[ $rc -eq 1 ]] || fail "exit code $rc, want 1"
  expect_out 'worker-0 exited with code 2'
  expect_out '^result: Failed'
  expect_out 'reason: ReplicaFailed'
  [[ $(started_pids | wc -l) -eq 2 ]] || fail "want exactly 2 starts (no restart of worker-0)"
  expect_all_gone
  ;;
bad_utf8)
  # The message once made the status dump throw: `kubetrain run` aborted.
  for output in yaml json; do
    run_job "$jobs/bad-utf8.yaml" -o "$output"
    [[ $rc -eq 1 ]] || fail "-o $output: exit code $rc, want 1"
    expect_out 'ReplicaFailed'
    expect_out "a{1023}€€�� end"
  done
  expect_all_gone
  ;;
deadline)
  run_job "$jobs/deadline.yaml"
  [[ $rc -eq 1 ]] || fail "exit code $rc, want 1"
  expect_out 'reason: DeadlineExceeded'
  expect_all_gone
  ;;
suspended)
  # expect_suspended FILE WHAT RESULT: exit 1 at once, saying why, nothing started.
  expect_suspended() {
    timeout 60 "$KUBETRAIN" run -f "$1" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
    rc=$?
    [[ $rc -eq 1 ]] || fail "suspended $2: exit code $rc, want 1 (124: it hung)"
    expect_out "the $2 is suspended"
    expect_out "$3"
    [[ $(started_pids | wc -l) -eq 0 ]] || fail "a suspended $2 started a process"
  }
  expect_suspended "$jobs/suspended.yaml" job '^result: Suspended'
  # A suspended sweep: no trial starts, and it says why.
  sed 's/^  parallelism: 2$/  parallelism: 2\n  suspend: true/' "$jobs/sweep-no-metric.yaml" >"$KT_TEST_DIR/sweep.yaml"
  expect_suspended "$KT_TEST_DIR/sweep.yaml" sweep '^result: TrainingSweep no-metric Suspended$'
  ;;
sigint)
  "$KUBETRAIN" run -f "$jobs/sleepers.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" &
  runner_pid=$!
  # All three replicas and their grandchildren are up.
  wait_for 60 bash -c '[[ $(grep -c "| grandchild " "$0") -eq 3 ]]' "$KT_TEST_DIR/out" ||
    fail "replicas did not start"
  for pid in $(started_pids) $(grandchild_pids); do alive "$pid" || fail "$pid not running"; done
  kill -INT "$runner_pid"
  wait_for 60 bash -c '! kill -0 "$0" 2>/dev/null' "$runner_pid" || fail "runner did not exit"
  wait "$runner_pid"
  rc=$?
  runner_pid=
  [[ $rc -eq 130 ]] || fail "exit code $rc, want 130"
  expect_out 'interrupted by signal 2'
  [[ $(started_pids | wc -l) -eq 3 ]] || fail "want 3 started replicas"
  [[ $(grandchild_pids | wc -l) -eq 3 ]] || fail "want 3 grandchildren"
  expect_all_gone
  ;;
sigkill_runner)
  # The runner killed outright cannot clean up: the replicas (PR_SET_PDEATHSIG)
  # and what they forked (the watchdog kills their process groups) still go.
  "$KUBETRAIN" run -f "$jobs/sleepers.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" &
  runner_pid=$!
  wait_for 60 bash -c '[[ $(grep -c "| grandchild " "$0") -eq 3 ]]' "$KT_TEST_DIR/out" ||
    fail "replicas did not start"
  for pid in $(started_pids) $(grandchild_pids); do alive "$pid" || fail "$pid not running"; done
  kill -KILL "$runner_pid"
  wait "$runner_pid" 2>/dev/null
  runner_pid=
  none_alive() {
    local pid
    for pid in $(started_pids) $(grandchild_pids); do alive "$pid" && return 1; done
    return 0
  }
  wait_for 30 none_alive || fail "processes outlived a SIGKILLed runner"
  [[ $(grandchild_pids | wc -l) -eq 3 ]] || fail "want 3 grandchildren"
  ;;
bad_input)
  "$KUBETRAIN" run -f "$KT_TEST_DIR/missing.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  rc=$?
  [[ $rc -eq 2 ]] || fail "missing file: exit code $rc, want 2"
  expect_err 'missing.yaml: no such file'

  printf 'apiVersion: kubetrain.io/v1alpha1\nkind: [TrainingJob\n' >"$KT_TEST_DIR/broken.yaml"
  run_job "$KT_TEST_DIR/broken.yaml"
  [[ $rc -eq 3 ]] || fail "invalid YAML: exit code $rc, want 3"
  expect_err 'broken.yaml'

  run_job "$jobs/invalid.yaml"
  [[ $rc -eq 3 ]] || fail "invalid job: exit code $rc, want 3"
  expect_err 'invalid.yaml:24: spec.replicaSpecs.Master'

  run_job "$jobs/no-such-command.yaml"
  [[ $rc -eq 6 ]] || fail "missing command: exit code $rc, want 6"
  expect_err 'kt-no-such-command.*not found'
  [[ $(started_pids | wc -l) -eq 0 ]] || fail "a process was started for a job that cannot run"

  # A port in use: hold one and ask for it.
  python3 - "$KT_TEST_DIR/port" <<'PY' &
import socket, sys, os, signal
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(1)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1])); os.rename(sys.argv[1] + ".tmp", sys.argv[1])
signal.pause()
PY
  holder=$!
  wait_for 30 test -s "$KT_TEST_DIR/port" || fail "port holder did not start"
  port=$(cat "$KT_TEST_DIR/port")
  run_job "$jobs/exit2.yaml" --base-port "$port"
  kill "$holder"
  wait "$holder" 2>/dev/null
  [[ $rc -eq 6 ]] || fail "port in use: exit code $rc, want 6"
  expect_err "port $port on 127.0.0.1 is in use"
  [[ $(started_pids | wc -l) -eq 0 ]] || fail "a process was started although a port is taken"
  ;;
sweep)
  # examples/sweep.yaml as it is: a random sweep of 4 trials over the learning
  # rate (and layer sizes), 2 at a time, each a real PS + worker run.
  run_job "$here/../../examples/sweep.yaml" --work-dir "$KT_TEST_DIR/sweep"
  [[ $rc -eq 0 ]] || fail "sweep: exit code $rc, want 0"
  expect_out '^result: TrainingSweep lr-sweep Succeeded in .*AllTrialsFinished'
  # The last table: 4 rows, every trial Succeeded with an AUC.
  table=$(tac "$KT_TEST_DIR/out" | sed -n '/^sweep lr-sweep: Succeeded/,/^TRIAL/p' | tac)
  [[ $(grep -cE '^lr-sweep-[0-3] .* Succeeded +0\.[0-9]+' <<<"$table") -eq 4 ]] || fail "want 4 succeeded trials in the final table"
  best=$(sed -nE 's/^best: (lr-sweep-[0-3]) eval.auc=([0-9.]+) .*lr=([0-9.e-]+)$/\1 \2/p' "$KT_TEST_DIR/out")
  [[ -n $best ]] || fail "no best trial line"
  max=$(grep -E '^lr-sweep-[0-3] ' <<<"$table" | awk '{print $5, $1}' | sort -rn | sed -n 1p)
  [[ "${best#* }" == "${max% *}"* && "${best% *}" == "${max#* }" ]] || fail "best '$best' is not the highest AUC of the table ('$max')"
  awk -v a="${best#* }" 'BEGIN { exit !(a >= 0.7) }' || fail "best AUC ${best#* } < 0.7"
  echo "best trial and AUC: $best"
  [[ $(ls "$KT_TEST_DIR/sweep"/lr-sweep-*.log | wc -l) -eq 4 ]] || fail "want 4 trial logs"
  # A sweep whose trials never report the metric fails, naming why.
  run_job "$jobs/sweep-no-metric.yaml"
  [[ $rc -eq 1 ]] || fail "no-metric sweep: exit code $rc, want 1"
  expect_out '^result: TrainingSweep no-metric Failed in .*NoTrialSucceeded'
  expect_out '^no-metric-0 .* Failed +MetricMissing'
  ;;
validate)
  for f in "$here"/../../examples/*.yaml "$jobs"/wide-deep-small.yaml; do
    "$KUBETRAIN" validate -f "$f" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" || fail "$f: not valid"
    expect_out 'is valid'
  done
  "$KUBETRAIN" validate -f "$jobs/invalid.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  rc=$?
  [[ $rc -eq 3 ]] || fail "exit code $rc, want 3"
  expect_out 'invalid.yaml:1: TrainingJob ok-job is valid'
  expect_err 'invalid.yaml:24: spec.replicaSpecs.Master'
  expect_err 'invalid.yaml:35: spec.replicaSpecs(: spec.replicaSpecs)?.Chief.replicas'
  expect_err 'invalid.yaml:48: spec.replicaSpecs.Worker.restartPolicy'
  expect_err 'invalid.yaml:59: spec.runPolicy.backofLimit: unknown field'
  # Standard input, same verdict.
  "$KUBETRAIN" validate -f - <"$jobs/invalid.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  [[ $? -eq 3 ]] || fail "stdin: want exit code 3"
  expect_err '^-:59: spec.runPolicy.backofLimit'
  # A template that sets a contract variable is valid, with a warning naming it.
  "$KUBETRAIN" validate -f "$jobs/env-overridden.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  rc=$?
  [[ $rc -eq 0 ]] || fail "env-overridden.yaml: exit code $rc, want 0"
  expect_out 'TrainingJob sets-contract-env is valid'
  expect_err '^.*env-overridden.yaml:9: warning: spec.replicaSpecs.Worker.template sets TF_CONFIG: replaced by'
  [[ $(grep -c warning "$KT_TEST_DIR/err") -eq 1 ]] || fail "want exactly one warning"
  # Several workers and no PS: valid, with a warning that kubetrain-trainer
  # does not run that shape (other images may); one worker alone: no warning.
  "$KUBETRAIN" validate -f "$jobs/no-ps-two-workers.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" ||
    fail "no-ps-two-workers.yaml: not valid"
  expect_out 'TrainingJob no-ps is valid'
  expect_err '^.*no-ps-two-workers.yaml:11: warning: spec.replicaSpecs.Worker.replicas: 2 training replicas \(Chief \+ Worker\) and no PS: kubetrain-trainer runs several workers only with parameter servers'
  [[ $(grep -c warning "$KT_TEST_DIR/err") -eq 1 ]] || fail "want exactly one warning"
  sed 's/^      Worker:$/      Worker:\n        replicas: 3/' "$jobs/sweep-one-worker.yaml" >"$KT_TEST_DIR/sweep-3.yaml"
  grep -q '^        replicas: 3$' "$KT_TEST_DIR/sweep-3.yaml" || fail "the sweep's Worker changed"
  "$KUBETRAIN" validate -f "$KT_TEST_DIR/sweep-3.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" ||
    fail "a sweep of 3-worker trials: not valid"
  expect_err 'warning: spec.trialTemplate.replicaSpecs.Worker.replicas: 3 training replicas'
  for f in "$jobs/one-worker.yaml" "$jobs/sweep-one-worker.yaml"; do
    "$KUBETRAIN" validate -f "$f" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" || fail "$f: not valid"
    ! grep -q warning "$KT_TEST_DIR/err" || fail "$f: a warning for one worker alone"
  done
  # No warning for a template that leaves the contract to the operator.
  "$KUBETRAIN" validate -f "$here/../../examples/wide-deep-ps.yaml" >"$KT_TEST_DIR/out" \
    2>"$KT_TEST_DIR/err" || fail "wide-deep-ps.yaml: not valid"
  ! grep -q warning "$KT_TEST_DIR/err" || fail "a warning for a template without contract variables"
  # Several files and directories; other kinds are skipped with a note.
  mkdir -p "$KT_TEST_DIR/dir/sub"
  cp "$jobs/one-worker.yaml" "$KT_TEST_DIR/dir/"
  cp "$jobs/sweep-one-worker.yaml" "$KT_TEST_DIR/dir/sub/"
  printf 'apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n' \
    >"$KT_TEST_DIR/dir/other.yml"
  echo 'not yaml' >"$KT_TEST_DIR/dir/README.txt"
  "$KUBETRAIN" validate -f "$KT_TEST_DIR/dir" -f "$here/../../examples/mlp.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  rc=$?
  [[ $rc -eq 0 ]] || fail "a directory and a file: exit code $rc, want 0"
  expect_out 'dir/one-worker.yaml:[0-9]+: TrainingJob .* is valid'
  expect_out 'other.yml:1: skipped: Deployment \(not a TrainingJob, TrainingSweep or kubeflow.org/v1 TFJob\)'
  expect_out 'other.yml:5: skipped: ConfigMap'
  expect_out 'mlp.yaml:[0-9]+: TrainingJob mlp is valid'
  ! grep -q 'sweep-one-worker' "$KT_TEST_DIR/out" || fail "read below the directory without -R"
  "$KUBETRAIN" validate -R -f "$KT_TEST_DIR/dir" -f "$jobs/invalid.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  rc=$?
  [[ $rc -eq 3 ]] || fail "-R with an invalid file: exit code $rc, want 3"
  expect_out 'sub/sweep-one-worker.yaml:[0-9]+: TrainingSweep .* is valid'
  "$KUBETRAIN" validate -f "$KT_TEST_DIR/absent.yaml" -f "$jobs/invalid.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  rc=$?
  [[ $rc -eq 2 ]] || fail "a missing file among others: exit code $rc, want 2"
  expect_out 'TrainingJob ok-job is valid'
  ;;
exit_codes)
  # The shared table (docs/user-guide.md#exit-codes) where no cluster is needed.
  expect_rc() {
    local want=$1
    shift
    "$KUBETRAIN" "$@" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
    rc=$?
    [[ $rc -eq $want ]] || fail "kubetrain $*: exit code $rc, want $want"
  }
  expect_rc 2 no-such-subcommand
  expect_rc 2 wait
  expect_rc 2 wait j --timeout 10x
  expect_err 'not a duration'
  expect_rc 2 get --request-timeout 0
  expect_rc 2 logs
  expect_rc 2 logs j --dir /x
  expect_rc 2 render -f "$KT_TEST_DIR/absent.yaml"
  expect_rc 3 render -f "$jobs/invalid.yaml"
  expect_rc 6 get --kubeconfig "$KT_TEST_DIR/absent-kubeconfig"
  expect_rc 6 wait j --kubeconfig "$KT_TEST_DIR/absent-kubeconfig"
  # An apiserver that is not there: error, not "not found", and bounded in time.
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  printf 'apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "https://127.0.0.1:%s"}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u, namespace: team}}]\ncurrent-context: c\n' \
    "$port" >"$KT_TEST_DIR/kubeconfig"
  start=$SECONDS
  expect_rc 6 suspend j --kubeconfig "$KT_TEST_DIR/kubeconfig" --request-timeout 2s
  ((SECONDS - start < 60)) || fail "an unreachable apiserver held suspend for $((SECONDS - start)) s"
  expect_err "127.0.0.1:$port"
  # logs --dir: a local run's saved tails, prefixed, in role order.
  expect_rc 4 logs --dir "$KT_TEST_DIR/no-run"
  expect_err 'no saved logs under'
  mkdir -p "$KT_TEST_DIR/run/logs"
  printf 'w0 first\nw0 last' >"$KT_TEST_DIR/run/logs/worker-0.log"
  printf 'p1 line\n' >"$KT_TEST_DIR/run/logs/ps-1.log"
  printf 'w10 line\n' >"$KT_TEST_DIR/run/logs/worker-10.log"
  expect_rc 0 logs --dir "$KT_TEST_DIR/run"
  printf 'ps-1      | p1 line\nworker-0  | w0 first\nworker-0  | w0 last\nworker-10 | w10 line\n' >"$KT_TEST_DIR/want"
  diff "$KT_TEST_DIR/want" "$KT_TEST_DIR/out" >&2 || fail "logs --dir output differs"
  # logs --file: the job file of a local run names its --output, here in a
  # hostPath volume (/out -> the host path, as `kubetrain run` maps it).
  sed "s|path: /tmp/kubetrain-cli-one-worker,|path: $KT_TEST_DIR/host,|; s|--output=/out/result|--output=/out/run|" \
    "$jobs/one-worker.yaml" >"$KT_TEST_DIR/job.yaml"
  grep -q -- "path: $KT_TEST_DIR/host," "$KT_TEST_DIR/job.yaml" || fail "the hostPath did not change"
  mkdir -p "$KT_TEST_DIR/host" && mv "$KT_TEST_DIR/run" "$KT_TEST_DIR/host/run"
  expect_rc 0 logs --file "$KT_TEST_DIR/job.yaml"
  diff "$KT_TEST_DIR/want" "$KT_TEST_DIR/out" >&2 || fail "logs --file output differs"
  sed 's|, --output=/out/result]|]|' "$jobs/one-worker.yaml" >"$KT_TEST_DIR/no-output.yaml"
  ! grep -q -- '--output=' "$KT_TEST_DIR/no-output.yaml" || fail "the job still sets --output"
  expect_rc 4 logs --file "$KT_TEST_DIR/no-output.yaml"
  expect_err 'sets no --output'
  expect_rc 2 logs --file "$KT_TEST_DIR/absent.yaml"
  ;;
render)
  "$KUBETRAIN" render -f "$here/../../examples/wide-deep-ps.yaml" -n team-a >"$KT_TEST_DIR/out" \
    2>"$KT_TEST_DIR/err" || fail "render failed"
  [[ $(grep -c '^kind: Pod$' "$KT_TEST_DIR/out") -eq 4 ]] || fail "want 4 Pods"
  [[ $(grep -c '^kind: Service$' "$KT_TEST_DIR/out") -eq 1 ]] || fail "want 1 Service (serviceMode JobWide)"
  [[ $(grep -c '^kind: Secret$' "$KT_TEST_DIR/out") -eq 1 ]] || fail "want 1 Secret"
  [[ $(grep -c '^kind: ConfigMap$' "$KT_TEST_DIR/out") -eq 0 ]] || fail "want no ConfigMap (the cluster JSON is in the Secret)"
  expect_out '^  cluster: .*wide-deep-ps-0.wide-deep.team-a.svc.cluster.local:2222'
  [[ $(grep -c '^kind: NetworkPolicy$' "$KT_TEST_DIR/out") -eq 1 ]] || fail "want 1 NetworkPolicy"
  expect_out '^  name: wide-deep-training$'
  expect_out '^  namespace: team-a$'
  expect_out 'wide-deep-worker-1.wide-deep.team-a.svc.cluster.local:2222'
  expect_out '^  subdomain: wide-deep$'
  expect_out '^  key: ""$'
  "$KUBETRAIN" render -f "$here/../../examples/wide-deep-ps.yaml" --show-secrets \
    >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" || fail "render --show-secrets failed"
  grep -Eq '^  key: "?[A-Za-z0-9+/=]{88}"?$' "$KT_TEST_DIR/out" || fail "no key with --show-secrets"
  # As the operator started with --network-policy=false.
  "$KUBETRAIN" render -f "$here/../../examples/wide-deep-ps.yaml" --network-policy=false \
    >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" || fail "render --network-policy=false failed"
  ! grep -q '^kind: NetworkPolicy$' "$KT_TEST_DIR/out" || fail "a NetworkPolicy with --network-policy=false"
  ;;
convert)
  # TFJob files, directories and multi-document streams -> TrainingJobs that validate.
  td=$here/../../operator/api/testdata/tfjob
  "$KUBETRAIN" convert -f "$td" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" || fail "convert of a directory"
  [[ $(grep -c '^kind: TrainingJob$' "$KT_TEST_DIR/out") -eq 3 ]] || fail "want 3 TrainingJobs"
  ! grep -q 'TFJob$' "$KT_TEST_DIR/out" || fail "a TFJob left in the output"
  expect_out '^# converted from TFJob legacy \(.*master-custom-port.yaml:4\)$'
  expect_out '^# spec.runPolicy.managedBy \(line 13\): no equivalent'
  expect_out '^# spec.tfReplicaSpecs.master \(line 22\): Master becomes Chief'
  expect_out '^  port: 3333$'
  cp "$KT_TEST_DIR/out" "$KT_TEST_DIR/converted.yaml"
  "$KUBETRAIN" validate -f "$KT_TEST_DIR/converted.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" ||
    fail "the converted TrainingJobs do not validate"
  [[ $(grep -c 'TrainingJob .* is valid' "$KT_TEST_DIR/out") -eq 3 ]] || fail "want 3 valid TrainingJobs"
  # Converting a TrainingJob changes nothing; a stream keeps other documents.
  "$KUBETRAIN" convert -f - <"$KT_TEST_DIR/converted.yaml" >"$KT_TEST_DIR/again.yaml" 2>"$KT_TEST_DIR/err" ||
    fail "convert of TrainingJobs"
  diff <(grep -v '^#' "$KT_TEST_DIR/converted.yaml") "$KT_TEST_DIR/again.yaml" >&2 ||
    fail "converting the converted output changed it"
  "$KUBETRAIN" convert -f - <"$jobs/tfjob-tiny.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" ||
    fail "convert of stdin"
  expect_out '^kind: TrainingJob$'
  expect_out '^kind: ConfigMap$'
  expect_out '^  note: unchanged$'
  # -R descends; without it a subdirectory is not read.
  mkdir -p "$KT_TEST_DIR/tree/sub"
  cp "$jobs/tfjob-tiny.yaml" "$KT_TEST_DIR/tree/sub/"
  "$KUBETRAIN" convert -f "$KT_TEST_DIR/tree" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" || fail "convert of an empty dir"
  ! grep -q TrainingJob "$KT_TEST_DIR/out" || fail "a subdirectory read without -R"
  "$KUBETRAIN" convert -R -f "$KT_TEST_DIR/tree" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" || fail "convert -R"
  expect_out '^  name: tfjob-tiny$'
  # A bad document: its file:line and field on stderr, exit 3 (invalid), the others printed.
  "$KUBETRAIN" convert -f "$jobs/tfjob-bad.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  rc=$?
  [[ $rc -eq 3 ]] || fail "bad TFJob: exit code $rc, want 3"
  expect_err 'tfjob-bad.yaml:21: spec.tfReplicaSpecs.Worker.template.spec.containers: must have at least one container with name tensorflow'
  expect_out '^  name: good$'
  # A List (kubectl get -o yaml): an item each, server fields dropped, errors at the item's line.
  "$KUBETRAIN" convert -f "$jobs/tfjob-list.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  [[ $? -eq 3 ]] || fail "List with a bad item: want exit code 3"
  expect_out '^# converted from TFJob a \(.*tfjob-list.yaml:5\)$'
  ! grep -qE 'uid|resourceVersion|^status' "$KT_TEST_DIR/out" || fail "server fields kept"
  expect_err 'tfjob-list.yaml:18: items\[1\].spec.tfReplicaSpecs.Worker.template.spec.containers: must have'
  "$KUBETRAIN" convert -f "$KT_TEST_DIR/no-such-file.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  [[ $? -eq 2 ]] || fail "an unreadable file: want exit code 2"
  # validate takes TFJobs: rules of the TrainingJob, paths and lines of the TFJob.
  "$KUBETRAIN" validate -f "$jobs/tfjob-bad.yaml" >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err"
  [[ $? -eq 3 ]] || fail "validate of bad TFJobs: want exit code 3"
  expect_out 'tfjob-bad.yaml:1: TFJob good is valid'
  expect_err 'tfjob-bad.yaml:21: spec.tfReplicaSpecs.Worker.template.spec.containers: must have'
  expect_err 'tfjob-bad.yaml:35: spec.tfReplicaSpecs: spec.tfReplicaSpecs.Master.replicas must be 0 or 1'
  expect_err 'tfjob-bad.yaml:[0-9]+: note: spec.runPolicy.cleanPodPolicy: unset'
  # render takes TFJobs.
  "$KUBETRAIN" render -f "$jobs/tfjob-tiny.yaml" -n team-a >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" ||
    fail "render of a TFJob"
  [[ $(grep -c '^kind: Pod$' "$KT_TEST_DIR/out") -eq 2 ]] || fail "want 2 Pods"
  expect_out '^  name: tfjob-tiny-ps-0$'
  expect_out '^    name: tensorflow$'
  ;;
tfjob_run)
  # `run` takes a TFJob: its replicas run as local processes, to Succeeded.
  run_job "$jobs/tfjob-tiny.yaml"
  [[ $rc -eq 0 ]] || fail "exit code $rc, want 0"
  expect_out '^result: Succeeded'
  ;;
render_dry_run)
  : "${KUBECONFIG:?needs the test cluster}"
  bin=$("$here/../cluster/build") || fail "cannot find the cluster binaries"
  for f in "$here"/../../examples/*.yaml; do
    grep -q '^kind: TrainingSweep' "$f" && continue  # render takes TrainingJobs
    "$KUBETRAIN" render -f "$f" -n default --show-secrets >"$KT_TEST_DIR/out" 2>"$KT_TEST_DIR/err" ||
      fail "render $f failed"
    "$bin/kubectl" apply --dry-run=server -f "$KT_TEST_DIR/out" >"$KT_TEST_DIR/err" 2>&1 ||
      fail "kubectl apply --dry-run=server rejected the render of $f"
    n=$(grep -c 'created (server dry run)' "$KT_TEST_DIR/err")
    want=$(grep -c '^kind: ' "$KT_TEST_DIR/out")
    [[ $n -eq $want ]] || fail "$f: $n of $want objects accepted"
    echo "$f: $n objects accepted by the apiserver"
  done
  # What `convert` prints is accepted by the apiserver (the TrainingJob CRD's rules).
  "$bin/kubectl" apply -k "$here/../../crds" >/dev/null || fail "the CRDs were rejected"
  PATH="$bin:$PATH" "$here/../tools/wait-crds" crd/trainingjobs.kubetrain.io >/dev/null || fail "the CRD is not established"
  # training-operator v1.9.3's own TFJob examples too, from its Go module (crd.tfjob fetches it).
  peer=()
  peer_dir="$(go env GOMODCACHE 2>/dev/null)/github.com/kubeflow/training-operator@v1.9.3/examples"
  if [[ -d $peer_dir ]]; then
    while IFS= read -r f; do peer+=("$f"); done < <(grep -rlE '^kind: "?TFJob"?' "$peer_dir" | sort)
  fi
  echo "${#peer[@]} TFJob examples of training-operator v1.9.3 found"
  for f in "$here"/../../operator/api/testdata/tfjob/*.yaml "$jobs/tfjob-tiny.yaml" "${peer[@]}"; do
    # In the default namespace (the test cluster has no other).
    "$KUBETRAIN" convert -f "$f" >"$KT_TEST_DIR/converted" 2>"$KT_TEST_DIR/err" || fail "convert $f failed"
    sed '/^  namespace: /d' "$KT_TEST_DIR/converted" >"$KT_TEST_DIR/out"
    "$bin/kubectl" apply --dry-run=server -n default -f "$KT_TEST_DIR/out" >"$KT_TEST_DIR/err" 2>&1 ||
      fail "kubectl apply --dry-run=server rejected the conversion of $f"
    grep -q 'trainingjob.kubetrain.io/.* created (server dry run)' "$KT_TEST_DIR/err" ||
      fail "$f: no TrainingJob accepted"
    "$KUBETRAIN" validate -f "$KT_TEST_DIR/out" >"$KT_TEST_DIR/err" 2>&1 ||
      fail "kubetrain validate rejected the conversion of $f"
    echo "$f: converted, valid, accepted by the apiserver"
  done
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
echo "PASS: $case_name"

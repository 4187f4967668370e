#!/usr/bin/env python3
"""The trainer's TensorBoard event files, read by TensorBoard's own reader.

Usage: tensorboard_test.py TRAINER_BINARY   (run with the venv of tests/tensorboard/venv)

1. One process (--summary-every 1, --output): EventAccumulator gives back, for every step,
   the loss the trainer wrote to --loss-curve (float32, exactly), the learning rate, a
   positive samples/s, and the final evaluation's AUC, log loss and accuracy exactly as in
   metrics.json (as float32); the file name is events.out.tfevents.<secs>.<host>.<pid>.
2. A lone worker with checkpoints and an evaluator beside it: the evaluator's run has one
   eval/* point per checkpoint it evaluated, equal to its ckpt-<step>.json.
Every process is started here and stopped by its PID only; waits have deadlines.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
from tensorboard.backend.event_processing import event_accumulator as ea

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from checks import check, failures, free_port  # noqa: E402

DEADLINE_S = 240
def f32(x):
    return float(np.float32(x))


def start(args, log, env):
    out = open(log, "w")
    return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env), out


def finish(proc, out):
    try:
        code = proc.wait(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()  # only this child, by its PID
        proc.wait()
        code = "timeout"
    out.close()
    return code


def scalars(run_dir):
    acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0})
    acc.Reload()
    return {tag: acc.Scalars(tag) for tag in acc.Tags()["scalars"]}


def base_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("CLUSTER_CONFIG", "POD_NAME", "TF_CONFIG", "KUBETRAIN_AUTH_KEY")}
    env["OMP_WAIT_POLICY"] = "passive"
    return env


def main():
    trainer = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="kt_tensorboard_")
    data = os.path.join(tmp, "data")
    small = ["--data-dir", data, "--generate-data", "6000", "--batch-size", "64", "--layers",
             "32", "--embedding-dim", "4", "--threads", "1", "--log-every", "20",
             "--lr", "0.05"]

    # 1. One process.
    out = os.path.join(tmp, "out")
    curve = os.path.join(tmp, "curve.csv")
    p = start([trainer, *small, "--steps", "60", "--summary-every", "1", "--output", out,
               "--loss-curve", curve, "--termination-log", os.path.join(tmp, "tl.json")],
              os.path.join(tmp, "local.log"), base_env())
    code = finish(*p)
    check(code == 0, f"the one-process run exits 0 (got {code}; {tmp}/local.log)")
    run = os.path.join(out, "tensorboard", "local-0")
    files = os.listdir(run) if os.path.isdir(run) else []
    check(len(files) == 1 and re.fullmatch(
        r"events\.out\.tfevents\.\d+\.[^.]+(\.[^.]+)*\.\d+", files[0] or "") is not None,
          f"one events.out.tfevents.<secs>.<host>.<pid> file in {run}: {files}")
    got = scalars(run)
    print("tags:", sorted(got))
    want_loss = {}
    with open(curve) as f:
        for line in f:
            step, loss = line.strip().split(",")
            want_loss[int(step)] = f32(float(loss))
    loss = {e.step: e.value for e in got.get("train/loss", [])}
    check(sorted(loss) == list(range(1, 61)), f"train/loss at steps 1..60 (got {sorted(loss)[:5]}...)")
    check(loss == want_loss, "train/loss equals the --loss-curve losses exactly (float32)")
    lr = [e.value for e in got.get("train/learning_rate", [])]
    check(len(lr) == 60 and all(v == f32(0.05) for v in lr), "train/learning_rate is --lr")
    sps = [e.value for e in got.get("train/samples_per_second", [])]
    check(len(sps) == 60 and all(v > 0 for v in sps), "train/samples_per_second positive")
    check("ps/sent_bytes" not in got, "no PS bytes in a one-process run")
    metrics = json.load(open(os.path.join(out, "metrics.json")))
    for tag, key in (("eval/auc", "auc"), ("eval/log_loss", "log_loss"),
                     ("eval/accuracy", "accuracy")):
        pts = [(e.step, e.value) for e in got.get(tag, [])]
        check(pts == [(60, f32(metrics["eval"][key]))],
              f"{tag} is metrics.json's {key} at step 60: {pts}")

    # 2. A lone worker (trains in-process) with checkpoints, and an evaluator.
    out2 = os.path.join(tmp, "out2")
    cluster = json.dumps({"worker": [f"127.0.0.1:{free_port()}"]})
    common = [*small, "--steps", "60", "--checkpoint-dir", os.path.join(tmp, "ckpt"),
              "--checkpoint-every", "20", "--output", out2, "--eval-poll", "0.2",
              "--metrics-port", "0", "--summary-every", "10"]
    env_e = base_env() | {"CLUSTER_CONFIG": cluster, "POD_NAME": "evaluator-0"}
    env_w = base_env() | {"CLUSTER_CONFIG": cluster, "POD_NAME": "worker-0"}
    e = start([trainer, *common, "--termination-log", os.path.join(tmp, "e.json")],
              os.path.join(tmp, "evaluator-0.log"), env_e)
    w = start([trainer, *common, "--termination-log", os.path.join(tmp, "w.json")],
              os.path.join(tmp, "worker-0.log"), env_w)
    wc, ec = finish(*w), finish(*e)
    check(wc == 0 and ec == 0, f"worker-0 and evaluator-0 exit 0 (got {wc}, {ec}; {tmp})")
    ev = scalars(os.path.join(out2, "tensorboard", "evaluator-0"))
    evaluated = {}
    for path in glob.glob(os.path.join(out2, "evaluator-0", "ckpt-*.json")):
        m = json.load(open(path))
        evaluated[m["step"]] = m
    auc = {e.step: e.value for e in ev.get("eval/auc", [])}
    check(60 in evaluated and sorted(auc) == sorted(evaluated),
          f"the evaluator's eval/auc has one point per checkpoint it evaluated: {sorted(auc)} "
          f"vs {sorted(evaluated)}")
    check(all(auc.get(s) == f32(m["auc"]) for s, m in evaluated.items()),
          "each eval/auc point equals that checkpoint's ckpt-<step>.json")
    acc = {e.step: e.value for e in ev.get("eval/accuracy", [])}
    check(all(acc.get(s) == f32(m["accuracy"]) for s, m in evaluated.items()),
          "each eval/accuracy point equals that checkpoint's ckpt-<step>.json")
    wl = scalars(os.path.join(out2, "tensorboard", "worker-0"))
    steps = [e.step for e in wl.get("train/loss", [])]
    check(steps == [10, 20, 30, 40, 50, 60], f"worker-0 has a train/loss point every 10 steps: {steps}")
    check(os.path.isfile(os.path.join(out2, "logs", "worker-0.log")) and
          os.path.isfile(os.path.join(out2, "logs", "evaluator-0.log")),
          "each replica saved its log tail to <output>/logs/<replica>.log")

    if failures:
        print(f"{len(failures)} check(s) failed; files kept in {tmp}")
        return 1
    subprocess.run(["rm", "-rf", tmp], check=False)
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

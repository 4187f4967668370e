#!/usr/bin/env python3
"""The trainer's ONNX export, checked by the ONNX tools themselves.

Usage: onnx_export_test.py TRAINER_BINARY   (run with the venv of tests/onnx/venv)

For Wide & Deep (2 parameter servers + 2 workers, real processes over 127.0.0.1) and for
the MLP classifier (one process): train with --output, then
  - onnx.checker.check_model (full_check) accepts <output>/model.onnx;
  - the trainer's own predictions (--predict, its oneDNN forward pass) for 1,000 examples
    equal onnxruntime's on the same inputs within 1e-5;
  - the inputs the trainer printed equal what model.json's preprocessing recipe computes
    from the raw lines (so a serving client can follow model.json);
  - the examples include ids the model has rows for and ids it has none for;
  - an export with ONNX external data (--onnx-external-threshold) passes the checker from
    its path and gives the same predictions from onnxruntime.
Every process is started here and stopped by its PID only; waits have deadlines.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from checks import check, failures, free_port  # noqa: E402

TOL = 1e-5
N_EXAMPLES = 1000
DEADLINE_S = 600
KEY = "0123456789abcdef" * 4

def run(args, log, env=None):
    """Runs the trainer to completion (deadline DEADLINE_S); returns its exit code."""
    with open(log, "w") as out:
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            return p.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            return "timeout"


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("CLUSTER_CONFIG", "POD_NAME", "TF_CONFIG", "KUBETRAIN_AUTH_KEY")}
    env["OMP_WAIT_POLICY"] = "passive"
    return env


def run_cluster(trainer, flags, tmp, num_ps, num_workers):
    """A parameter-server job as local processes; True if every process exits 0."""
    ps = [free_port() for _ in range(num_ps)]
    workers = [free_port() for _ in range(num_workers)]
    cluster = json.dumps({"ps": [f"127.0.0.1:{p}" for p in ps],
                          "worker": [f"127.0.0.1:{p}" for p in workers]})
    procs = []
    try:
        for role, n in (("ps", num_ps), ("worker", num_workers)):
            for i in range(n):
                env = clean_env()
                env.update(CLUSTER_CONFIG=cluster, POD_NAME=f"{role}-{i}", KUBETRAIN_AUTH_KEY=KEY)
                log = open(os.path.join(tmp, f"{role}-{i}.log"), "w")
                args = [trainer] + flags + ["--termination-log", os.path.join(tmp, f"{role}-{i}.json")]
                procs.append((f"{role}-{i}", subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env), log))
        deadline = time.monotonic() + DEADLINE_S
        ok = True
        for name, p, log in procs:
            try:
                code = p.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                code = "timeout"
            if code != 0:
                ok = False
                print(f"{name} ended with {code}; log:\n" + open(log.name).read()[-3000:])
        return ok
    finally:
        for _, p, log in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            log.close()


def predictions(trainer, flags, tmp, name):
    out = os.path.join(tmp, name + ".jsonl")
    code = run([trainer] + flags + ["--predict", out, "--eval-examples", str(N_EXAMPLES)],
               os.path.join(tmp, name + ".log"), clean_env())
    if code != 0:
        print(open(os.path.join(tmp, name + ".log")).read()[-3000:])
    check(code == 0, f"{name}: kubetrain-trainer --predict exits 0 (got {code})")
    if code != 0:
        return []
    return [json.loads(line) for line in open(out)]


# model.json's recipe for the categorical ids, in Python.
MASK = (1 << 64) - 1


def hash_feature(field, value):
    h = 0xcbf29ce484222325 ^ (((field + 1) * 0x100000001b3) & MASK)
    for b in value:
        h = ((h ^ b) * 0x100000001b3) & MASK
    h ^= h >> 33
    h = (h * 0xff51afd7ed558ccd) & MASK
    h ^= h >> 33
    return h - (1 << 64) if h >= 1 << 63 else h  # as int64


def transform_count(field):
    x = float(field) if field else 0.0
    return np.float32(math.log1p(x) if x >= 0 else -math.log1p(-x))


def check_model_file(out_dir, name):
    path = os.path.join(out_dir, "model.onnx")
    present = os.path.exists(path) and os.path.exists(os.path.join(out_dir, "model.json"))
    check(present, f"{name}: --output has model.onnx and model.json")
    if not present:
        return None, None
    try:
        onnx.checker.check_model(path, full_check=True)
        check(True, f"{name}: onnx.checker.check_model(full_check=True) accepts model.onnx")
    except Exception as e:  # noqa: BLE001 - report any checker error as a failure
        check(False, f"{name}: onnx.checker rejects model.onnx: {e}")
    return onnx.load(path), json.load(open(os.path.join(out_dir, "model.json")))


def compare(name, got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    diff = float(np.max(np.abs(got - want))) if got.size else math.inf
    check(got.shape == want.shape and diff <= TOL,
          f"{name}: onnxruntime equals the trainer on {len(want)} examples "
          f"(max |diff| {diff:.2e} <= {TOL:g})")


def test_wide_deep(trainer, tmp):
    data, out = os.path.join(tmp, "criteo"), os.path.join(tmp, "wd-out")
    model_flags = ["--model", "wide_deep", "--layers", "64,32", "--embedding-dim", "8",
                   "--batch-size", "128", "--optimizer", "adam", "--lr", "0.003",
                   "--threads", "1", "--metrics-port", "0", "--data-dir", data]
    # The data first (every worker would generate the same files; one does it here).
    code = run([trainer] + model_flags + ["--generate-data", "20000", "--generate-eval", "2000",
                                          "--steps", "1", "--no-eval", "--termination-log", ""],
               os.path.join(tmp, "generate.log"), clean_env())
    check(code == 0, f"wide_deep: synthetic data generated (exit {code})")
    ok = run_cluster(trainer, model_flags + ["--steps", "150", "--log-every", "50",
                                             "--output", out, "--startup-timeout", "120"],
                     tmp, num_ps=2, num_workers=2)
    check(ok, "wide_deep: 2 PS + 2 workers train and write --output")
    if not ok:
        return
    model, desc = check_model_file(out, "wide_deep")
    if model is None:
        return
    check([i["name"] for i in desc["inputs"]] == ["dense", "cat_ids"] and
          desc["outputs"][0]["name"] == "probability", "wide_deep: model.json names the inputs")
    # The examples: evaluation lines, with values never seen in training in every 7th line
    # (the synthetic data's vocabulary is small enough that every id is known otherwise).
    lines = open(os.path.join(data, "eval.tsv"), "rb").read().split(b"\n")[:N_EXAMPLES]
    fields = [line.split(b"\t") for line in lines]
    for i, f in enumerate(fields):
        if i % 7 == 0:
            f[14 + i % 26] = b"unseen%d" % i
    predict_dir = os.path.join(tmp, "criteo-predict")
    os.makedirs(predict_dir)
    with open(os.path.join(predict_dir, "eval.tsv"), "wb") as f:
        f.write(b"".join(b"\t".join(x) + b"\n" for x in fields))
    assert model_flags[-2] == "--data-dir"
    rows = predictions(trainer, model_flags[:-2] + ["--data-dir", predict_dir, "--checkpoint-dir",
                                                    os.path.join(out, "model")], tmp, "wd-predict")
    check(len(rows) == N_EXAMPLES, f"wide_deep: {N_EXAMPLES} predictions (got {len(rows)})")
    if not rows:
        return
    dense = np.array([r["dense"] for r in rows], np.float32)
    cat = np.array([r["cat_ids"] for r in rows], np.int64)
    want = np.array([r["probs"] for r in rows], np.float32)
    # model.json's preprocessing, from the raw lines, gives the trainer's inputs.
    pre_dense = np.array([[transform_count(f[1 + i].decode()) for i in range(13)] for f in fields],
                         np.float32)
    pre_cat = np.array([[hash_feature(i, f[14 + i]) for i in range(26)] for f in fields], np.int64)
    check(np.array_equal(pre_dense, dense) and np.array_equal(pre_cat, cat),
          "wide_deep: model.json's preprocessing of the raw lines gives the trainer's inputs")
    # Both kinds of id occur: with a trained row, and without one (the zero row).
    keys = set()
    for node in model.graph.node:
        if node.op_type == "LabelEncoder":
            keys = set(next(a.ints for a in node.attribute if a.name == "keys_int64s"))
    known = np.isin(cat, np.fromiter(keys, np.int64, len(keys)))
    check(known.any() and (~known).any(),
          f"wide_deep: the examples have known ids ({known.mean():.1%}) and unknown ones")
    sess = ort.InferenceSession(os.path.join(out, "model.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(["probability"], {"dense": dense, "cat_ids": cat})[0]
    compare("wide_deep", got, want)
    check_external_data(trainer, model_flags[:-2] + ["--data-dir", predict_dir],
                        os.path.join(out, "model"), tmp, dense, cat, want, got)

    # An untrained model (--steps 0: no embedding row was ever updated) exports too, and every
    # id is unknown to it (this run failed with "no trained embedding rows" before).
    out0 = os.path.join(tmp, "wd0-out")
    code = run([trainer] + model_flags + ["--steps", "0", "--output", out0, "--no-eval",
                                          "--termination-log", ""],
               os.path.join(tmp, "wd0.log"), clean_env())
    check(code == 0, f"wide_deep --steps 0: the job succeeds with --output (exit {code})")
    if code != 0:
        print(open(os.path.join(tmp, "wd0.log")).read()[-3000:])
        return
    if check_model_file(out0, "wide_deep --steps 0")[0] is None:
        return
    rows = predictions(trainer, model_flags[:-2] + ["--data-dir", predict_dir, "--checkpoint-dir",
                                                    os.path.join(out0, "model")], tmp, "wd0-predict")
    if rows:
        sess = ort.InferenceSession(os.path.join(out0, "model.onnx"),
                                    providers=["CPUExecutionProvider"])
        got = sess.run(["probability"], {"dense": dense, "cat_ids": cat})[0]
        compare("wide_deep --steps 0", got, np.array([r["probs"] for r in rows], np.float32))


def check_external_data(trainer, flags, checkpoint, tmp, dense, cat, want, inline_got):
    """--export with a low --onnx-external-threshold (a model past 2 GiB takes this path by
    itself): the tables go to model.onnx.data, which onnx.checker and onnxruntime load from
    the path, and the predictions are the trainer's (within 1e-6) and the inline model's."""
    out = os.path.join(tmp, "wd-external")
    code = run([trainer] + flags + ["--checkpoint-dir", checkpoint, "--export", out,
                                    "--onnx-external-threshold", "4096"],
               os.path.join(tmp, "wd-external.log"), clean_env())
    if code != 0:
        print(open(os.path.join(tmp, "wd-external.log")).read()[-3000:])
    check(code == 0, f"external data: kubetrain-trainer --export exits 0 (got {code})")
    path, data = os.path.join(out, "model.onnx"), os.path.join(out, "model.onnx.data")
    check(os.path.exists(path) and os.path.exists(data),
          "external data: --export wrote model.onnx and model.onnx.data")
    if code != 0 or not os.path.exists(data):
        return
    shallow = onnx.load(path, load_external_data=False)
    external = {t.name: {e.key: e.value for e in t.external_data}
                for t in shallow.graph.initializer
                if t.data_location == onnx.TensorProto.EXTERNAL}
    check({"embedding", "wide_weight"} <= set(external) and
          all(e["location"] == "model.onnx.data" and int(e["offset"]) % 4096 == 0
              for e in external.values()),
          f"external data: the tables are external, relative and aligned ({sorted(external)})")
    size = os.path.getsize(data)
    desc = json.load(open(os.path.join(out, "model.json")))
    check(desc.get("external_data", {}).get("bytes") == size,
          f"external data: model.json records the side file's {size} bytes")
    check(os.path.getsize(path) < size,
          f"external data: model.onnx ({os.path.getsize(path)} B) is smaller than its data")
    try:
        onnx.checker.check_model(path, full_check=True)
        check(True, "external data: onnx.checker.check_model(path, full_check=True) accepts it")
    except Exception as e:  # noqa: BLE001 - report any checker error as a failure
        check(False, f"external data: onnx.checker rejects it: {e}")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(["probability"], {"dense": dense, "cat_ids": cat})[0]
    diff = float(np.max(np.abs(np.asarray(got) - np.asarray(want, np.float32))))
    check(got.shape == want.shape and diff <= 1e-6,
          f"external data: onnxruntime equals the trainer (max |diff| {diff:.2e} <= 1e-6)")
    check(np.array_equal(got, inline_got),
          "external data: onnxruntime gives the inline model's predictions exactly")


def test_mlp(trainer, tmp):
    data, out = os.path.join(tmp, "dense"), os.path.join(tmp, "mlp-out")
    os.makedirs(data)
    rng = np.random.default_rng(7)
    w = rng.normal(size=(6, 3))
    for name, n in (("train.csv", 6000), ("eval.csv", 1500)):
        x = rng.normal(size=(n, 6)).astype(np.float32)
        y = np.argmax(x @ w, axis=1)
        with open(os.path.join(data, name), "w") as f:
            for label, row in zip(y, x):
                f.write(f"{label}," + ",".join(f"{v:.6g}" for v in row) + "\n")
    flags = ["--model", "mlp", "--data-format", "dense_csv", "--num-features", "6",
             "--num-classes", "3", "--layers", "32,16", "--batch-size", "64", "--threads", "1",
             "--metrics-port", "0", "--data-dir", data, "--optimizer", "adam", "--lr", "0.01"]
    code = run([trainer] + flags + ["--steps", "200", "--output", out, "--termination-log",
                                    os.path.join(tmp, "mlp.json")],
               os.path.join(tmp, "mlp-train.log"), clean_env())
    if code != 0:
        print(open(os.path.join(tmp, "mlp-train.log")).read()[-3000:])
    check(code == 0, f"mlp: one process trains and writes --output (exit {code})")
    if code != 0:
        return
    if check_model_file(out, "mlp")[0] is None:
        return
    rows = predictions(trainer, flags + ["--checkpoint-dir", os.path.join(out, "model")], tmp,
                       "mlp-predict")
    check(len(rows) == N_EXAMPLES, f"mlp: {N_EXAMPLES} predictions (got {len(rows)})")
    if not rows:
        return
    x = np.array([r["dense"] for r in rows], np.float32)
    raw = np.loadtxt(os.path.join(data, "eval.csv"), delimiter=",", max_rows=N_EXAMPLES,
                     dtype=np.float64)[:, 1:].astype(np.float32)
    check(np.array_equal(x, raw), "mlp: the trainer's inputs are the CSV's features as they are")
    want = np.array([r["probs"] for r in rows], np.float32)
    sess = ort.InferenceSession(os.path.join(out, "model.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(["probabilities"], {"features": x})[0]
    compare("mlp", got, want)


def main():
    trainer = os.path.abspath(sys.argv[1])
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}", flush=True)
    with tempfile.TemporaryDirectory(prefix="kt-onnx-") as tmp:
        test_wide_deep(trainer, tmp)
        test_mlp(trainer, tmp)
    print(f"onnx export: {len(failures)} failed" + (": " + "; ".join(failures) if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

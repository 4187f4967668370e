#!/usr/bin/env python3
"""kubetrain-serve end to end, with a v2 client written elsewhere (NVIDIA's tritonclient).

Usage: serve_e2e_test.py TRAINER_BINARY SERVE_BINARY   (run with the venv of tests/serve/venv)

A tiny Wide & Deep trains in one process (--output), `kubetrain-trainer --predict` prints
its predictions for 1,000 evaluation examples (every 7th with a value never seen in
training), then kubetrain-serve serves --output and:
  - tritonclient.http (KServe Open Inference Protocol v2, JSON tensors) gets the same
    probabilities (max |diff| <= 1e-6), from dense + cat_ids tensors and from raw lines,
    as JSON and as binary tensor data (binary inputs, binary output), by version too;
  - the TF Serving REST form ("instances" and "inputs") and raw lines through it too;
  - bad requests get their 4xx (malformed JSON, wrong shape, wrong dtype, unknown model,
    a huge body) while the server's RSS stays bounded under a flood of large bodies;
  - a newer model committed to --output is served without a restart (hot reload);
  - SIGTERM: it exits 0.
Every process is started here and stopped by its PID only; every wait has a deadline.
"""
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from checks import check, failures, free_port  # noqa: E402

TOL = 1e-6
N_EXAMPLES = 1000
DEADLINE_S = 300
def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("CLUSTER_CONFIG", "POD_NAME", "TF_CONFIG", "KUBETRAIN_AUTH_KEY")}
    env["OMP_WAIT_POLICY"] = "passive"
    return env


def run(args, log):
    with open(log, "w") as out:
        p = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=clean_env())
        try:
            code = p.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            code = "timeout"
    if code != 0:
        print(open(log).read()[-3000:])
    return code


def request(port, method, path, body=None, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def poll(what, pred, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)  # poll interval, not a synchronisation
    check(False, f"{what} within {timeout} s")
    return False


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def compare(name, got, want):
    got, want = np.asarray(got, np.float32).reshape(-1), np.asarray(want, np.float32).reshape(-1)
    diff = float(np.max(np.abs(got - want))) if got.size and got.shape == want.shape else float("inf")
    check(got.shape == want.shape and diff <= TOL,
          f"{name}: equals kubetrain-trainer --predict on {len(want)} examples "
          f"(max |diff| {diff:.2e} <= {TOL:g})")


def main(trainer, serve, tmp):
    data, out = os.path.join(tmp, "criteo"), os.path.join(tmp, "out")
    model_flags = ["--model", "wide_deep", "--layers", "32,16", "--embedding-dim", "8",
                   "--batch-size", "128", "--optimizer", "adam", "--lr", "0.003",
                   "--threads", "1", "--metrics-port", "0"]
    code = run([trainer] + model_flags + ["--data-dir", data, "--generate-data", "20000",
                                          "--generate-eval", "2000", "--steps", "150",
                                          "--output", out, "--no-eval", "--termination-log", ""],
               os.path.join(tmp, "train.log"))
    check(code == 0, f"a tiny Wide & Deep trains with --output (exit {code})")
    if code != 0:
        return
    lines = open(os.path.join(data, "eval.tsv"), "rb").read().split(b"\n")[:N_EXAMPLES]
    fields = [line.split(b"\t") for line in lines]
    for i, f in enumerate(fields):
        if i % 7 == 0:
            f[14 + i % 26] = b"unseen%d" % i
    predict_dir = os.path.join(tmp, "predict")
    os.makedirs(predict_dir)
    raw = [b"\t".join(x).decode() for x in fields]
    with open(os.path.join(predict_dir, "eval.tsv"), "w") as f:
        f.write("".join(line + "\n" for line in raw))
    preds = os.path.join(tmp, "predictions.jsonl")
    code = run([trainer] + model_flags + ["--data-dir", predict_dir, "--checkpoint-dir",
                                          os.path.join(out, "model"), "--predict", preds,
                                          "--eval-examples", str(N_EXAMPLES)],
               os.path.join(tmp, "predict.log"))
    check(code == 0, f"kubetrain-trainer --predict exits 0 (got {code})")
    if code != 0:
        return
    rows = [json.loads(line) for line in open(preds)]
    check(len(rows) == N_EXAMPLES, f"{N_EXAMPLES} predictions (got {len(rows)})")
    dense = np.array([r["dense"] for r in rows], np.float32)
    cat = np.array([r["cat_ids"] for r in rows], np.int64)
    want = np.array([r["probs"] for r in rows], np.float32)

    port = free_port()
    log = open(os.path.join(tmp, "serve.log"), "w")
    server = subprocess.Popen(
        [serve, "--model", out, "--model-name", "ctr", "--host", "127.0.0.1", "--port", str(port),
         "--threads", "1", "--max-batch-size", "64", "--max-batch-wait", "1",
         "--max-body-bytes", str(1 << 20), "--max-request-examples", "256",
         "--max-connections", "64", "--max-connections-per-client", "32",
         "--poll-interval", "0.2"],
        stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    try:
        serve_checks(server, port, tmp, trainer, model_flags, data, out, dense, cat, want, raw)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()
        if failures:
            print("serve.log:\n" + open(os.path.join(tmp, "serve.log")).read()[-4000:])


def serve_checks(server, port, tmp, trainer, model_flags, data, out, dense, cat, want, raw):
    def ready():
        try:
            return request(port, "GET", "/v2/health/ready", timeout=2)[0] == 200
        except OSError:
            return False
    if not poll("kubetrain-serve becomes ready", ready, 60):
        return
    client = httpclient.InferenceServerClient(url=f"127.0.0.1:{port}", concurrency=10,
                                              connection_timeout=30, network_timeout=30)
    check(client.is_server_live() and client.is_server_ready(), "tritonclient: server live, ready")
    check(client.is_model_ready("ctr"), "tritonclient: model ready")
    meta = client.get_model_metadata("ctr")
    check([i["name"] for i in meta["inputs"]] == ["dense", "cat_ids"] and
          meta["versions"] == ["150"], f"tritonclient: model metadata ({meta})")
    # Wide & Deep in FP32 runs with its embeddings folded into the first layer: the
    # comparisons with --predict below are of the folded forward pass.
    check(meta.get("parameters", {}).get("embedding_fold", "").startswith("folded: "),
          f"the model's metadata says its embeddings are folded ({meta.get('parameters')})")

    # v2 tensors, in 50 requests of 20 examples, 10 in flight at a time (async_infer on the
    # client's connection pool): the server batches them.
    def tensors(begin, end):
        d = httpclient.InferInput("dense", [end - begin, 13], "FP32")
        d.set_data_from_numpy(dense[begin:end], binary_data=False)
        c = httpclient.InferInput("cat_ids", [end - begin, 26], "INT64")
        c.set_data_from_numpy(cat[begin:end], binary_data=False)
        return [d, c]
    output = [httpclient.InferRequestedOutput("probability", binary_data=False)]
    def infer_tensors(begin, end):
        return client.infer("ctr", tensors(begin, end), outputs=output).as_numpy("probability")
    pending = [client.async_infer("ctr", tensors(20 * k, 20 * (k + 1)), outputs=output)
               for k in range(50)]
    got = [p.get_result(timeout=60).as_numpy("probability") for p in pending]
    compare("tritonclient v2 dense + cat_ids (50 requests, 10 concurrent)", np.concatenate(got),
            want)
    status, metrics = request(port, "GET", "/metrics")
    batches = [float(line.split()[1]) for line in metrics.decode().splitlines()
               if line.startswith("kubetrain_serve_batches_total ")]
    check(status == 200 and batches and 1 <= batches[0] <= 50,
          f"metrics count the batches ({batches} for 50 requests)")

    # v2 raw Criteo lines (BYTES): the server applies model.json's hashing recipe.
    got = []
    for begin in range(0, N_EXAMPLES, 250):
        lines = np.array(raw[begin:begin + 250], dtype=np.object_)
        i = httpclient.InferInput("criteo_line", [len(lines)], "BYTES")
        i.set_data_from_numpy(lines, binary_data=False)
        o = httpclient.InferRequestedOutput("probability", binary_data=False)
        got.append(client.infer("ctr", [i], outputs=[o]).as_numpy("probability"))
    compare("tritonclient v2 criteo_line", np.concatenate(got), want)

    # The binary tensor data extension: binary inputs (dense, cat_ids; criteo_line as
    # BYTES), binary output, in requests of 250; and by version (/versions/150/infer).
    got, got_lines = [], []
    for begin in range(0, N_EXAMPLES, 250):
        end = min(begin + 250, N_EXAMPLES)
        d = httpclient.InferInput("dense", [end - begin, 13], "FP32")
        d.set_data_from_numpy(dense[begin:end], binary_data=True)
        c = httpclient.InferInput("cat_ids", [end - begin, 26], "INT64")
        c.set_data_from_numpy(cat[begin:end], binary_data=True)
        o = httpclient.InferRequestedOutput("probability", binary_data=True)
        got.append(client.infer("ctr", [d, c], outputs=[o], model_version="150")
                   .as_numpy("probability"))
        lines = np.array(raw[begin:end], dtype=np.object_)
        i = httpclient.InferInput("criteo_line", [len(lines)], "BYTES")
        i.set_data_from_numpy(lines, binary_data=True)
        got_lines.append(client.infer("ctr", [i], outputs=[o]).as_numpy("probability"))
    compare("tritonclient v2 binary dense + cat_ids, binary output, version 150",
            np.concatenate(got), want)
    compare("tritonclient v2 binary criteo_line, binary output", np.concatenate(got_lines), want)
    try:
        client.infer("ctr", tensors(0, 1), outputs=output, model_version="7")
        check(False, "tritonclient: an unknown version is refused")
    except InferenceServerException as e:
        check("no version" in str(e) and "150" in str(e),
              f"tritonclient: an unknown version is refused, naming the served one ({e})")

    # TF Serving REST: instances (rows), inputs (columns), raw lines.
    def tf(body):
        status, text = request(port, "POST", "/v1/models/ctr:predict", json.dumps(body),
                               {"Content-Type": "application/json"})
        if status != 200:
            print(text[:500])
            return None
        j = json.loads(text)
        return j.get("predictions", j.get("outputs"))
    got = []
    for b in range(0, N_EXAMPLES, 200):
        got += tf({"instances": [{"dense": dense[i].tolist(), "cat_ids": cat[i].tolist()}
                                 for i in range(b, b + 200)]}) or []
    compare("TF Serving instances", got, want)
    got = []
    for b in range(0, N_EXAMPLES, 200):
        got += tf({"inputs": {"dense": dense[b:b + 200].tolist(),
                              "cat_ids": cat[b:b + 200].tolist()}}) or []
    compare("TF Serving inputs", got, want)
    got = []
    for b in range(0, N_EXAMPLES, 200):
        got += tf({"instances": raw[b:b + 200]}) or []
    compare("TF Serving raw lines", got, want)

    # Bad requests.
    v2 = "/v2/models/ctr/infer"
    hdr = {"Content-Type": "application/json"}
    def tensor(name, dtype, shape, data):
        return {"name": name, "datatype": dtype, "shape": shape, "data": data}
    good_cat = tensor("cat_ids", "INT64", [1, 26], cat[0].tolist())
    cases = [
        ("malformed JSON", "POST", v2, b'{"inputs": [', 400),
        ("wrong shape", "POST", v2, json.dumps({"inputs": [
            tensor("dense", "FP32", [1, 12], dense[0][:12].tolist()), good_cat]}), 400),
        ("wrong dtype", "POST", v2, json.dumps({"inputs": [
            tensor("dense", "FP64", [1, 13], dense[0].tolist()), good_cat]}), 400),
        ("data that does not fit the shape", "POST", v2, json.dumps({"inputs": [
            tensor("dense", "FP32", [2, 13], dense[0].tolist()), good_cat]}), 400),
        ("too many examples", "POST", "/v1/models/ctr:predict",
         json.dumps({"instances": raw[:257]}), 400),
        ("unknown model", "POST", "/v2/models/nope/infer", b"{}", 404),
        ("huge body", "POST", v2, b" " * ((1 << 20) + 1), 413),
        ("a body claiming 1 GiB", "POST", v2, None, 413),
    ]
    # Binary tensor data whose sizes do not fit (the JSON header's length in the first
    # element: sent as Inference-Header-Content-Length).
    bin_head = json.dumps({"inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [1, 13],
         "parameters": {"binary_data_size": 52}}, good_cat]}).encode()
    bin_body = bin_head + dense[0].tobytes()
    cases += [
        ("binary: header length past the body", "POST", v2,
         (len(bin_body) + 1, bin_body), 400),
        ("binary: binary_data_size past the data", "POST", v2,
         (len(bin_head), bin_body[:-4]), 400),
        ("binary: bytes left over", "POST", v2, (len(bin_head), bin_body + b"xxxx"), 400),
        ("binary: header length not a number", "POST", v2, ("52x", bin_body), 400),
    ]
    for what, method, path, body, status in cases:
        headers = dict(hdr)
        if body is None:
            headers["Content-Length"] = str(1 << 30)
        if isinstance(body, tuple):
            headers["Inference-Header-Content-Length"] = str(body[0])
            body = body[1]
        try:
            got_status, text = request(port, method, path, body, headers)
        except OSError as e:
            got_status, text = f"error {e}", b""
        clear = status == 404 or status == 413 or b'"error"' in text
        check(got_status == status and clear,
              f"bad request ({what}): {status} with a message (got {got_status} {text[:120]!r})")

    # Bounded memory: 32 clients at once each sending a 1 MiB body (the limit), slowly
    # enough that they are all buffered together, then many 413s.
    before = rss_kib(server.pid)
    def flood():
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            body = b" " * (1 << 20)
            s.sendall(b"POST /v2/models/ctr/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                      % len(body) + body)
            s.recv(100)
            s.close()
        except OSError:
            pass
    for _ in range(3):
        ts = [threading.Thread(target=flood) for _ in range(32)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
    after = rss_kib(server.pid)
    check(after - before < 64 * 1024,
          f"RSS bounded under 96 bodies of 1 MiB, 32 at a time ({before} -> {after} KiB)")
    check(ready(), "still ready after the bad requests")
    compare("v2 after the bad requests", infer_tensors(0, 100), want[:100])

    # Hot reload: a newer model committed to --output is served without a restart.
    code = run([trainer] + model_flags + ["--data-dir", data, "--steps", "200", "--output", out,
                                          "--no-eval", "--termination-log", ""],
               os.path.join(tmp, "train2.log"))
    check(code == 0, f"a second run commits a newer model to --output (exit {code})")
    poll("the server reloads the step-200 model",
         lambda: client.get_model_metadata("ctr")["versions"] == ["200"], 60)
    status, metrics = request(port, "GET", "/metrics")
    check(status == 200 and b'kubetrain_serve_reloads_total{result="ok"} 1' in metrics and
          b"kubetrain_serve_model_step 200" in metrics, "metrics count the reload")
    check(b"kubetrain_serve_embedding_fold 1" in metrics, "metrics: the reloaded model is folded")
    # The reloaded model's folded tables are its own: its answers are step 200's --predict.
    preds200 = os.path.join(tmp, "predictions200.jsonl")
    code = run([trainer] + model_flags + ["--data-dir", os.path.join(tmp, "predict"),
                                          "--checkpoint-dir", os.path.join(out, "model"),
                                          "--predict", preds200, "--eval-examples", "100"],
               os.path.join(tmp, "predict200.log"))
    check(code == 0, f"kubetrain-trainer --predict of step 200 exits 0 (got {code})")
    if code == 0:
        want200 = np.array([json.loads(line)["probs"] for line in open(preds200)], np.float32)
        check(float(np.max(np.abs(want200.reshape(-1) - want[:100].reshape(-1)))) > 1e-4,
              "step 200 predicts otherwise than step 150 (so the next check can fail)")
        compare("v2 after the reload (step 200)", infer_tensors(0, 100), want200)
    check(server.poll() is None, "the same process serves (no restart)")

    server.send_signal(signal.SIGTERM)
    try:
        code = server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        code = "timeout"
    check(code == 0, f"SIGTERM: drains and exits 0 (got {code})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="kt-serve-e2e-") as tmp:
        main(sys.argv[1], sys.argv[2], tmp)
    print("FAILED: " + "; ".join(failures) if failures else "all checks passed")
    sys.exit(1 if failures else 0)

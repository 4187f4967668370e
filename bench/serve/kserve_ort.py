"""KServe's Python model server with onnxruntime, for serve_bench.sh's comparison.

kserve.ModelServer (uvicorn/FastAPI, the server KServe's Python runtimes are built on)
serving one kserve.Model whose predict runs the exported model.onnx with onnxruntime on
the given number of intra-op threads, over the same Open Inference Protocol v2 REST
endpoint (/v2/models/NAME/infer, JSON data) that kubetrain-serve answers.

  python kserve_ort.py --model-file model.onnx --model-name m --port P --threads T
"""

import argparse
import logging
import sys

import numpy as np
import onnxruntime as ort

ours = argparse.ArgumentParser()
ours.add_argument("--model-file", required=True)
ours.add_argument("--model-name", default="m")
ours.add_argument("--port", type=int, required=True)
ours.add_argument("--threads", type=int, default=1)
opts, rest = ours.parse_known_args()
sys.argv = [sys.argv[0]] + rest  # kserve parses the command line when imported

import kserve  # noqa: E402
from kserve import InferOutput, InferRequest, InferResponse  # noqa: E402


class OrtModel(kserve.Model):
    def __init__(self, name, path, threads):
        super().__init__(name)
        o = ort.SessionOptions()
        o.intra_op_num_threads = threads
        o.inter_op_num_threads = 1
        o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.session = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
        self.ready = True

    def predict(self, payload: InferRequest, headers=None, response_headers=None):
        feeds = {}
        for tensor in payload.inputs:
            a = tensor.as_numpy()
            feeds[tensor.name] = a.astype(np.int64 if tensor.datatype == "INT64" else np.float32)
        (prob,) = self.session.run(["probability"], feeds)
        out = InferOutput(name="probability", shape=list(prob.shape), datatype="FP32")
        out.set_data_from_numpy(prob, binary_data=False)
        return InferResponse(
            model_name=self.name, infer_outputs=[out], response_id=payload.id or "")


if __name__ == "__main__":
    logging.getLogger().setLevel(logging.WARNING)
    model = OrtModel(opts.model_name, opts.model_file, opts.threads)
    model.load()
    server = kserve.ModelServer(http_port=opts.port, workers=1, enable_grpc=False,
                                enable_latency_logging=False)
    # No log line per request (access log, timing trace): as fast as KServe goes.
    for name in ("uvicorn.access", "kserve.trace"):
        logging.getLogger(name).disabled = True
    server.start([model])

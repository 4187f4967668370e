"""Stock TensorFlow ParameterServerStrategy, as a Kubeflow TFJob runs it.

Every replica runs this file; TF_CONFIG (written by the operator, as training-operator
v1 writes it) says which one it is:
  ps, worker   start a tf.distribute.Server and serve until SIGTERM (the operator
               removes them after success: cleanPodPolicy Running);
  chief        the coordinator: ParameterServerStrategy + Keras model.fit, which a
               ClusterCoordinator turns into steps scheduled on the workers, with the
               variables sharded over the PS. It exits 0 when training is done, which
               makes the TFJob Succeeded.
A tiny linear-regression model on synthetic data: EPOCHS x STEPS_PER_EPOCH steps. The
chief prints where the variables live, the loss of every epoch and a final line
"trained STEPS steps, loss L (first epoch F)".

Keras: model.fit with ParameterServerStrategy needs Keras 2 (the tf-keras package);
Keras 3, TensorFlow's default tf.keras since 2.16, does not support it.
Environment (optional): EPOCHS (3), STEPS_PER_EPOCH (10), BATCH (32).
"""
import json
import os
import signal
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

FEATURES = 8


def log(*args):
    print(*args, flush=True)


def serve(resolver, task):
    # Workers and PS only serve: the chief sends them the work. The server runs on its own
    # threads; the main thread waits for SIGTERM, which ends the process at once (as PID 1
    # of its container, Python would otherwise ignore it and the pod take its whole grace
    # period to go when the operator removes it after success).
    signal.signal(signal.SIGTERM, lambda signum, frame: os._exit(0))
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=task["type"],
        task_index=task["index"],
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    log(f"{task['type']} {task['index']}: serving on {server.target}")
    while True:
        # Short sleeps: the signal may land on one of TensorFlow's threads, and Python runs
        # the handler only when the main thread next wakes.
        time.sleep(1)


def dataset_fn(input_context):
    # y = x . w_true + 0.5, the same on every worker; each worker shuffles its own copy.
    w_true = tf.range(1, FEATURES + 1, dtype=tf.float32) / FEATURES
    x = tf.random.stateless_uniform((2048, FEATURES), seed=(1, input_context.input_pipeline_id))
    y = tf.reduce_sum(x * w_true, axis=1, keepdims=True) + 0.5
    batch = input_context.get_per_replica_batch_size(int(os.environ.get("BATCH", "32")))
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048).repeat().batch(batch).prefetch(2)


class EpochLog(keras.callbacks.Callback):
    def __init__(self, steps_per_epoch):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch
        self.losses = []

    def on_epoch_end(self, epoch, logs=None):
        loss = float((logs or {}).get("loss", float("nan")))
        self.losses.append(loss)
        log(f"epoch {epoch + 1}: step {(epoch + 1) * self.steps_per_epoch} loss {loss:.6f}")


def coordinate(resolver):
    num_ps = len(resolver.cluster_spec().as_dict().get("ps", []))
    num_workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    log(f"chief: {num_ps} PS, {num_workers} worker(s)")
    # Shard every variable over the PS (the kernel of the 8x16 layer: 512 bytes).
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=64, max_shards=max(num_ps, 1)
    )
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.layers.Input(shape=(FEATURES,)),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(1),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05), loss="mse")
    devices = sorted({v.device for v in model.variables for v in getattr(v, "variables", [v])})
    log("chief: variables on " + ", ".join(devices))

    epochs = int(os.environ.get("EPOCHS", "3"))
    steps_per_epoch = int(os.environ.get("STEPS_PER_EPOCH", "10"))
    epoch_log = EpochLog(steps_per_epoch)
    model.fit(
        keras.utils.experimental.DatasetCreator(dataset_fn),
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        callbacks=[epoch_log],
        verbose=0,
    )
    first, last = epoch_log.losses[0], epoch_log.losses[-1]
    log(f"trained {epochs * steps_per_epoch} steps, loss {last:.6f} (first epoch {first:.6f})")
    if not last < first:
        log("chief: the loss did not fall")
        return 1
    return 0


def main():
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
    task = tf_config.get("task")
    if not task:
        log("no TF_CONFIG task: this program runs as a replica of a TFJob with PS and workers")
        return 2
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.rpc_layer is None:
        resolver.rpc_layer = "grpc"
    log(f"TensorFlow {tf.__version__}, tf-keras {keras.__version__}: {task['type']} {task['index']}")
    if task["type"] in ("ps", "worker"):
        serve(resolver, task)
        return 0
    return coordinate(resolver)


if __name__ == "__main__":
    sys.exit(main())

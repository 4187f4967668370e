#!/usr/bin/env python3
"""The kubetrain Wide & Deep model in TensorFlow (CPU), for a side-by-side benchmark.

Same data (a Criteo TSV file), same features (log(1+x) of the counts, per-field hashed
categoricals), same architecture (embeddings -> MLP with ReLU -> 1 logit, plus a wide
scalar weight per hashed value), same optimizer (Adagrad, initial accumulator 0.1), same
batch size and thread count. The input is parsed into arrays before timing starts (the
kubetrain figure includes parsing), so the comparison is conservative.

Prints one JSON line: {"samples_per_second": ..., "auc": ..., "log_loss": ...}.
"""
import argparse
import json
import os
import sys
import time
import zlib

import numpy as np


# --profile criteo-kaggle: Kaggle's per-field cardinalities (DLRM's list, as
# trainer/data/generator.cc's CriteoKaggleCardinalities), each field hashed into its own.
KAGGLE_CARDINALITIES = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                        8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                        286181, 105, 142572]


def load(path, bins, limit=None):
    """bins: rows per field (26 values); field f owns rows [offset[f], offset[f] + bins[f])."""
    offsets = np.concatenate([[0], np.cumsum(bins)[:-1]]).tolist()
    dense, cat, label = [], [], []
    with open(path) as f:
        for i, line in enumerate(f):
            if limit is not None and i >= limit:
                break
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 40:
                continue
            label.append(float(parts[0]))
            dense.append([np.log1p(float(v)) if v else 0.0 for v in parts[1:14]])
            # Per-field hashing into one shared table. CRC-32, not hash(): Python salts str
            # hashes per process (PYTHONHASHSEED), which made the buckets, and so the AUC,
            # differ from run to run.
            cat.append([offsets[f] + (zlib.crc32(f"{f}\t{v}".encode()) % bins[f])
                        for f, v in enumerate(parts[14:40])])
    return (np.asarray(dense, np.float32), np.asarray(cat, np.int64), np.asarray(label, np.float32))


def auc(scores, labels):
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels > 0.5
    n_pos, n_neg = pos.sum(), (~pos).sum()
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True)
    p.add_argument("--eval", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--layers", default="1024,512,256")
    p.add_argument("--embedding-dim", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bins", type=int, default=10007, help="rows per field (small profile)")
    p.add_argument("--profile", default="small", choices=["small", "criteo-kaggle"],
                   help="criteo-kaggle: each field hashed into its Kaggle cardinality")
    a = p.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.random.set_seed(1)

    need = (a.steps + a.warmup) * a.batch_size
    bins = KAGGLE_CARDINALITIES if a.profile == "criteo-kaggle" else [a.bins] * 26
    xd, xc, y = load(a.train, bins)
    reps = -(-need // len(y))
    xd, xc, y = np.tile(xd, (reps, 1))[:need], np.tile(xc, (reps, 1))[:need], np.tile(y, reps)[:need]
    ed, ec, ey = load(a.eval, bins)

    rows = int(sum(bins))
    emb = tf.keras.layers.Embedding(rows, a.embedding_dim,
                                    embeddings_initializer=tf.keras.initializers.RandomUniform(-0.05, 0.05))
    wide = tf.keras.layers.Embedding(rows, 1, embeddings_initializer="zeros")
    mlp = [tf.keras.layers.Dense(int(n), activation="relu", kernel_initializer="he_uniform")
           for n in a.layers.split(",")]
    mlp.append(tf.keras.layers.Dense(1, kernel_initializer="he_uniform"))
    opt = tf.keras.optimizers.Adagrad(learning_rate=a.lr, initial_accumulator_value=0.1)

    def forward(d, c):
        e = tf.reshape(emb(c), [-1, 26 * a.embedding_dim])
        h = tf.concat([d, e], axis=1)
        for layer in mlp:
            h = layer(h)
        return tf.squeeze(h, 1) + tf.reduce_sum(tf.squeeze(wide(c), 2), axis=1)

    @tf.function
    def step(d, c, t):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=t, logits=forward(d, c)))
        variables = emb.trainable_variables + wide.trainable_variables + [v for l in mlp for v in l.trainable_variables]
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    predict = tf.function(lambda d, c: tf.sigmoid(forward(d, c)))
    b = a.batch_size
    for i in range(a.warmup):
        step(xd[i * b:(i + 1) * b], xc[i * b:(i + 1) * b], y[i * b:(i + 1) * b])
    start, cpu_start = time.perf_counter(), time.process_time()
    for i in range(a.warmup, a.warmup + a.steps):
        loss = step(xd[i * b:(i + 1) * b], xc[i * b:(i + 1) * b], y[i * b:(i + 1) * b])
    float(loss)  # wait for the last step
    sps = a.steps * b / (time.perf_counter() - start)
    # CPU seconds of every thread of the process over the same steps: on a machine shared
    # with other work the wall time says how much CPU the scheduler gave, this what the
    # steps took.
    spcs = a.steps * b / max(1e-9, time.process_time() - cpu_start)
    probs = np.concatenate([predict(ed[i:i + 4096], ec[i:i + 4096]).numpy() for i in range(0, len(ey), 4096)])
    pc = np.clip(probs, 1e-7, 1 - 1e-7)
    print(json.dumps({"samples_per_second": sps, "samples_per_cpu_second": spcs, "auc": auc(probs, ey),
                      "log_loss": float(-np.mean(ey * np.log(pc) + (1 - ey) * np.log(1 - pc))),
                      "tensorflow": tf.__version__}))


if __name__ == "__main__":
    sys.exit(main())

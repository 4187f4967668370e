#!/usr/bin/env python3
"""The kubetrain Wide & Deep model in TensorFlow (CPU), for a side-by-side benchmark.

Same data (a Criteo TSV file), same features (signed log(1+|x|) of the counts, per-field
hashed categoricals), same architecture (embeddings -> MLP with ReLU -> 1 logit, plus a wide
scalar weight per hashed value), same optimizer (Adagrad, initial accumulator 0.1), same batch
size and thread count.

The input is parsed before timing starts (tf.data, into flat binary files in a temporary or the
--parsed directory, read batch by batch during training: neither the text nor the parsed set is held in memory, so the
peak RSS is the model's and TensorFlow's), while kubetrain's figure includes parsing: the
comparison is conservative.

Two ways to apply the embedding tables' updates (--tables):
  sparse (default)  the tables are variables updated with TensorFlow's sparse Adagrad kernel
                    (ResourceSparseApplyAdagrad) on the batch's unique rows, their gradients
                    summed per row: what a TF1/Estimator PS job or DeepRec does, and the fastest
                    TensorFlow gets here.
  keras             Keras Embedding layers and the Keras Adagrad optimizer for every variable, as
                    a Keras user writes it. Keras 3's Adagrad reads the whole accumulator each step
                    (sqrt(accumulator + epsilon) over the table), so its cost grows with the
                    table, not the batch: at Kaggle's 33.8M rows it is the slow side of this file.

Prints one JSON line: {"samples_per_second": ..., "auc": ..., "log_loss": ...}.
"""
import argparse
import json
import os
import sys
import tempfile
import time
import zlib

import numpy as np

# --profile criteo-kaggle: Kaggle's per-field cardinalities (DLRM's list, as
# trainer/data/generator.cc's CriteoKaggleCardinalities), each field hashed into its own.
KAGGLE_CARDINALITIES = [1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
                        8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
                        286181, 105, 142572]
DENSE, CATEGORICAL = 13, 26


def parse_to_files(tf, path, bins, prefix):
    """Parses a Criteo TSV file (label, 13 counts, 26 categoricals; other lines skipped) with
    tf.data into <prefix>.label (float32), .dense (float32 x 13) and .cat (int32 x 26, field f's
    value hashed into rows [offset[f], offset[f] + bins[f])). Returns the number of lines kept."""
    offsets = np.concatenate([[0], np.cumsum(bins)[:-1]]).astype(np.int64)

    @tf.function
    def parse(lines):
        cols = tf.strings.split(lines, "\t")
        cols = tf.ragged.boolean_mask(cols, cols.row_lengths() == 1 + DENSE + CATEGORICAL)
        cols = cols.to_tensor(default_value="", shape=[None, 1 + DENSE + CATEGORICAL])
        label = tf.strings.to_number(cols[:, 0])
        d = cols[:, 1:1 + DENSE]
        x = tf.strings.to_number(tf.where(d == "", "0", d))
        dense = tf.sign(x) * tf.math.log1p(tf.abs(x))  # as trainer/data/reader.cc
        cat = tf.stack([offsets[f] + tf.strings.to_hash_bucket_fast(cols[:, 1 + DENSE + f], bins[f])
                        for f in range(CATEGORICAL)], axis=1)
        return label, dense, tf.cast(cat, tf.int32)

    n = 0
    with open(prefix + ".label", "wb") as fl, open(prefix + ".dense", "wb") as fd, \
            open(prefix + ".cat", "wb") as fc:
        for label, dense, cat in tf.data.TextLineDataset(path).batch(65536).map(parse):
            label.numpy().tofile(fl)
            dense.numpy().tofile(fd)
            cat.numpy().tofile(fc)
            n += len(label)
    if n == 0:
        sys.exit(f"{path}: no line with {1 + DENSE + CATEGORICAL} tab-separated fields")
    return n


class Batches:
    """Reads the parsed files in order, batch by batch, starting over at the end (as kubetrain
    does for steps past one epoch)."""

    def __init__(self, prefix, n):
        self.n, self.pos = n, 0
        self.files = [(open(prefix + s, "rb"), w) for s, w in ((".label", 1), (".dense", DENSE), (".cat", CATEGORICAL))]

    def next(self, b):
        take = [min(b, self.n - self.pos)]
        if take[0] < b:
            take.append(b - take[0])
        parts = []
        for count in take:
            parts.append([np.fromfile(f, np.int32 if w == CATEGORICAL else np.float32, count * w).reshape(count, w)
                          for f, w in self.files])
            self.pos += count
            if self.pos == self.n:
                self.pos = 0
                for f, _ in self.files:
                    f.seek(0)
        # Joined only when the batch wrapped past the end (once per epoch, not per batch).
        label, dense, cat = parts[0] if len(parts) == 1 else (np.concatenate(c) for c in zip(*parts))
        return dense, cat, label[:, 0]

    def all(self):
        return self.next(self.n)


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
    p.add_argument("--tables", default="sparse", choices=["sparse", "keras"],
                   help="how the embedding tables are updated (see the file's comment)")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: Keras' mixed_bfloat16 policy for the MLP (tables and optimizer "
                        "state stay float32), as kubetrain's --precision bf16")
    p.add_argument("--parsed", help="keep the parsed files in this directory and reuse them when the "
                                     "same input was parsed there before (default: a temporary one)")
    a = p.parse_args()

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.random.set_seed(1)
    if a.precision == "bf16":
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")

    bins = KAGGLE_CARDINALITIES if a.profile == "criteo-kaggle" else [a.bins] * CATEGORICAL
    with tempfile.TemporaryDirectory() as scratch:
        where = a.parsed or scratch

        def batches(path, name):
            # Named by the input and the hashing, so a cache never serves another file's rows.
            st = os.stat(path)
            prefix = os.path.join(where, f"{name}-{st.st_size}-{int(st.st_mtime)}-{zlib.crc32(str(bins).encode()):08x}")
            if not os.path.exists(prefix + ".lines"):
                n = parse_to_files(tf, path, bins, prefix)
                with open(prefix + ".lines", "w") as f:  # last: the marker that the files are whole
                    f.write(str(n))
            return Batches(prefix, int(open(prefix + ".lines").read()))

        train = batches(a.train, "train")
        result = train_and_evaluate(tf, a, int(sum(bins)), train, batches(a.eval, "eval").all())
    print(json.dumps(result))


def train_and_evaluate(tf, a, rows, train, evaluation):
    dim = a.embedding_dim
    mlp = [tf.keras.layers.Dense(int(n), activation="relu", kernel_initializer="he_uniform")
           for n in a.layers.split(",")]
    mlp.append(tf.keras.layers.Dense(1, kernel_initializer="he_uniform"))
    opt = tf.keras.optimizers.Adagrad(learning_rate=a.lr, initial_accumulator_value=0.1)

    def head(d, e, w):
        """d: [B, 13] dense, e: [B, 26 * dim] embeddings, w: [B, 26] wide weights -> logits [B]."""
        h = tf.concat([d, e], axis=1)
        for layer in mlp:
            h = layer(h)
        return tf.cast(tf.squeeze(h, 1), tf.float32) + tf.reduce_sum(w, axis=1)

    def loss_of(logits, t):
        return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=t, logits=logits))

    if a.tables == "keras":
        emb = tf.keras.layers.Embedding(rows, dim,
                                        embeddings_initializer=tf.keras.initializers.RandomUniform(-0.05, 0.05))
        wide = tf.keras.layers.Embedding(rows, 1, embeddings_initializer="zeros")

        def forward(d, c):
            return head(d, tf.reshape(emb(c), [-1, CATEGORICAL * dim]), tf.squeeze(wide(c), 2))

        @tf.function
        def step(d, c, t):
            with tf.GradientTape() as tape:
                loss = loss_of(forward(d, c), t)
            variables = emb.trainable_variables + wide.trainable_variables + [v for l in mlp for v in l.trainable_variables]
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss
    else:
        emb = tf.Variable(tf.random.uniform([rows, dim], -0.05, 0.05, seed=1))
        emb_acc = tf.Variable(tf.fill([rows, dim], 0.1))
        wide = tf.Variable(tf.zeros([rows, 1]))
        wide_acc = tf.Variable(tf.fill([rows, 1], 0.1))
        lr = tf.constant(a.lr)

        def forward(d, c):
            return head(d, tf.reshape(tf.gather(emb, c), [-1, CATEGORICAL * dim]), tf.squeeze(tf.gather(wide, c), 2))

        @tf.function
        def step(d, c, t):
            # A PS step: read the batch's unique rows, train on them, apply each row's summed
            # gradient once.
            ids, where = tf.unique(tf.reshape(c, [-1]))
            e_rows, w_rows = tf.gather(emb, ids), tf.gather(wide, ids)
            with tf.GradientTape() as tape:
                tape.watch([e_rows, w_rows])
                e = tf.reshape(tf.gather(e_rows, where), [-1, CATEGORICAL * dim])
                w = tf.reshape(tf.gather(w_rows, where), [-1, CATEGORICAL])
                loss = loss_of(head(d, e, w), t)
            dense = [v for l in mlp for v in l.trainable_variables]
            grads = tape.gradient(loss, [e_rows, w_rows] + dense)
            for table, acc, g in ((emb, emb_acc, grads[0]), (wide, wide_acc, grads[1])):
                tf.raw_ops.ResourceSparseApplyAdagrad(var=table.handle, accum=acc.handle, lr=lr, grad=g, indices=ids,
                                                      use_locking=False)
            opt.apply_gradients(zip(grads[2:], dense))
            return loss

    predict = tf.function(lambda d, c: tf.sigmoid(forward(d, c)))
    b = a.batch_size
    for _ in range(a.warmup):
        step(*train.next(b))
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(a.steps):
        loss = step(*train.next(b))
    float(loss)  # wait for the last step
    sps = a.steps * b / (time.perf_counter() - start)
    # CPU seconds of every thread of the process over the same steps: on a machine shared
    # with other work the wall time says how much CPU the scheduler gave, this what the
    # steps took.
    spcs = a.steps * b / max(1e-9, time.process_time() - cpu_start)
    ed, ec, ey = evaluation
    probs = np.concatenate([predict(ed[i:i + 4096], ec[i:i + 4096]).numpy() for i in range(0, len(ey), 4096)])
    pc = np.clip(probs, 1e-7, 1 - 1e-7)
    return {"samples_per_second": sps, "samples_per_cpu_second": spcs, "auc": auc(probs, ey),
            "log_loss": float(-np.mean(ey * np.log(pc) + (1 - ey) * np.log(1 - pc))),
            "tensorflow": tf.__version__, "tables": a.tables, "precision": a.precision, "rss_after_training_bytes": rss_now()}


def rss_now():
    """The process's resident bytes now (the peak, from /usr/bin/time, also counts the moment the
    tables' initial values and the variables both exist)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


if __name__ == "__main__":
    sys.exit(main())

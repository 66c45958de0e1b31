"""Vectorized client cohorts against the sequential library loop, per model and size.

Both train the same client jobs (plain local SGD, one epoch, batch 32, lr 0.05,
then each local model evaluated on its own test split): the sequential loop is
``[run_client(job, runner) for job in jobs]`` (``run_here``, today's path), the
cohort is ``train_cohort(jobs, runner)``. Data are random arrays built in process:
for ``mlp`` (the table model) 32 features, for ``small_cnn`` 28x28x1 images; 10
classes; local test splits of a quarter of the training size. Each cell is the
median of ``--repeats`` alternating runs after one warm-up of each (tracing).

small_cnn falls back to sequential training (dropout and convolutions), so its
rows measure the fallback. The probe section measures why: one SGD step of
small_cnn's layers without dropout for K clients of 26 samples, as K separate
compiled steps (what sequential training does), as ``tf.vectorized_map`` over
``stateless_call`` (TensorFlow runs the conv filter gradient as a loop), and as one
channel-stacked network whose convolutions are grouped (``groups = K``: client k
owns input and output channel block k) with per-client dense layers as one
einsum, and as every convolution written as 9 shifted batched matmuls (im2col
without the copy), whose gradients are matmuls too. Run from the repository root:

    python benchmarks/bench_cohort.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from fedpipe.client import ClientTask, LocalSGD, LocalTraining  # noqa: E402
from fedpipe.data.splits import ClientData  # noqa: E402
from fedpipe.model.cohort import cohort_engine, train_cohort  # noqa: E402
from fedpipe.model.jobs import ClientJob  # noqa: E402
from fedpipe.model.trainer import run_client  # noqa: E402
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights  # noqa: E402

SHAPES = {"mlp": (32,), "small_cnn": (28, 28, 1)}
SIZES = ((10, 26), (100, 26), (10, 256))  # (clients, training samples each)
CLASSES = 10


def jobs_for(spec: ModelSpec, clients: int, samples: int) -> list[ClientJob]:
    """``clients`` jobs of ``samples`` random training samples each."""
    weights = initial_weights(spec, 0)
    training = LocalTraining(epochs=1, batch_size=32, lr=spec.lr)
    rng = np.random.default_rng(clients * 1000 + samples)
    n_test = max(samples // 4, 1)
    jobs = []
    for c in range(clients):
        x = rng.random((samples + n_test, *spec.input_shape), dtype=np.float32)
        y = rng.integers(0, CLASSES, samples + n_test)
        data = ClientData(c, x[:samples], y[:samples], x[samples:], y[samples:])
        task = ClientTask(client=c, round=1, global_weights=weights, seed=0)
        jobs.append(ClientJob(spec, LocalSGD(), task, data, training))
    return jobs


def median_seconds(
    runs: dict[str, Callable[[], object]], repeats: int
) -> dict[str, float]:
    """Median wall time of each run, alternating, after one warm-up each."""
    for run in runs.values():
        run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def library_table(repeats: int) -> list[str]:
    rows = [
        "| model | clients x samples | sequential s | cohort s | speed-up | "
        "max abs diff | cohort path |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, shape in SHAPES.items():
        runner = ModelRunner(ModelSpec(name, shape, CLASSES, "sgd", 0.05))
        start = time.perf_counter()
        engine, reason = cohort_engine(runner)  # once per runner: traces the step
        check = f"check {time.perf_counter() - start:.1f} s"
        path = f"vectorized ({check})" if engine else f"fallback: {reason[:24]}..."
        for clients, samples in SIZES:
            rows.append(library_row(runner, clients, samples, repeats) + f" {path} |")
    return rows


def library_row(runner: ModelRunner, clients: int, samples: int, repeats: int) -> str:
    """One table row (without the path column) for one model and cohort size."""
    jobs = jobs_for(runner.spec, clients, samples)
    out: dict[str, list] = {}

    def sequential() -> None:
        out["seq"] = [run_client(j, runner) for j in jobs]

    def cohort() -> None:
        out["cohort"] = train_cohort(jobs, runner)

    t = median_seconds({"seq": sequential, "cohort": cohort}, repeats)
    diff = max(
        float(np.max(np.abs(a - b)))
        for s, c in zip(out["seq"], out["cohort"], strict=True)
        for a, b in zip(s.update.weights, c.update.weights, strict=True)
    )
    return (
        f"| {runner.spec.name} | {clients} x {samples} | {t['seq']:.3f} | "
        f"{t['cohort']:.3f} | {t['seq'] / t['cohort']:.1f}x | {diff:.1e} |"
    )


# ---------------------------------------------------------------- small_cnn probe


def cnn_weights(k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """K clients' small_cnn weights without dropout: conv1, conv2, dense."""
    shapes = [(3, 3, 1, 32), (32,), (3, 3, 32, 64), (64,), (1600, CLASSES), (CLASSES,)]
    return [rng.normal(scale=0.05, size=(k, *s)).astype(np.float32) for s in shapes]


def cnn_forward(w: list[tf.Tensor], x: tf.Tensor) -> tf.Tensor:
    """small_cnn's logits (no dropout) for one client."""
    h = tf.nn.relu(tf.nn.conv2d(x, w[0], 1, "VALID") + w[1])
    h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.nn.relu(tf.nn.conv2d(h, w[2], 1, "VALID") + w[3])
    h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    return tf.reshape(h, [tf.shape(h)[0], -1]) @ w[4] + w[5]


def ce(y: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
    )


@tf.function(reduce_retracing=True)
def one_step(w: list[tf.Tensor], x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
    with tf.GradientTape() as tape:
        tape.watch(w)
        loss = ce(y, cnn_forward(w, x))
    return [v - 0.05 * g for v, g in zip(w, tape.gradient(loss, w), strict=True)]


@tf.function(reduce_retracing=True)
def vmap_step(w: list[tf.Tensor], x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
    def grads(elems):  # type: ignore[no-untyped-def]
        wk, xk, yk = elems
        with tf.GradientTape() as tape:
            tape.watch(wk)
            loss = ce(yk, cnn_forward(wk, xk))
        return tape.gradient(loss, wk)

    g = tf.vectorized_map(grads, (w, x, y))
    return [v - 0.05 * gk for v, gk in zip(w, g, strict=True)]


@tf.function(reduce_retracing=True)
def grouped_step(w: list[tf.Tensor], x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
    """All K clients as one channel-stacked network with grouped convolutions."""
    k = tf.shape(x)[0]
    b = tf.shape(x)[1]

    def stack_filters(f: tf.Tensor) -> tf.Tensor:  # (K, h, w, c, o) -> (h, w, c, K*o)
        f = tf.transpose(f, [1, 2, 3, 0, 4])
        s = tf.shape(f)
        return tf.reshape(f, [s[0], s[1], s[2], s[3] * s[4]])

    with tf.GradientTape() as tape:
        tape.watch(w)
        xs = tf.reshape(tf.transpose(x, [1, 2, 3, 0, 4]), [b, 28, 28, k])  # channels
        h = tf.nn.conv2d(xs, stack_filters(w[0]), 1, "VALID")
        h = tf.nn.relu(h + tf.reshape(w[1], [-1]))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.nn.conv2d(h, stack_filters(w[2]), 1, "VALID")
        h = tf.nn.relu(h + tf.reshape(w[3], [-1]))
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")  # (B, 5, 5, K*64)
        h = tf.transpose(tf.reshape(h, [b, 5, 5, k, 64]), [3, 0, 1, 2, 4])
        logits = tf.einsum("kbi,kio->kbo", tf.reshape(h, [k, b, 1600]), w[4])
        logits = logits + w[5][:, None, :]
        per = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        loss = tf.reduce_sum(tf.reduce_mean(per, axis=1))  # each client its own mean
    return [v - 0.05 * g for v, g in zip(w, tape.gradient(loss, w), strict=True)]


def conv_taps(x: tf.Tensor, f: tf.Tensor) -> tf.Tensor:
    """A 3x3 'valid' convolution per client as 9 shifted batched matmuls:
    x (K, B, H, W, C), f (K, 3, 3, C, O) -> (K, B, H-2, W-2, O)."""
    h, w = x.shape[2] - 2, x.shape[3] - 2
    return tf.add_n(
        [
            tf.einsum("kbhwc,kco->kbhwo", x[:, :, i : i + h, j : j + w, :], f[:, i, j])
            for i in range(3)
            for j in range(3)
        ]
    )


def pool_k(h: tf.Tensor) -> tf.Tensor:
    """2x2 max-pool of (K, B, H, W, C) (odd sides drop their last row)."""
    k, b = tf.shape(h)[0], tf.shape(h)[1]
    hh, ww, c = h.shape[2] // 2, h.shape[3] // 2, h.shape[4]
    h = h[:, :, : 2 * hh, : 2 * ww, :]
    h = tf.reshape(h, [k, b, hh, 2, ww, 2, c])
    return tf.reduce_max(h, axis=[3, 5])


@tf.function(reduce_retracing=True)
def taps_step(w: list[tf.Tensor], x: tf.Tensor, y: tf.Tensor) -> list[tf.Tensor]:
    """All K clients with every convolution as shifted batched matmuls."""
    with tf.GradientTape() as tape:
        tape.watch(w)
        h = pool_k(tf.nn.relu(conv_taps(x, w[0]) + w[1][:, None, None, None, :]))
        h = pool_k(tf.nn.relu(conv_taps(h, w[2]) + w[3][:, None, None, None, :]))
        k, b = tf.shape(h)[0], tf.shape(h)[1]
        logits = tf.einsum("kbi,kio->kbo", tf.reshape(h, [k, b, 1600]), w[4])
        logits = logits + w[5][:, None, :]
        per = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        loss = tf.reduce_sum(tf.reduce_mean(per, axis=1))
    return [v - 0.05 * g for v, g in zip(w, tape.gradient(loss, w), strict=True)]


def probe_table(repeats: int) -> list[str]:
    rows = [
        "| clients x 26 samples | K separate steps s | vectorized_map s | "
        "grouped conv s | shifted einsum s | max abs diff (grouped, einsum) |",
        "|---|---|---|---|---|---|",
    ]
    rng = np.random.default_rng(0)
    return rows + [probe_row(k, rng, repeats) for k in (10, 100)]


def probe_row(k: int, rng: np.random.Generator, repeats: int) -> str:
    """One probe row: the four formulations of one step for ``k`` clients."""
    w = [tf.constant(v) for v in cnn_weights(k, rng)]
    x = tf.constant(rng.random((k, 26, 28, 28, 1), dtype=np.float32))
    y = tf.constant(rng.integers(0, CLASSES, (k, 26)))
    per_client = [([v[i] for v in w], x[i], y[i]) for i in range(k)]
    out: dict[str, list] = {}
    together = {"vmap": vmap_step, "grouped": grouped_step, "taps": taps_step}

    def separate() -> None:
        out["sep"] = [one_step(*args) for args in per_client]

    def run(name: str) -> Callable[[], None]:
        return lambda: out.__setitem__(name, together[name](w, x, y))

    t = median_seconds({"sep": separate} | {n: run(n) for n in together}, repeats)
    diff = {
        name: max(
            float(np.max(np.abs(out[name][j][i].numpy() - out["sep"][i][j])))
            for i in range(k)
            for j in range(len(w))
        )
        for name in ("grouped", "taps")
    }
    return (
        f"| {k} | {t['sep']:.3f} | {t['vmap']:.3f} | {t['grouped']:.3f} | "
        f"{t['taps']:.3f} | {diff['grouped']:.1e}, {diff['taps']:.1e} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tf.get_logger().setLevel("ERROR")
    print("## Cohort against the sequential library loop (one SGD epoch + local eval)")
    print()
    print("\n".join(library_table(args.repeats)))
    print()
    print("## small_cnn probe: one SGD step (no dropout), K clients of 26 samples")
    print()
    print("\n".join(probe_table(args.repeats)))


if __name__ == "__main__":
    main()

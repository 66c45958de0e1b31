"""The one client trainer (fedpipe.model.trainer) and what the cohort shares with it.

One batching of local training (:func:`fedpipe.model.training.batch_indices`) for
:meth:`ModelRunner.fit` and the vectorized cohort; ``cohort_map`` of size 1 is
:func:`run_here`; the cohort's written-out SGD and Adam steps equal Keras' own.
"""

from __future__ import annotations

import ast
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from fedpipe.client import ClientTask, LocalSGD, LocalTraining
from fedpipe.data.splits import ClientData
from fedpipe.model.cohort import _Fit, cohort_engine, cohort_map
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner, ModelSpec, batch_indices

FEATURES = 6
SIZES = (3, 9, 20)

_runners: dict[str, ModelRunner] = {}


def _runner(optimizer: str) -> ModelRunner:
    if optimizer not in _runners:
        lr = 0.05 if optimizer == "sgd" else 0.01
        _runners[optimizer] = ModelRunner(
            ModelSpec("mlp", (FEATURES,), 3, optimizer, lr)
        )
    return _runners[optimizer]


def _data(client: int, n: int) -> ClientData:
    rng = np.random.default_rng(100 + client)
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    y = rng.integers(0, 3, size=n).astype(np.int64)
    return ClientData(client, x, y, x[: n // 2 + 1], y[: n // 2 + 1])


def _jobs(runner: ModelRunner) -> list[ClientJob]:
    weights = [np.array(w) for w in runner.model.get_weights()]
    return [
        ClientJob(
            runner.spec,
            LocalSGD(),
            ClientTask(client=c, round=1, global_weights=weights, seed=3),
            _data(c, n),
            LocalTraining(2, 8, runner.spec.lr),
        )
        for c, n in enumerate(SIZES)
    ]


# ---------------------------------------------------------------- batching


def _reference_batches(
    n: int, epochs: int, batch_size: int, seed: int, max_steps: int | None
) -> list[np.ndarray]:
    """The batching ModelRunner.fit had before it moved to batch_indices."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for _ in range(epochs):
        if max_steps is not None and len(out) >= max_steps:
            break
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            if max_steps is not None and len(out) >= max_steps:
                break
            out.append(order[start : start + batch_size])
    return out


@pytest.mark.parametrize(
    ("n", "epochs", "batch_size", "max_steps"),
    [(20, 2, 8, None), (20, 3, 8, 4), (3, 2, 8, None), (0, 2, 8, None), (16, 1, 8, 9)],
)
def test_batch_indices_is_the_fits_batching(
    n: int, epochs: int, batch_size: int, max_steps: int | None
) -> None:
    plan = batch_indices(
        n, epochs=epochs, batch_size=batch_size, seed=5, max_steps=max_steps
    )
    expected = _reference_batches(n, epochs, batch_size, 5, max_steps)
    assert len(plan) == len(expected)
    for got, want in zip(plan, expected, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("max_steps", [None, 1, 4])
def test_fit_takes_one_step_per_planned_batch(max_steps: int | None) -> None:
    runner = _runner("sgd")
    data = _data(0, 20)
    weights = [np.array(w) for w in runner.model.get_weights()]
    runner.fit(
        weights,
        data.x_train,
        data.y_train,
        epochs=2,
        batch_size=8,
        seed=1,
        max_steps=max_steps,
    )
    plan = batch_indices(20, epochs=2, batch_size=8, seed=1, max_steps=max_steps)
    assert runner.last_steps == len(plan)


def test_a_cohort_fit_plans_the_same_batches() -> None:
    data = _data(2, 20)
    fit = _Fit(0, data, [], seed=4, epochs=3, batch_size=8, max_steps=5)
    expected = batch_indices(20, epochs=3, batch_size=8, seed=4, max_steps=5)
    assert len(fit.plan) == len(expected)
    for got, want in zip(fit.plan, expected, strict=True):
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- one trainer


def _same_bits(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert isinstance(x, ClientResult) and isinstance(y, ClientResult)
        assert x.client == y.client
        assert repr((x.local, x.train_loss)) == repr((y.local, y.train_loss))
        for wx, wy in zip(x.update.weights, y.update.weights, strict=True):
            assert wx.tobytes() == wy.tobytes()


@pytest.mark.parametrize("size", [None, 1])
def test_cohort_map_of_one_is_run_here(size: int | None) -> None:
    runner = _runner("adam")
    jobs = _jobs(runner)
    _same_bits(run_here(runner)(jobs), list(cohort_map(runner, size)(jobs)))


def test_model_package_imports_nothing_above_it() -> None:
    """fedpipe.model sits below fedpipe.federation (and everything above it)."""
    above = (
        "fedpipe.federation",
        "fedpipe.observe",
        "fedpipe_app",
        "orchestration",
        "tasks",
        "flows",
    )
    root = Path(__file__).resolve().parents[1] / "fedpipe" / "model"
    bad = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{path.name}: {n}" for n in names if n.startswith(above)]
    assert bad == []


# ---------------------------------------------------------------- optimizers


def _keras_steps(
    optimizer: keras.optimizers.Optimizer,
    start: list[np.ndarray],
    grads: list[list[np.ndarray]],
) -> list[np.ndarray]:
    """Keras' own optimizer applied to one client's weights, step by step."""
    variables = [keras.Variable(w) for w in start]
    optimizer.build(variables)
    for g in grads:
        optimizer.apply([tf.constant(a) for a in g], variables)
    return [v.value.numpy() for v in variables]


def _cohort_steps(
    optimizer: str,
    start: list[list[np.ndarray]],
    grads: list[list[list[np.ndarray]]],
    active: np.ndarray,
) -> list[np.ndarray]:
    """The cohort engine's update on the clients' stacked weights; a client is
    left as it was where ``active`` (steps x clients) is False, as the engine's
    step masks it."""
    engine, why = cohort_engine(_runner(optimizer))
    assert engine is not None, why
    tv = [tf.constant(np.stack(ws)) for ws in zip(*start, strict=True)]
    moments = [tf.zeros_like(v) for v in tv] if engine.adam else []
    velocities = [tf.zeros_like(v) for v in tv] if engine.adam else []
    count = np.zeros(len(start), np.float32)
    for t, on in enumerate(active):
        count = count + on
        g = [tf.constant(np.stack(gs)) for gs in zip(*grads[t], strict=True)]
        new = engine.update(tv, g, moments, velocities, tf.constant(count))

        def keep(n: list, o: list, on: np.ndarray = on) -> list:
            shaped = [on.reshape((-1,) + (1,) * (len(x.shape) - 1)) for x in o]
            return [tf.where(s, a, b) for s, a, b in zip(shaped, n, o, strict=True)]

        tv, moments, velocities = (
            keep(new[0], tv),
            keep(new[1], moments),
            keep(new[2], velocities),
        )
    return [np.array(v) for v in tv]


def _keras_optimizer(optimizer: str) -> keras.optimizers.Optimizer:
    lr = _runner(optimizer).spec.lr
    if optimizer == "sgd":
        return keras.optimizers.SGD(learning_rate=lr)
    return keras.optimizers.Adam(learning_rate=lr)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
@pytest.mark.parametrize("n_steps", [1, 4])
def test_cohort_update_is_keras_optimizer_step(optimizer: str, n_steps: int) -> None:
    """Two clients, different weights and gradients; the second sits out the
    first step (its step count lags, as a masked step of a client with fewer
    batches). Equal bit for bit: both run the same float32 ops eagerly."""
    runner = _runner(optimizer)
    shapes = [tuple(v.shape) for v in runner.model.trainable_variables]
    rng = np.random.default_rng(0)

    def draw(scale: float) -> list[np.ndarray]:
        return [rng.normal(scale=scale, size=s).astype(np.float32) for s in shapes]

    start = [draw(0.5), draw(0.5)]
    grads = [[draw(1.0), draw(1.0)] for _ in range(n_steps)]
    active = np.ones((n_steps, 2), bool)
    active[0, 1] = n_steps == 1  # one step: both take it
    got = _cohort_steps(optimizer, start, grads, active)
    for k in range(2):
        steps = [grads[t][k] for t in range(n_steps) if active[t, k]]
        want = _keras_steps(_keras_optimizer(optimizer), start[k], steps)
        for slot, w in enumerate(want):
            np.testing.assert_array_equal(got[slot][k], w)

"""Tests for fedpipe.model.training: deterministic, history-free local training."""

from __future__ import annotations

import random
import sys
import threading

import numpy as np
import pytest

from fedpipe.model.metrics import METRIC_NAMES
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights

Weights = list[np.ndarray]

# ---------------------------------------------------------------- helpers


def _spec(
    name: str = "mlp", *, n_classes: int = 10, optimizer: str = "sgd"
) -> ModelSpec:
    return ModelSpec(
        name=name,
        input_shape=(28, 28, 1),
        n_classes=n_classes,
        optimizer=optimizer,
        lr=0.05 if optimizer == "sgd" else 0.01,
    )


def _data(seed: int, n: int = 64, n_classes: int = 10) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.random((n, 28, 28, 1), dtype=np.float32)
    y = (np.arange(n) % n_classes).astype(np.int32)
    return x, y


def _fit(runner: ModelRunner, weights: Weights, data_seed: int, seed: int) -> Weights:
    x, y = _data(data_seed)
    return runner.fit(weights, x, y, epochs=2, batch_size=16, seed=seed)


def _assert_bitwise_equal(a: Weights, b: Weights) -> None:
    assert len(a) == len(b)
    for got, want in zip(a, b, strict=True):
        assert got.dtype == want.dtype
        assert got.tobytes() == want.tobytes()


def _differs(a: Weights, b: Weights) -> bool:
    return any(x.tobytes() != y.tobytes() for x, y in zip(a, b, strict=True))


# ---------------------------------------------------------------- fixtures

# (model, optimizer): plain SGD; Adam, whose moments would leak between clients;
# seed_cnn, whose dropout draws from a random state that would leak too.
CASES = [("mlp", "sgd"), ("mlp", "adam"), ("seed_cnn", "sgd")]


@pytest.fixture(scope="module", params=CASES, ids=["mlp-sgd", "mlp-adam", "seed_cnn"])
def case(request: pytest.FixtureRequest) -> tuple[ModelSpec, ModelRunner, Weights]:
    name, optimizer = request.param
    spec = _spec(name, optimizer=optimizer)
    return spec, ModelRunner(spec), initial_weights(spec, seed=1)


@pytest.fixture(scope="module")
def mlp_runner() -> ModelRunner:
    return ModelRunner(_spec())


# ---------------------------------------------------------------- fit


def test_fit_is_deterministic(case: tuple[ModelSpec, ModelRunner, Weights]) -> None:
    _, runner, start = case
    first = _fit(runner, start, data_seed=0, seed=11)
    second = _fit(runner, start, data_seed=0, seed=11)
    assert _differs(first, start)
    _assert_bitwise_equal(first, second)


def test_fit_does_not_depend_on_earlier_fits(
    case: tuple[ModelSpec, ModelRunner, Weights],
) -> None:
    # a resumed round runs client B on a fresh runner; mid-run, B follows A
    spec, runner, start = case
    _fit(runner, start, data_seed=1, seed=21)  # client A
    after_a = _fit(runner, start, data_seed=2, seed=22)  # client B
    fresh = _fit(ModelRunner(spec), start, data_seed=2, seed=22)
    _assert_bitwise_equal(after_a, fresh)


def test_different_seeds_give_different_weights(
    case: tuple[ModelSpec, ModelRunner, Weights],
) -> None:
    _, runner, start = case
    a = _fit(runner, start, data_seed=0, seed=31)
    b = _fit(runner, start, data_seed=0, seed=32)
    assert _differs(a, b)


def test_fit_does_not_modify_the_input_weights(mlp_runner: ModelRunner) -> None:
    start = initial_weights(_spec(), seed=1)
    copy = [w.copy() for w in start]
    _fit(mlp_runner, start, data_seed=0, seed=11)
    _assert_bitwise_equal(start, copy)


# ---------------------------------------------------------------- initial_weights


def test_initial_weights_are_deterministic() -> None:
    _assert_bitwise_equal(
        initial_weights(_spec(), seed=5), initial_weights(_spec(), seed=5)
    )


def test_initial_weights_ignore_other_threads_drawing_from_random() -> None:
    """Other threads (Prefect's, for retry and backoff jitter) draw from Python's
    shared ``random``; the initial model must not depend on when they do (it
    did: CI saw other round-0 weights under ``fedpipe run`` than under
    ``dvc repro`` of the same params)."""
    expected = initial_weights(_spec("cnn"), seed=5)
    stop = threading.Event()

    def draw() -> None:
        while not stop.is_set():
            random.random()

    drawer = threading.Thread(target=draw)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible
    drawer.start()
    try:
        got = [initial_weights(_spec("cnn"), seed=5) for _ in range(3)]
    finally:
        stop.set()
        drawer.join()
        sys.setswitchinterval(interval)
    for weights in got:
        _assert_bitwise_equal(weights, expected)


def test_keras_draws_its_default_seeds_where_initial_weights_sets_them() -> None:
    """The hook the test above relies on: Keras' default seeds come from the
    generator ``initial_weights`` sets for its thread (fails if a Keras upgrade
    draws them some other way)."""
    from keras.src.random.seed_generator import make_default_seed

    from fedpipe.model.training import _default_seeds_from

    with _default_seeds_from(5):
        drawn = [make_default_seed() for _ in range(3)]
    own = random.Random(5)
    assert drawn == [own.randint(1, int(1e9)) for _ in range(3)]


def test_initial_weights_depend_on_seed() -> None:
    assert _differs(initial_weights(_spec(), seed=5), initial_weights(_spec(), seed=6))


def test_initial_weights_match_the_model_layout(mlp_runner: ModelRunner) -> None:
    weights = initial_weights(_spec(), seed=5)
    assert [w.shape for w in weights] == [(784, 32), (32,), (32, 10), (10,)]
    assert all(w.dtype == np.float32 for w in weights)


# ---------------------------------------------------------------- evaluate


def test_evaluate_returns_the_five_metrics(mlp_runner: ModelRunner) -> None:
    x, y = _data(3)
    metrics = mlp_runner.evaluate(initial_weights(_spec(), seed=2), x, y)
    assert tuple(metrics) == METRIC_NAMES
    assert 0.0 <= metrics["accuracy"] <= 1.0
    assert metrics["loss"] > 0.0


@pytest.mark.parametrize("n_classes", [10, 2])
def test_evaluate_loss_matches_keras(n_classes: int) -> None:
    spec = _spec(n_classes=n_classes)
    runner = ModelRunner(spec)
    weights = initial_weights(spec, seed=2)
    x, y = _data(3, n_classes=n_classes)
    metrics = runner.evaluate(weights, x, y)
    runner.model.set_weights(weights)
    keras_loss = runner.model.evaluate(x, y, batch_size=len(x), verbose=0)
    assert metrics["loss"] == pytest.approx(float(keras_loss), abs=1e-5)


def test_evaluate_on_empty_data_gives_nans(mlp_runner: ModelRunner) -> None:
    x = np.zeros((0, 28, 28, 1), dtype=np.float32)
    y = np.zeros(0, dtype=np.int32)
    metrics = mlp_runner.evaluate(initial_weights(_spec(), seed=2), x, y)
    assert all(np.isnan(v) for v in metrics.values())


# ---------------------------------------------------------------- local steps


def test_max_steps_stops_training_after_that_many_batches(
    mlp_runner: ModelRunner,
) -> None:
    weights = initial_weights(_spec(), seed=1)
    x, y = _data(3)  # 64 samples, batch 16: 4 steps per epoch
    full = mlp_runner.fit(weights, x, y, epochs=2, batch_size=16, seed=5)
    assert mlp_runner.last_steps == 8
    one = mlp_runner.fit(weights, x, y, epochs=2, batch_size=16, seed=5, max_steps=1)
    assert mlp_runner.last_steps == 1
    five = mlp_runner.fit(weights, x, y, epochs=2, batch_size=16, seed=5, max_steps=5)
    assert mlp_runner.last_steps == 5  # crosses into the second epoch
    assert _differs(one, weights) and _differs(one, five) and _differs(five, full)
    again = mlp_runner.fit(weights, x, y, epochs=2, batch_size=16, seed=5, max_steps=9)
    _assert_bitwise_equal(again, full)  # more steps than batches: all of them


def test_proximal_anchor_pulls_towards_the_given_weights(
    mlp_runner: ModelRunner,
) -> None:
    weights = initial_weights(_spec(), seed=1)
    far = [w + 1.0 for w in weights]
    x, y = _data(3)
    free = mlp_runner.fit(weights, x, y, epochs=1, batch_size=16, seed=5)
    pulled = mlp_runner.fit(
        weights, x, y, epochs=1, batch_size=16, seed=5, proximal_mu=5.0, anchor=far
    )
    # without an anchor the proximal term pulls towards the start: a weaker move
    to_far = sum(float(np.sum((p - f) ** 2)) for p, f in zip(pulled, far, strict=True))
    free_to_far = sum(
        float(np.sum((p - f) ** 2)) for p, f in zip(free, far, strict=True)
    )
    assert to_far < free_to_far


def test_the_training_device_is_named_for_the_log(monkeypatch) -> None:
    import tensorflow as tf

    from fedpipe.model.training import training_device

    if not tf.config.list_physical_devices("GPU"):  # this machine as it is
        assert training_device() == "CPU"

    class Device:
        def __init__(self, name: str) -> None:
            self.name = name

    def visible(n: int):  # what tf.config reports with n GPUs
        return lambda kind: [Device(f"/device:GPU:{i}") for i in range(n)]

    monkeypatch.setattr(tf.config, "list_logical_devices", visible(1))
    assert training_device() == "GPU:0"
    monkeypatch.setattr(tf.config, "list_logical_devices", visible(4))
    assert training_device() == "GPU:0 (of 4 visible)"
    monkeypatch.setattr(tf.config, "list_logical_devices", visible(0))
    assert training_device() == "CPU"


# ---------------------------------------------------------------- the compiled loop


@pytest.mark.parametrize(
    ("n", "epochs", "max_steps", "terms"),
    [
        (70, 2, None, ()),  # 32, 32, 6 | 32, 32, 6: runs of full batches, partials
        (64, 1, None, ()),  # every batch full: one call of the loop
        (70, 3, 4, ("prox",)),  # stopped inside the second epoch; FedProx's term
        (70, 2, None, ("offset",)),  # SCAFFOLD's
        (70, 2, None, ("prox", "offset")),  # FedDyn's both: one call a step
        (20, 2, None, ()),  # one batch an epoch: the step alone
    ],
)
def test_the_compiled_loop_takes_the_steps_one_call_each_would(
    case: tuple[ModelSpec, ModelRunner, Weights],
    n: int,
    epochs: int,
    max_steps: int | None,
    terms: tuple[str, ...],
) -> None:
    # fit runs runs of equal batches in one compiled loop; the reference takes
    # the same steps one call each, as fit did before the loop: the same bits,
    # the same losses
    import tensorflow as tf

    from fedpipe.model.training import batch_indices

    spec, runner, weights = case
    x, y = _data(5, n=n)
    prox, offset = "prox" in terms, "offset" in terms
    kwargs: dict = {}
    if prox:
        kwargs["proximal_mu"] = 0.1
    if offset:
        kwargs["gradient_offset"] = [np.full_like(w, 1e-3) for w in weights]
    got = runner.fit(
        weights, x, y, epochs=epochs, batch_size=32, seed=9, max_steps=max_steps,
        **kwargs,
    )  # fmt: skip
    got_loss = runner.last_train_loss

    runner._reset(weights, 9)
    extra: tuple = ()
    if prox:
        variables = runner.model.trainable_variables
        for slot, value in zip(runner._anchor, variables, strict=True):
            slot.assign(value)
        extra = (tf.constant(0.1, dtype=tf.float32),)
    if offset:
        trainable = runner.trainable_indices()
        for slot, j in zip(runner._offset, trainable, strict=True):
            slot.assign(kwargs["gradient_offset"][j])
    step = runner._step(prox=prox, offset=offset)
    plan = batch_indices(n, epochs=epochs, batch_size=32, seed=9, max_steps=max_steps)
    losses = [float(step(tf.constant(x[r]), tf.constant(y[r]), *extra)) for r in plan]
    want = [np.array(w) for w in runner.model.get_weights()]
    _assert_bitwise_equal(got, want)
    assert runner.last_steps == len(plan)
    assert got_loss == float(np.mean(losses))

"""fedpipe's TensorFlow functions are traced without AutoGraph
(:mod:`fedpipe.model.graph`): the same bits as with it, on every kind of step."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tensorflow as tf

from fedpipe.client.base import RecordDP
from fedpipe.model import cohort, graph, probe, training
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights

Weights = list[np.ndarray]


def _spec(name: str, optimizer: str = "sgd") -> ModelSpec:
    return ModelSpec(
        name=name,
        input_shape=(28, 28, 1),
        n_classes=10,
        optimizer=optimizer,
        lr=0.05 if optimizer == "sgd" else 0.01,
    )


def _data(n: int = 80) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.random((n, 28, 28, 1), dtype=np.float32)
    return x, (np.arange(n) % 10).astype(np.int32)


def _fits(spec: ModelSpec) -> list[Weights]:
    """One fit of each kind of step on a new runner: plain (the last batch
    shorter), proximal with an offset, capped steps (the compiled loop) and
    DP-SGD; plus a prediction."""
    runner = ModelRunner(spec)
    start = initial_weights(spec, seed=1)
    x, y = _data()
    plain = runner.fit(start, x, y, epochs=2, batch_size=32, seed=5)
    offset = [np.full_like(w, 1e-3) for w in start]
    terms = runner.fit(
        start, x, y, epochs=1, batch_size=16, seed=6,
        proximal_mu=0.1, anchor=plain, gradient_offset=offset,
    )  # fmt: skip
    capped = runner.fit(start, x, y, epochs=3, batch_size=16, seed=7, max_steps=9)
    dp = RecordDP(clip_norm=1.0, noise_multiplier=0.5, key=None)
    private = runner.fit(start, x, y, epochs=1, batch_size=16, seed=8, dp=dp)
    probs, losses = runner.predict(plain, x, y)
    return [*plain, *terms, *capped, *private, probs, losses]


@pytest.fixture
def autograph(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``tf.function``'s default (AutoGraph on) wherever fedpipe compiles."""

    def with_autograph(fn, **options):  # noqa: ANN001, ANN003, ANN202
        return tf.function(fn, **options)

    for module in (graph, training, cohort, probe):
        monkeypatch.setattr(module, "compiled", with_autograph)
    yield


@pytest.mark.parametrize(
    ("name", "optimizer"), [("mlp", "sgd"), ("mlp", "adam"), ("seed_cnn", "sgd")]
)
def test_the_same_bits_as_with_autograph(
    name: str, optimizer: str, request: pytest.FixtureRequest
) -> None:
    spec = _spec(name, optimizer)
    without = _fits(spec)
    request.getfixturevalue("autograph")
    with_it = _fits(spec)
    assert len(without) == len(with_it)
    for a, b in zip(without, with_it, strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_a_python_branch_on_a_tensor_fails_when_traced() -> None:
    """What AutoGraph would have rewritten fails loudly, never silently."""

    def branchy(x: tf.Tensor) -> tf.Tensor:
        return x + 1 if x > 0 else x - 1

    with pytest.raises(TypeError, match="as a Python `bool` is not allowed"):
        graph.compiled(branchy)(tf.constant(1.0))

"""Tests for fedpipe.model.probe: dead ReLU units from one forward pass, no side
effects."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.model.probe import dead_unit_shares, relu_probe
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights


def _spec(name: str) -> ModelSpec:
    # seed_cnn has dropout: its random state must not move under the probe
    return ModelSpec(
        name=name, input_shape=(28, 28, 1), n_classes=10, optimizer="sgd", lr=0.05
    )


def _data(n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.random((n, 28, 28, 1), dtype=np.float32)
    return x, (np.arange(n) % 10).astype(np.int32)


@pytest.mark.parametrize("name", ["mlp", "seed_cnn"])
def test_probing_between_fits_changes_no_bit(name: str) -> None:
    runner = ModelRunner(_spec(name))
    weights = initial_weights(runner.spec, seed=1)
    x, y = _data()
    plain = runner.fit(weights, x, y, epochs=1, batch_size=16, seed=3)
    runner.model.set_weights(plain)
    assert dead_unit_shares(runner.model, x) is not None
    held = runner.model.get_weights()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(plain, held, strict=True))
    again = runner.fit(weights, x, y, epochs=1, batch_size=16, seed=3)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(plain, again, strict=True))


def test_a_bias_far_negative_kills_the_layer() -> None:
    runner = ModelRunner(_spec("mlp"))
    weights = initial_weights(runner.spec, seed=1)
    x, _ = _data()
    runner.model.set_weights(weights)
    assert dead_unit_shares(runner.model, x)["hidden"] < 0.5
    dead = [weights[0], np.full_like(weights[1], -50.0), *weights[2:]]
    runner.model.set_weights(dead)
    assert dead_unit_shares(runner.model, x) == {"hidden": 1.0}
    names, _ = relu_probe(runner.model)
    assert names == ["hidden"]  # the output layer (softmax) is not probed


def test_nan_weights_are_broken_not_dead() -> None:
    runner = ModelRunner(_spec("mlp"))
    weights = initial_weights(runner.spec, seed=1)
    runner.model.set_weights([np.full_like(w, np.nan) for w in weights])
    assert dead_unit_shares(runner.model, _data()[0]) == {"hidden": None}

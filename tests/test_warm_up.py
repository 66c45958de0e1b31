"""Tracing the models before the first round (``ModelRunner.warm_up``,
``orchestration.runtime.warm_up``): the first round then traces nothing, and
what it computes has the same bits as without the warm-up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers_store import prepared_store

from fedpipe.data.splits import open_federated
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights

# dropout (layers' seed generators) and Adam (optimizer state): the state a
# warm-up's own fit leaves behind, which a later fit must not see
SPEC = ModelSpec("small_cnn", (12, 12, 1), 3, "adam", 0.01)


def _data(tmp_path: Path):  # type: ignore[no-untyped-def]
    prepared = prepared_store(tmp_path, 240, shape=(12, 12, 1))
    return open_federated(prepared, tmp_path / "manifest.json")


def _trained(runner: ModelRunner, client, weights):  # type: ignore[no-untyped-def]
    trained = runner.fit(
        weights, client.x_train, client.y_train, epochs=2, batch_size=16, seed=7
    )
    probs, losses = runner.predict(trained, client.x_test, client.y_test)
    return trained, probs, losses, runner.last_train_loss


def test_a_warmed_runner_computes_the_same_bits(tmp_path: Path) -> None:
    data = _data(tmp_path)
    weights = initial_weights(SPEC, 0)
    cold = _trained(ModelRunner(SPEC), data.clients[1], weights)
    warm_runner = ModelRunner(SPEC)
    warm_runner.warm_up(data.clients[0].x_train, data.clients[0].y_train, batch_size=16)
    warm = _trained(warm_runner, data.clients[1], weights)
    for a, b in zip(cold[0], warm[0], strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(cold[1], warm[1])
    np.testing.assert_array_equal(cold[2], warm[2])
    assert cold[3] == warm[3]


def test_after_the_warm_up_a_round_traces_nothing(tmp_path: Path) -> None:
    from orchestration import runtime

    data = _data(tmp_path)
    runtime.warm_up(SPEC, data, spares=1, batch_size=16)
    runner = runtime.runner_for(SPEC)  # waits for the warm-up
    spares = runtime.spare_runners(SPEC, 1)
    try:
        assert len(spares) == 1 and runtime.runner_for(SPEC) is runner
        counts = [
            (r._steps[(False, False)].experimental_get_tracing_count(),
             r._predict.experimental_get_tracing_count())
            for r in (runner, *spares)
        ]  # fmt: skip
        assert all(step > 0 and predict > 0 for step, predict in counts)
        weights = initial_weights(SPEC, 0)
        for r in (runner, *spares):
            for client in data.clients:  # other sizes, other last batches
                _trained(r, client, weights)
        assert counts == [
            (r._steps[(False, False)].experimental_get_tracing_count(),
             r._predict.experimental_get_tracing_count())
            for r in (runner, *spares)
        ]  # fmt: skip
    finally:
        with runtime._lock:
            runtime._runners.pop(SPEC, None)
            runtime._spares.pop(SPEC, None)

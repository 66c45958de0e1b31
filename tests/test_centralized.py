"""The centralized baseline: pooled client data, same model, same epochs."""

from __future__ import annotations

import numpy as np

from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import ClientData, FederatedData
from fedpipe.model.centralized import pooled, train_centralized
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights

SPEC = ModelSpec("mlp", (28, 28, 1), 10, "sgd", 0.05)


def _data() -> FederatedData:
    rng = np.random.default_rng(0)

    def split(n: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.random((n, 28, 28, 1), dtype=np.float32)
        return x, ((np.arange(n) + offset) % 10).astype(np.int64)

    clients = []
    for c, n in enumerate((40, 24, 16)):
        x_tr, y_tr = split(n, c)
        x_te, y_te = split(8, c)
        clients.append(ClientData(c, x_tr, y_tr, x_te, y_te))
    x_test, y_test = split(30, 0)
    spec = DatasetSpec(
        name="toy",
        classes=tuple(range(10)),
        input_shape=(28, 28, 1),
        value_range=(0.0, 1.0),
        scale=1.0,
        n_samples=110,
    )
    return FederatedData(spec, x_test, y_test, tuple(clients))


def test_pooled_concatenates_clients_in_order() -> None:
    data = _data()
    x, y = pooled(data)
    assert len(y) == 80
    assert np.array_equal(x[40:64], data.clients[1].x_train)
    assert np.array_equal(y[64:], data.clients[2].y_train)


def test_centralized_training_is_reproducible_and_counts_steps() -> None:
    data, runner = _data(), ModelRunner(SPEC)
    start = initial_weights(SPEC, seed=1)
    a, record = train_centralized(runner, start, data, epochs=2, batch_size=16, seed=3)
    b, _ = train_centralized(runner, start, data, epochs=2, batch_size=16, seed=3)
    assert all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))
    assert record["steps"] == 10 and record["n_train"] == 80  # 2 x ceil(80 / 16)
    assert set(record["global"]) >= {"loss", "accuracy"}
    _, control = train_centralized(
        runner, start, data, epochs=2, batch_size=48, seed=3, steps=1
    )
    assert control["steps"] == 1 and control["batch_size"] == 48

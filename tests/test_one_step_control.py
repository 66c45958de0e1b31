"""The premise of the deeper-models one-step control (docs/deeper-models): one
round of FedAvg in which every client takes one SGD step on an equal share of the
data is one step of large-batch SGD on all of it, with the real ModelRunner and
FedAvg. Batch norm breaks the identity (each client normalizes its own batch),
which the doc gives as a likely reason the federated side came out ahead."""

from __future__ import annotations

import numpy as np

from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.strategy.base import ClientUpdate
from fedpipe.strategy.fedavg import FedAvg

CLIENTS, PER_CLIENT = 5, 16


def _spec(batch_norm: bool) -> ModelSpec:
    settings = {"depth": 2, "width": 4, "head": "flatten", "batch_norm": batch_norm}
    return ModelSpec(
        name="cnn",
        input_shape=(8, 8, 1),
        n_classes=3,
        optimizer="sgd",
        lr=0.5,
        settings=tuple(sorted(settings.items())),
    )


def _one_step_each_way(batch_norm: bool) -> tuple[list, list, list]:
    """Start weights, one-step FedAvg, one large-batch SGD step."""
    spec = _spec(batch_norm)
    rng = np.random.default_rng(7)
    n = CLIENTS * PER_CLIENT
    # each client's rows come from its own shifted distribution, so that
    # per-client batch statistics really differ from the pooled ones
    shift = np.repeat(np.arange(CLIENTS, dtype=np.float32), PER_CLIENT)
    x = rng.random((n, 8, 8, 1), dtype=np.float32) + shift[:, None, None, None]
    y = rng.integers(0, 3, n)
    start = initial_weights(spec, seed=3)
    runner = ModelRunner(spec)
    updates = []
    for k in range(CLIENTS):
        rows = slice(k * PER_CLIENT, (k + 1) * PER_CLIENT)
        trained = runner.fit(
            start, x[rows], y[rows], epochs=1, batch_size=PER_CLIENT, seed=k,
            max_steps=1,
        )  # fmt: skip
        assert runner.last_steps == 1
        updates.append(ClientUpdate(k, trained, PER_CLIENT))
    federated, _ = FedAvg().aggregate_round(start, updates, {})
    central = runner.fit(start, x, y, epochs=1, batch_size=n, seed=0, max_steps=1)
    return start, federated, central


def _trainable(spec: ModelSpec, weights: list) -> list:
    return [weights[j] for j in ModelRunner(spec).trainable_indices()]


def test_one_step_fedavg_of_equal_clients_is_large_batch_sgd() -> None:
    start, federated, central = _one_step_each_way(batch_norm=False)
    pairs = zip(federated, start, strict=True)
    moved = max(float(np.abs(f - s).max()) for f, s in pairs)
    assert moved > 0.1  # the step really trained (0.6 here)
    for f, c in zip(federated, central, strict=True):
        np.testing.assert_allclose(f, c, rtol=0, atol=1e-5)


def test_batch_norm_breaks_the_identity() -> None:
    spec = _spec(batch_norm=True)
    start, federated, central = _one_step_each_way(batch_norm=True)
    pairs = zip(_trainable(spec, federated), _trainable(spec, central), strict=True)
    gaps = [float(np.abs(f - c).max()) for f, c in pairs]
    assert max(gaps) > 1e-3, gaps
    assert all(np.isfinite(g) for g in gaps)

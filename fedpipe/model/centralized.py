"""The centralized baseline: the same model, data and epochs, without federation.

Federated learning is judged against what one model trained on the pooled data
would reach. The baseline starts from the run's initial model (round 0), trains on
the union of every client's training split with the same optimizer, learning rate
and batch size, for as many passes over the data as the federation made
(``rounds x train.epochs``), and is evaluated on the same held-out test set.

The control of the seed paper's experiment is FedAvg with one local step per
round: with every client sampled and equal client sizes, averaging K one-step
updates of batch B is one centralized SGD step on a batch of K x B, so
``steps=rounds, batch_size=K x B`` is its centralized counterpart.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpipe.core.seeds import derive_seed
from fedpipe.data.splits import FederatedData
from fedpipe.model.training import ModelRunner


def pooled(data: FederatedData) -> tuple[np.ndarray, np.ndarray]:
    """Every client's training split, concatenated in client order."""
    x = np.concatenate([c.x_train for c in data.clients])
    y = np.concatenate([c.y_train for c in data.clients])
    return x, y


def train_centralized(
    runner: ModelRunner,
    weights: list[np.ndarray],
    data: FederatedData,
    *,
    epochs: int,
    batch_size: int,
    seed: int,
    steps: int | None = None,
) -> tuple[list[np.ndarray], dict[str, Any]]:
    """Train ``weights`` on the pooled client data; evaluate on the held-out set.

    Parameters
    ----------
    epochs : int
        Passes over the pooled data (the federation's ``rounds x train.epochs``).
    steps : int, optional
        Stop after this many minibatch steps (the one-step control).

    Returns
    -------
    (list of np.ndarray, dict)
        The trained weights, and a record: ``epochs``, ``steps`` taken,
        ``batch_size``, ``n_train`` and ``global`` (held-out metrics).
    """
    x, y = pooled(data)
    trained = runner.fit(
        weights,
        x,
        y,
        epochs=epochs,
        batch_size=batch_size,
        seed=derive_seed(seed, "centralized"),
        max_steps=steps,
    )
    record = {
        "epochs": epochs,
        "steps": runner.last_steps,
        "batch_size": batch_size,
        "n_train": int(len(y)),
        "global": runner.evaluate(trained, data.x_test, data.y_test),
    }
    return trained, record

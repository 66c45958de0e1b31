"""Deliberate faults, to reproduce a failure on purpose (``faults.*`` in params).

A diagnosis is only trusted once it has named a cause that was planted on purpose.
These faults plant, on the user's own data and model, the mistakes that real
federated-learning code makes, so ``fedpipe doctor`` can be seen to name them.
Every fault is off by default (null) and is recorded with the round in
``dvc.lock`` like any other param.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def misweighted_aggregate(
    before: Sequence[np.ndarray], after: Sequence[np.ndarray], weight_sum: float
) -> list[np.ndarray]:
    """The global model as ``sum_k a_k w_k`` with weights summing to ``weight_sum``.

    Hand-written FedAvg code that averages the clients' *weights* with factors that
    do not sum to 1 (a sample count taken from the wrong set, a scaling applied
    twice) multiplies every weight by that sum in every round: the model's scale,
    and with it the confidence of its predictions, grows geometrically, while the
    predicted classes (and so the accuracy) barely change. That is the seed
    question's global loss climbing past 10,000 with every aggregation.

    Parameters
    ----------
    before : list of ndarray
        Global weights before the round (unused by the arithmetic: the correct
        aggregate ``after`` already contains it; kept so the signature says what
        the fault replaces).
    after : list of ndarray
        The strategy's correct aggregate.
    weight_sum : float
        What the faulty aggregation weights add up to.
    """
    del before
    scale = np.float32(weight_sum)
    return [
        (np.asarray(w) * scale).astype(np.asarray(w).dtype)
        if np.issubdtype(np.asarray(w).dtype, np.floating)
        else np.asarray(w)
        for w in after
    ]

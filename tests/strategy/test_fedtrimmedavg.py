"""FedTrimmedAvg against numpy (sort, cut, mean)."""

from __future__ import annotations

import numpy as np
import pytest
from strategy_helpers import updates, weights

from fedpipe.strategy import ClientUpdate, FedTrimmedAvg


def test_default_beta() -> None:
    assert FedTrimmedAvg().beta == 0.2


@pytest.mark.parametrize(
    ("n_clients", "beta", "cut"),
    [(5, 0.2, 1), (4, 0.2, 0), (10, 0.25, 2), (7, 0.0, 0), (3, 0.49, 1)],
)
def test_matches_numpy(n_clients: int, beta: float, cut: int) -> None:
    round_updates = updates(list(range(n_clients)), [1] * n_clients)
    got, _ = FedTrimmedAvg(beta=beta).aggregate_round(weights(0), round_updates, {})
    for k, layer in enumerate(got):
        stacked = np.sort(
            np.stack([u.weights[k].astype(np.float64) for u in round_updates]), axis=0
        )
        want = stacked[cut : n_clients - cut].mean(axis=0).astype(np.float32)
        np.testing.assert_allclose(layer, want, rtol=1e-6, atol=1e-7)


def test_outliers_are_cut_by_hand() -> None:
    values = [1.0, 2.0, 3.0, 1000.0, -1000.0]
    round_updates = [
        ClientUpdate(i, [np.array([v])], 1 + i) for i, v in enumerate(values)
    ]
    got, _ = FedTrimmedAvg(beta=0.2).aggregate_round([np.zeros(1)], round_updates, {})
    # cut one at each end: mean(1, 2, 3) = 2, sample counts ignored
    assert got[0].tolist() == [2.0]

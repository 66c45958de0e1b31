"""FedMedian against numpy's median."""

from __future__ import annotations

import numpy as np
import pytest
from strategy_helpers import updates, weights

from fedpipe.strategy import ClientUpdate, FedMedian


@pytest.mark.parametrize("n_clients", [1, 2, 3, 4, 7])
def test_matches_numpy_median(n_clients: int) -> None:
    round_updates = updates(
        list(range(n_clients)), [1 + 10 * i for i in range(n_clients)]
    )
    got, state = FedMedian().aggregate_round(weights(0), round_updates, {})
    for k, layer in enumerate(got):
        stacked = np.stack([u.weights[k].astype(np.float64) for u in round_updates])
        want = np.median(stacked, axis=0).astype(np.float32)
        np.testing.assert_array_equal(layer, want)
    assert state == {}


def test_by_hand_and_ignores_sample_counts() -> None:
    values = [[1.0, 10.0], [3.0, -5.0], [2.0, 0.0], [100.0, 1.0]]
    round_updates = [
        ClientUpdate(i, [np.array(v)], n) for i, (v, n) in enumerate(
            zip(values, [1, 1, 1, 1000], strict=True))
    ]  # fmt: skip
    got, _ = FedMedian().aggregate_round([np.zeros(2)], round_updates, {})
    # sorted: [1, 2, 3, 100] -> 2.5 ; [-5, 0, 1, 10] -> 0.5
    assert got[0].tolist() == [2.5, 0.5]

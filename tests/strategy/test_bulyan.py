"""Bulyan: recursive Krum picks n - 2f, then the mean of the beta values closest
to the coordinate-wise median."""

from __future__ import annotations

import numpy as np
import pytest
from strategy_helpers import planted

from fedpipe.strategy import AggregationError, Bulyan, ClientUpdate
from fedpipe.strategy.bulyan import bulyan_selection, mean_around_median


def _scalars(values: list[float]) -> list[list[np.ndarray]]:
    return [[np.array([v])] for v in values]


def test_selection_by_hand() -> None:
    # f = 1, n = 7: theta = 5 picks, worked out by hand in the order 2, 3, 1, 4, 0
    # (each step: lowest sum of squared distances to the max(1, m - 3) closest)
    chosen = bulyan_selection(_scalars([0, 1, 2, 3, 4, 5, 100]), 1)
    assert chosen == [0, 1, 2, 3, 4]


def test_mean_of_the_beta_closest_to_the_median_by_hand() -> None:
    # median 2; distances 2, 1, 0, 8, 9: the 3 closest are 2, 1, 0 -> mean 1
    # (a trimmed mean of the same values would give (1 + 2 + 10) / 3)
    got = mean_around_median(_scalars([0, 1, 2, 10, 11]), 3)
    assert got[0].tolist() == [1.0]


def test_two_coordinates_are_treated_apart() -> None:
    updates = [[np.array([0.0, 10.0])], [np.array([1.0, 10.5])], [np.array([9.0, 0.0])]]
    got = mean_around_median(updates, 2)
    # coordinate 0: median 1, closest 1 and 0 -> 0.5; coordinate 1: median 10,
    # closest 10 and 10.5 -> 10.25
    np.testing.assert_array_equal(got[0], [0.5, 10.25])


def test_planted_outliers_are_left_out() -> None:
    items = planted()  # 5 honest near 0, 2 outliers at 100
    start = [np.zeros((3, 2)), np.zeros(4)]
    with pytest.raises(AggregationError, match="strategy.num_byzantine = 2"):
        Bulyan(num_byzantine=2).aggregate_round(start, items, {})
    got, state = Bulyan(num_byzantine=1).aggregate_round(start, items, {})
    assert state == {}
    assert all(np.all(np.abs(w) < 0.1) for w in got)


def test_zero_byzantine_is_the_plain_mean() -> None:
    items = [ClientUpdate(c, [np.array([float(c), 2.0 * c])], 1 + c) for c in range(4)]
    got, _ = Bulyan().aggregate_round([np.zeros(2)], items, {})
    np.testing.assert_allclose(got[0], [1.5, 3.0])


def test_too_few_updates_name_the_key() -> None:
    items = [ClientUpdate(c, [np.array([float(c)])], 1) for c in range(6)]
    with pytest.raises(AggregationError, match=r"4 \* 1 \+ 3 = 7 .* got 6"):
        Bulyan(num_byzantine=1).aggregate_round([np.zeros(1)], items, {})

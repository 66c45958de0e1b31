"""Multi-Krum: the sample-weighted mean of the lowest-scoring updates."""

from __future__ import annotations

import numpy as np
import pytest
from strategy_helpers import planted

from fedpipe.strategy import AggregationError, MultiKrum, make_strategy
from fedpipe.strategy.aggregate import weighted_average

START = [np.zeros((3, 2)), np.zeros(4)]


def test_default_averages_the_n_minus_f_honest_updates() -> None:
    items = planted()
    got, _ = MultiKrum(num_byzantine=2).aggregate_round(START, items, {})
    honest = items[:5]
    want = weighted_average([u.weights for u in honest], [u.n_samples for u in honest])
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert float(np.max(np.abs(got[0]))) < 0.1


def test_one_selected_is_krum() -> None:
    items = planted(5)
    multi, _ = MultiKrum(num_byzantine=2, num_selected=1).aggregate_round(
        START, items, {}
    )
    single, _ = make_strategy("krum", num_byzantine=2).aggregate_round(START, items, {})
    for a, b in zip(multi, single, strict=True):
        np.testing.assert_array_equal(a, b)


def test_selected_more_than_updates_names_the_key() -> None:
    with pytest.raises(AggregationError, match=r"strategy\.num_selected = 9"):
        MultiKrum(num_selected=9).aggregate_round(START, planted(), {})


def test_num_selected_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match=r"strategy\.num_selected: 0 .*>= 1"):
        MultiKrum(num_selected=0)
    assert MultiKrum().num_selected is None

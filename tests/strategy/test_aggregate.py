"""The pure aggregation math in fedpipe.strategy.aggregate."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.strategy.aggregate import (
    AggregationError,
    cast_like,
    coordinate_median,
    differences,
    krum_scores,
    lowest,
    mean,
    pairwise_squared_distances,
    pseudo_gradient,
    trimmed_mean,
    weighted_average,
)


def _w(*values: float) -> list[np.ndarray]:
    return [np.array(values, dtype=np.float64)]


def test_weighted_average_returns_identical_inputs_exactly() -> None:
    # 0.1 * 3 is not 0.3 in floating point; the mean around the first update is
    x = [np.array([0.1, 1 / 3, 1e10 + 0.7])]
    got = weighted_average([x, x, x], [1, 1, 1], cast=False)
    assert got[0].tobytes() == x[0].tobytes()


def test_weighted_average_can_stay_float64() -> None:
    a = [np.array([1.0], dtype=np.float32)]
    b = [np.array([2.0], dtype=np.float32)]
    assert weighted_average([a, b], [1, 2], cast=False)[0].dtype == np.float64
    assert weighted_average([a, b], [1, 2])[0].dtype == np.float32


def test_a_zero_weight_first_client_does_not_shift_the_mean() -> None:
    far = _w(1e12)
    a, b = _w(0.1), _w(0.7)
    with_zero = weighted_average([far, a, b], [0, 1, 3], cast=False)
    without = weighted_average([a, b], [1, 3], cast=False)
    assert with_zero[0].tobytes() == without[0].tobytes()


def test_mean_is_unweighted() -> None:
    assert mean([_w(1.0, 2.0), _w(3.0, 6.0)])[0].tolist() == [2.0, 4.0]


def test_pseudo_gradient_is_global_minus_aggregate() -> None:
    g = pseudo_gradient(_w(1.0, 5.0), _w(0.25, 6.0))
    assert g[0].tolist() == [0.75, -1.0]
    assert g[0].dtype == np.float64


def test_differences_are_update_minus_reference() -> None:
    d = differences([_w(3.0), _w(-1.0)], _w(1.0))
    assert [x[0].tolist() for x in d] == [[2.0], [-2.0]]


def test_pseudo_gradient_checks_layout() -> None:
    with pytest.raises(AggregationError, match="layer 0"):
        pseudo_gradient(_w(1.0, 2.0), _w(1.0))


def test_cast_like_copies_to_reference_dtypes() -> None:
    ref = [np.zeros(1, np.float32), np.zeros(1, np.float16)]
    src = [np.array([1.5]), np.array([2.5])]
    out = cast_like(src, ref)
    assert [o.dtype for o in out] == [np.float32, np.float16]
    assert not np.shares_memory(out[0], src[0])


def test_median_and_trimmed_mean_by_hand() -> None:
    items = [_w(v) for v in (5.0, -100.0, 1.0, 3.0, 200.0)]
    assert coordinate_median(items)[0].tolist() == [3.0]
    # beta 0.2 of 5 -> cut 1 each end: (1 + 3 + 5) / 3
    assert trimmed_mean(items, 0.2)[0].tolist() == [3.0]
    assert trimmed_mean(items, 0.0)[0].tolist() == [pytest.approx(21.8)]


def test_trimmed_mean_rejects_beta_out_of_range() -> None:
    with pytest.raises(AggregationError, match=r"beta must be in \[0, 0.5\)"):
        trimmed_mean([_w(1.0)], 0.5)


def test_pairwise_distances_are_exact_and_symmetric() -> None:
    items = [_w(0.0, 0.0), _w(3.0, 4.0), _w(0.0, 0.0)]
    d = pairwise_squared_distances(items)
    assert d.tolist() == [[0.0, 25.0, 0.0], [25.0, 0.0, 25.0], [0.0, 25.0, 0.0]]


def test_krum_scores_by_hand() -> None:
    # points 0, 1, 3, 10 on a line, f = 0: n - f - 2 = 2 nearest neighbours
    items = [_w(v) for v in (0.0, 1.0, 3.0, 10.0)]
    # 0: 1 + 9 ; 1: 1 + 4 ; 3: 4 + 9 ; 10: 49 + 81
    assert krum_scores(items, 0).tolist() == [10.0, 5.0, 13.0, 130.0]
    assert lowest(krum_scores(items, 0), 2) == [1, 0]


def test_krum_scores_need_more_than_2f_plus_2() -> None:
    with pytest.raises(AggregationError, match=r"more than 2f \+ 2 = 4"):
        krum_scores([_w(0.0)] * 4, 1)


def test_lowest_breaks_ties_by_index() -> None:
    assert lowest(np.array([2.0, 1.0, 1.0, 0.5]), 3) == [3, 1, 2]
    with pytest.raises(AggregationError):
        lowest(np.array([1.0]), 2)

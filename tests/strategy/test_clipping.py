"""Clipping: FedAvg of the updates clipped to a fixed or an adaptive L2 bound."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.strategy import ClientUpdate, Clipping, make_strategy
from fedpipe.strategy.clipping import clipped, update_norm

START = [np.zeros(2)]


def _updates() -> list[ClientUpdate]:
    # deltas (3, 4), (0, 1), (30, 40): norms 5, 1, 50; weights 1, 1, 2
    return [
        ClientUpdate(0, [np.array([3.0, 4.0])], 1),
        ClientUpdate(1, [np.array([0.0, 1.0])], 1),
        ClientUpdate(2, [np.array([30.0, 40.0])], 2),
    ]


def test_adaptive_bound_is_the_median_norm_by_hand() -> None:
    # C = 5: clipped (3, 4), (0, 1), (3, 4); (1 (3,4) + 1 (0,1) + 2 (3,4)) / 4
    got, state = Clipping().aggregate_round(START, _updates(), {})
    np.testing.assert_allclose(got[0], [2.25, 3.25])
    assert state == {}


def test_fixed_bound_by_hand() -> None:
    # C = 1: (0.6, 0.8), (0, 1), (0.6, 0.8) -> (1.8, 3.4) / 4
    got, _ = Clipping(clip_norm=1.0).aggregate_round(START, _updates(), {})
    np.testing.assert_allclose(got[0], [0.45, 0.85])


def test_quantile_bound() -> None:
    strategy = Clipping(clip_quantile=1.0)  # the largest norm: nothing is clipped
    got, _ = strategy.aggregate_round(START, _updates(), {})
    np.testing.assert_allclose(got[0], [(3 + 0 + 60) / 4, (4 + 1 + 80) / 4])
    assert strategy.bound([1.0, 5.0, 50.0]) == 50.0


def test_deltas_are_taken_from_the_global_weights() -> None:
    start = [np.array([10.0, 10.0])]
    moved = [
        ClientUpdate(u.client, [u.weights[0] + 10.0], u.n_samples) for u in _updates()
    ]
    got, _ = Clipping().aggregate_round(start, moved, {})
    np.testing.assert_allclose(got[0], [12.25, 13.25])


def test_clipped_spans_layers() -> None:
    delta = [np.array([3.0]), np.array([[4.0]])]
    assert update_norm(delta) == 5.0
    out = clipped(delta, 2.5)
    assert out[0].tolist() == [1.5] and out[1].tolist() == [[2.0]]
    assert clipped(delta, 5.0)[0] is delta[0]


@pytest.mark.parametrize(
    ("settings", "key"),
    [({"clip_norm": 0.0}, "strategy.clip_norm"),
     ({"clip_norm": -1.0}, "strategy.clip_norm"),
     ({"clip_quantile": 1.5}, "strategy.clip_quantile")],
)  # fmt: skip
def test_bad_settings_name_the_key(settings: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        make_strategy("clipping", **settings)

"""Krum: the update closest to its n - f - 2 nearest neighbours wins."""

from __future__ import annotations

import numpy as np
import pytest
from strategy_helpers import planted

from fedpipe.strategy import AggregationError, ClientUpdate, Krum, make_strategy
from fedpipe.strategy.aggregate import krum_scores


def _brute_force_scores(items: list[ClientUpdate], f: int) -> list[float]:
    flat = [np.concatenate([w.ravel() for w in u.weights]) for u in items]
    n = len(flat)
    scores = []
    for i in range(n):
        d = sorted(float(np.sum((flat[i] - flat[j]) ** 2)) for j in range(n) if j != i)
        scores.append(sum(d[: n - f - 2]))
    return scores


def test_selects_an_honest_update_among_planted_outliers() -> None:
    items = planted()
    start = [np.zeros((3, 2)), np.zeros(4)]
    got, state = Krum(num_byzantine=2).aggregate_round(start, items, {})
    scores = _brute_force_scores(items, f=2)
    best = int(np.argmin(scores))
    assert best < 5
    for layer, want in zip(got, items[best].weights, strict=True):
        np.testing.assert_array_equal(layer, want)
    assert state == {}


def test_scores_match_the_definition() -> None:
    items = planted(3)
    np.testing.assert_allclose(
        krum_scores([u.weights for u in items], 2),
        _brute_force_scores(items, 2),
        rtol=1e-12,
    )


def test_ties_go_to_the_lowest_client_id() -> None:
    same = [np.ones(2)]
    items = [ClientUpdate(c, [same[0] * 1.0], 1) for c in (8, 3, 5)]
    items.append(ClientUpdate(1, [np.array([50.0, 50.0])], 1))
    # clients 3, 5, 8 all score 0 with f = 0 (n - 2 = 2 nearest are the others)
    ranking = Krum().ranked(sorted(items, key=lambda u: u.client))
    assert ranking[0] == 1  # index of client 3 in client-id order [1, 3, 5, 8]


@pytest.mark.parametrize(("n", "f"), [(6, 2), (4, 1), (2, 0)])
def test_too_few_updates_for_num_byzantine_names_the_key(n: int, f: int) -> None:
    items = planted()[:n]
    with pytest.raises(AggregationError, match=r"strategy\.num_byzantine = \d"):
        make_strategy("krum", num_byzantine=f).aggregate_round(
            [np.zeros((3, 2)), np.zeros(4)], items, {}
        )


def test_num_byzantine_must_be_a_non_negative_integer() -> None:
    with pytest.raises(ValueError, match=r"strategy\.num_byzantine: -1 .*>= 0"):
        Krum(num_byzantine=-1)
    with pytest.raises(ValueError, match=r"strategy\.num_byzantine: 1\.5 is not an"):
        Krum(num_byzantine=1.5)

"""FedNova (Wang et al., 2020) against its update rule computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.strategy import AggregationError, ClientUpdate, make_strategy
from fedpipe.strategy.aggregate import weighted_average

SHAPES = [(3, 2), (4,)]


def _weights(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s) for s in SHAPES]  # float64


def _aggregate(start, updates):
    strategy = make_strategy("fednova")
    new, state = strategy.aggregate_round(start, updates, strategy.init_state(start))
    assert state == {}
    return new


def _paper_rule(start, client_weights, n, tau):
    """Wang et al. 2020, eq. 7 with local SGD (a_i = 1): written out per client."""
    p = [n_i / sum(n) for n_i in n]
    tau_eff = sum(p_i * t for p_i, t in zip(p, tau, strict=True))
    out = []
    for layer, w in enumerate(start):
        d = sum(
            p_i * (w - w_i[layer]) / t
            for p_i, w_i, t in zip(p, client_weights, tau, strict=True)
        )
        out.append(w - tau_eff * d)
    return out


def test_matches_the_paper_rule_on_fixed_inputs() -> None:
    start = _weights(0)
    client_weights = [_weights(s) for s in (1, 2, 3, 4)]
    n, tau = [40, 10, 25, 5], [12, 3, 7, 1]
    updates = [
        ClientUpdate(c, w, n_i, steps=t)
        for c, (w, n_i, t) in enumerate(zip(client_weights, n, tau, strict=True))
    ]
    got = _aggregate(start, updates)
    want = _paper_rule(start, client_weights, n, tau)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=0, atol=1e-12)
    # and the rule is not FedAvg here
    fedavg = weighted_average(client_weights, n)
    assert max(np.abs(g - f).max() for g, f in zip(got, fedavg, strict=True)) > 0.1


def test_equal_local_steps_are_fedavg() -> None:
    start = _weights(0)
    client_weights = [_weights(s) for s in (5, 6, 7)]
    n = [30, 7, 12]
    updates = [
        ClientUpdate(c, w, n_i, steps=9)
        for c, (w, n_i) in enumerate(zip(client_weights, n, strict=True))
    ]
    got = _aggregate(start, updates)
    fedavg = weighted_average(client_weights, n)
    for g, f in zip(got, fedavg, strict=True):
        np.testing.assert_allclose(g, f, rtol=0, atol=1e-12)


def test_a_client_that_ran_fewer_steps_is_not_under_weighted() -> None:
    """Two clients of equal size move at one unit per step along their own axis;
    client 1 (a straggler) ran a quarter of client 0's steps. Weighting updates by
    n_i alone (FedAvg) moves 4x further along client 0's axis; FedNova moves along
    both axes equally (p_i = 1/2 each), tau_eff = 2.5 steps."""
    start = [np.zeros(2)]
    updates = [
        ClientUpdate(0, [np.array([-4.0, 0.0])], 50, steps=4),
        ClientUpdate(1, [np.array([0.0, -1.0])], 50, steps=1),
    ]
    (got,) = _aggregate(start, updates)
    np.testing.assert_allclose(got, [-1.25, -1.25], rtol=0, atol=1e-12)
    (fedavg,) = weighted_average([u.weights for u in updates], [50, 50])
    np.testing.assert_allclose(fedavg, [-2.0, -0.5], rtol=0, atol=1e-12)


def test_sample_shares_still_weight_the_directions() -> None:
    start = [np.zeros(2)]
    updates = [
        ClientUpdate(0, [np.array([-3.0, 0.0])], 30, steps=3),
        ClientUpdate(1, [np.array([0.0, -2.0])], 10, steps=2),
    ]
    (got,) = _aggregate(start, updates)
    # p = (3/4, 1/4), d = (3/4, 1/4), tau_eff = 3/4 * 3 + 1/4 * 2 = 2.75
    np.testing.assert_allclose(got, [-2.0625, -0.6875], rtol=0, atol=1e-12)


def test_a_client_that_took_no_step_adds_nothing() -> None:
    start = _weights(0)
    moved = ClientUpdate(0, _weights(1), 20, steps=5)
    still = ClientUpdate(1, [w.copy() for w in start], 20, steps=0)
    got = _aggregate(start, [moved, still])
    # d = 1/2 d_0, tau_eff = 5/2: half of client 0's update
    for g, w, w0 in zip(got, start, moved.weights, strict=True):
        np.testing.assert_allclose(g, w - 0.25 * (w - w0), rtol=0, atol=1e-12)


def test_float32_models_come_back_float32() -> None:
    start = [w.astype(np.float32) for w in _weights(0)]
    updates = [
        ClientUpdate(
            c, [w.astype(np.float32) for w in _weights(c + 1)], 10, steps=c + 1
        )
        for c in range(3)
    ]
    got = _aggregate(start, updates)
    assert [g.dtype for g in got] == [np.float32, np.float32]


def test_an_update_without_steps_is_refused_naming_the_client() -> None:
    start = _weights(0)
    updates = [
        ClientUpdate(0, _weights(1), 10, steps=3),
        ClientUpdate(4, _weights(2), 10),
    ]
    with pytest.raises(AggregationError, match="client 4 did not report its local"):
        _aggregate(start, updates)


def test_negative_steps_are_refused() -> None:
    start = _weights(0)
    with pytest.raises(AggregationError, match="client 2 reports steps = -1"):
        _aggregate(start, [ClientUpdate(2, _weights(1), 10, steps=-1)])

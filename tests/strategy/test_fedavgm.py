"""FedAvgM: server momentum on the FedAvg pseudo-gradient."""

from __future__ import annotations

import numpy as np
import pytest
from strategy_helpers import updates, weights

from fedpipe.strategy import ClientUpdate, FedAvg, FedAvgM


def test_defaults() -> None:
    s = FedAvgM()
    assert (s.server_lr, s.server_momentum) == (1.0, 0.9)
    assert s.state_names == ("momentum",)


def test_without_momentum_and_unit_rate_it_is_fedavg() -> None:
    start = weights(0, dtype=np.float64)
    fedavg, fedavgm = FedAvg(), FedAvgM(server_lr=1.0, server_momentum=0.0)
    state = fedavgm.init_state(start)
    w_avg, w_avgm = start, start
    for r in range(3):
        round_updates = updates([1, 4, 6], [10, 30, 60 + r], dtype=np.float64)
        w_avg, _ = fedavg.aggregate_round(w_avg, round_updates, {})
        w_avgm, state = fedavgm.aggregate_round(w_avgm, round_updates, state)
        for a, b in zip(w_avgm, w_avg, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-14, atol=1e-15)


def test_two_rounds_by_hand() -> None:
    # eta = 0.5, beta = 0.9, w0 = 1
    # r1: clients 0 (n=1), 2 (n=1): mean 0 -> g1 = 1, v1 = 1, w1 = 1 - 0.5 = 0.5
    # r2: client 0.25: g2 = 0.25, v2 = 0.9 + 0.25 = 1.15, w2 = 0.5 - 0.575 = -0.075
    s = FedAvgM(server_lr=0.5, server_momentum=0.9)
    w = [np.array([1.0])]
    state = s.init_state(w)
    w, state = s.aggregate_round(
        w,
        [ClientUpdate(0, [np.array([-1.0])], 1), ClientUpdate(1, [np.array([1.0])], 1)],
        state,
    )
    assert w[0][0] == pytest.approx(0.5, rel=1e-15)
    assert state["momentum/000"][0] == pytest.approx(1.0, rel=1e-15)
    w, state = s.aggregate_round(w, [ClientUpdate(3, [np.array([0.25])], 7)], state)
    assert w[0][0] == pytest.approx(-0.075, rel=1e-13)
    assert state["momentum/000"][0] == pytest.approx(1.15, rel=1e-14)

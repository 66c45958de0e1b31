"""FedAdagrad against Reddi et al.'s Algorithm 2 written out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpipe.strategy import ClientUpdate, FedAdagrad


def _update(client: int, values: list[float], n: int) -> ClientUpdate:
    return ClientUpdate(client, [np.array(values, dtype=np.float64)], n)


def test_defaults_follow_flower() -> None:
    s = FedAdagrad()
    assert (s.server_lr, s.beta_1, s.tau) == (0.1, 0.0, 1e-9)
    assert "beta_2" not in s.settings


def test_one_round_by_hand() -> None:
    # w0 = [1, 2]; clients [2, 2] (n=1), [4, 1] (n=3): mean [3.5, 1.25]
    # delta = [2.5, -0.75]; beta_1 = 0: m = delta; v = delta^2
    # w1 = w0 + 0.1 * delta / (|delta| + 1e-9)
    s = FedAdagrad()
    w0 = [np.array([1.0, 2.0])]
    w1, state = s.aggregate_round(
        w0, [_update(0, [2.0, 2.0], 1), _update(1, [4.0, 1.0], 3)], s.init_state(w0)
    )
    want = [1.0 + 0.1 * 2.5 / (2.5 + 1e-9), 2.0 - 0.1 * 0.75 / (0.75 + 1e-9)]
    np.testing.assert_allclose(w1[0], want, rtol=1e-15)
    np.testing.assert_allclose(state["m/000"], [2.5, -0.75], rtol=1e-15)
    np.testing.assert_allclose(state["v/000"], [6.25, 0.5625], rtol=1e-15)


def test_second_round_accumulates_squares() -> None:
    eta, b1, tau = 0.2, 0.5, 1e-3
    s = FedAdagrad(server_lr=eta, beta_1=b1, tau=tau)
    w, m, v = 0.0, 0.0, 0.0
    weights = [np.array([w])]
    state = s.init_state(weights)
    for target in (1.0, -0.5):
        weights, state = s.aggregate_round(weights, [_update(0, [target], 1)], state)
        delta = target - w
        m = b1 * m + (1 - b1) * delta
        v = v + delta**2
        w = w + eta * m / (math.sqrt(v) + tau)
        assert weights[0][0] == pytest.approx(w, rel=1e-14)
        assert state["v/000"][0] == pytest.approx(v, rel=1e-14)

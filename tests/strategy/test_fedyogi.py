"""FedYogi against Reddi et al.'s Algorithm 2 written out by hand."""

from __future__ import annotations

import math

import numpy as np

from fedpipe.strategy import ClientUpdate, FedAdam, FedYogi


def _update(client: int, values: list[float], n: int) -> ClientUpdate:
    return ClientUpdate(client, [np.array(values, dtype=np.float64)], n)


def _sign(x: float) -> float:
    return (x > 0) - (x < 0)


def test_defaults_follow_flower() -> None:
    s = FedYogi()
    assert (s.server_lr, s.beta_1, s.beta_2, s.tau) == (0.01, 0.9, 0.99, 1e-3)


def test_two_rounds_against_the_update_formulas() -> None:
    eta, b1, b2, tau = 0.5, 0.9, 0.9, 1e-3
    s = FedYogi(server_lr=eta, beta_1=b1, beta_2=b2, tau=tau)
    w = [1.0, -2.0]
    # round 2: coordinate 0 moves a little (v1 > delta^2: v shrinks),
    # coordinate 1 a lot (v1 < delta^2: v grows)
    rounds = [
        [[3.0, -1.0], [1.0, -1.0]],
        [[1.17, 3.0], [1.15, 5.0]],
    ]
    m = [0.0, 0.0]
    v = [0.0, 0.0]
    weights = [np.array(w)]
    state = s.init_state(weights)
    signs = []
    for client_values in rounds:
        round_updates = [_update(i, vals, 1) for i, vals in enumerate(client_values)]
        weights, state = s.aggregate_round(weights, round_updates, state)
        for k in range(2):
            mean = sum(vals[k] for vals in client_values) / len(client_values)
            delta = mean - w[k]
            m[k] = b1 * m[k] + (1 - b1) * delta
            signs.append(_sign(v[k] - delta**2))
            v[k] = v[k] - (1 - b2) * delta**2 * _sign(v[k] - delta**2)
            w[k] = w[k] + eta * m[k] / (math.sqrt(v[k]) + tau)
        np.testing.assert_allclose(weights[0], w, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(state["m/000"], m, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(state["v/000"], v, rtol=1e-13, atol=1e-15)
    assert signs[2:] == [1, -1], "fixture must exercise both signs in round 2"


def test_first_round_equals_fedadam() -> None:
    # from v0 = 0: yogi's v1 = (1 - b2) delta^2 = adam's v1
    w0 = [np.array([0.3, -0.7])]
    round_updates = [_update(0, [1.0, 2.0], 3), _update(1, [-1.0, 0.5], 1)]
    yogi, adam = FedYogi(server_lr=0.1), FedAdam(server_lr=0.1)
    wy, sy = yogi.aggregate_round(w0, round_updates, yogi.init_state(w0))
    wa, sa = adam.aggregate_round(w0, round_updates, adam.init_state(w0))
    np.testing.assert_array_equal(wy[0], wa[0])
    np.testing.assert_array_equal(sy["v/000"], sa["v/000"])

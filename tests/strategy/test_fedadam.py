"""FedAdam against Reddi et al.'s Algorithm 2 written out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpipe.strategy import ClientUpdate, FedAdam


def _update(client: int, values: list[float], n: int) -> ClientUpdate:
    return ClientUpdate(client, [np.array(values, dtype=np.float64)], n)


def test_defaults() -> None:
    s = FedAdam()
    assert (s.server_lr, s.beta_1, s.beta_2, s.tau) == (0.1, 0.9, 0.99, 1e-3)
    assert s.client_settings() == {}


def test_first_round_by_hand() -> None:
    # w0 = 1; clients 1.5 (n=1) and 0.5 (n=3): mean 0.75, delta = -0.25
    # m1 = 0.1 * -0.25 = -0.025 ; v1 = 0.01 * 0.0625 = 0.000625 ; sqrt(v1) = 0.025
    # w1 = 1 + 0.1 * -0.025 / (0.025 + 0.001) = 1 - 0.0025 / 0.026
    s = FedAdam()
    w0 = [np.array([1.0])]
    w1, state = s.aggregate_round(
        w0, [_update(0, [1.5], 1), _update(1, [0.5], 3)], s.init_state(w0)
    )
    assert w1[0][0] == pytest.approx(1 - 0.0025 / 0.026, rel=1e-14)
    assert state["m/000"][0] == pytest.approx(-0.025, rel=1e-14)
    assert state["v/000"][0] == pytest.approx(0.000625, rel=1e-14)


def test_two_rounds_against_the_update_formulas() -> None:
    eta, b1, b2, tau = 0.3, 0.8, 0.95, 1e-2
    s = FedAdam(server_lr=eta, beta_1=b1, beta_2=b2, tau=tau)
    w = [1.0, -2.0, 0.5]
    rounds = [
        ([[1.5, -2.0, 0.0], [0.5, -1.0, 1.0]], [1, 3]),
        ([[0.0, 0.0, 0.0], [2.0, -4.0, 0.5], [1.0, 1.0, 1.0]], [2, 1, 1]),
    ]
    m = [0.0, 0.0, 0.0]
    v = [0.0, 0.0, 0.0]
    weights = [np.array(w)]
    state = s.init_state(weights)
    for client_values, counts in rounds:
        round_updates = [
            _update(i, vals, n)
            for i, (vals, n) in enumerate(zip(client_values, counts, strict=True))
        ]
        weights, state = s.aggregate_round(weights, round_updates, state)
        total = sum(counts)
        for k in range(3):
            mean = (
                sum(n * vals[k] for vals, n in zip(client_values, counts, strict=True))
                / total
            )
            delta = mean - w[k]
            m[k] = b1 * m[k] + (1 - b1) * delta
            v[k] = b2 * v[k] + (1 - b2) * delta**2
            w[k] = w[k] + eta * m[k] / (math.sqrt(v[k]) + tau)
        np.testing.assert_allclose(weights[0], w, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(state["m/000"], m, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(state["v/000"], v, rtol=1e-13, atol=1e-15)


def test_step_is_about_eta_times_sign_on_the_first_round() -> None:
    # with tau -> 0: m1 / sqrt(v1) = (1 - b1) / sqrt(1 - b2) * sign(delta)
    s = FedAdam(server_lr=1.0, tau=1e-12)
    w0 = [np.zeros(2, dtype=np.float32)]
    w1, _ = s.aggregate_round(w0, [_update(0, [3.0, -1e-3], 1)], s.init_state(w0))
    np.testing.assert_allclose(w1[0], [1.0, -1.0], rtol=1e-6)
    assert w1[0].dtype == np.float32


def test_first_step_is_larger_than_flowers_by_its_bias_correction() -> None:
    # Flower 1.42's FedAdam scales eta by sqrt(1 - b2^(t+1)) / (1 - b1^(t+1)) in
    # server round t (1-based); Reddi et al.'s Algorithm 2, followed here, does not
    s = FedAdam()
    b1, b2, eta, tau = s.beta_1, s.beta_2, s.server_lr, s.tau
    w0 = [np.array([1.0, -1.0])]
    updates = [_update(0, [1.5, -0.5], 1), _update(1, [0.5, -1.5], 3)]
    w1, _ = s.aggregate_round(w0, updates, s.init_state(w0))
    delta = np.array([0.75 - 1.0, -1.25 + 1.0])  # mean minus w0
    m, v = (1 - b1) * delta, (1 - b2) * delta**2
    flower_eta = eta * math.sqrt(1 - b2**2) / (1 - b1**2)
    flower_step = flower_eta * m / (np.sqrt(v) + tau)
    ratio = (w1[0] - w0[0]) / flower_step
    assert ratio == pytest.approx([1.3468, 1.3468], rel=1e-4)

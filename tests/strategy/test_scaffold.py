"""Scaffold's server update against Karimireddy et al.'s formulas."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.strategy import AggregationError, ClientUpdate, Scaffold, make_strategy


def _update(client: int, y: list[float], dc: list[float], n: int = 1) -> ClientUpdate:
    return ClientUpdate(client, [np.array(y)], n, {"control_delta": [np.array(dc)]})


def test_total_clients_is_required() -> None:
    with pytest.raises(ValueError, match=r"strategy\.total_clients: required"):
        make_strategy("scaffold")
    with pytest.raises(ValueError, match=r"strategy\.total_clients: 0 .*>= 1"):
        Scaffold(total_clients=0)
    assert Scaffold(total_clients=3).server_lr == 1.0


def test_two_rounds_against_the_formulas() -> None:
    # N = 4, eta_g = 0.5
    # r1: w0 = [1, 0]; clients 0, 2 send y = [3, 0], [1, 4] (sample counts ignored)
    #   mean(y - w0) = [1, 2] -> w1 = [1.5, 1]
    #   dc = [1, -1], [3, 1]: mean [2, 0] -> c1 = 0 + 2/4 * [2, 0] = [1, 0]
    # r2: client 3 alone: y = [0.5, 1], dc = [-4, 8]
    #   w2 = [1.5, 1] + 0.5 * [-1, 0] = [1, 1] ; c2 = [1, 0] + 1/4 * [-4, 8] = [0, 2]
    s = Scaffold(server_lr=0.5, total_clients=4)
    w = [np.array([1.0, 0.0])]
    state = s.init_state(w)
    assert s.server_control(state)[0].tolist() == [0.0, 0.0]
    w, state = s.aggregate_round(
        w, [_update(2, [1, 4], [3, 1], 100), _update(0, [3, 0], [1, -1], 1)], state
    )
    assert w[0].tolist() == [1.5, 1.0]
    assert s.server_control(state)[0].tolist() == [1.0, 0.0]
    w, state = s.aggregate_round(w, [_update(3, [0.5, 1], [-4, 8])], state)
    assert w[0].tolist() == [1.0, 1.0]
    assert s.server_control(state)[0].tolist() == [0.0, 2.0]


def test_server_control_is_a_copy() -> None:
    s = Scaffold(total_clients=2)
    state = s.init_state([np.zeros(3)])
    s.server_control(state)[0][:] = 5.0
    assert not np.any(state["c/000"])


def test_missing_control_delta_names_the_client() -> None:
    s = Scaffold(total_clients=4)
    w = [np.zeros(2)]
    items = [_update(0, [1, 1], [0, 0]), ClientUpdate(3, [np.ones(2)], 1)]
    with pytest.raises(AggregationError, match=r"client 3 sent no extras\['control"):
        s.aggregate_round(w, items, s.init_state(w))


def test_non_finite_control_delta_names_the_client() -> None:
    s = Scaffold(total_clients=4)
    w = [np.zeros(2)]
    items = [_update(1, [1, 1], [0, np.nan])]
    with pytest.raises(AggregationError, match=r"client 1 .* of extras\['control_d"):
        s.aggregate_round(w, items, s.init_state(w))


def test_control_delta_shape_is_checked() -> None:
    s = Scaffold(total_clients=4)
    w = [np.zeros(2)]
    items = [_update(1, [1, 1], [0, 0, 0])]
    with pytest.raises(AggregationError, match=r"client 1: layer 0 of extras"):
        s.aggregate_round(w, items, s.init_state(w))


def test_client_outside_total_clients_is_refused() -> None:
    s = Scaffold(total_clients=2)
    w = [np.zeros(2)]
    with pytest.raises(AggregationError, match=r"client 2 is outside strategy\.tot"):
        s.aggregate_round(w, [_update(2, [1, 1], [0, 0])], s.init_state(w))

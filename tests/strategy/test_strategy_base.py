"""The checks aggregate_round makes before and after any strategy's math."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from strategy_helpers import updates, weights

from fedpipe.strategy import AggregationError, ClientUpdate, FedAvg, FedAvgM, Strategy
from fedpipe.strategy.base import State, pack_state, state_arrays, state_key


def test_client_update_extras_default_to_empty() -> None:
    assert ClientUpdate(0, weights(0), 1).extras == {}


def test_state_names_are_prefix_slash_layer() -> None:
    assert state_key("m", 3) == "m/003"
    state = pack_state(m=[np.zeros(1), np.ones(2)], v=[np.ones(1), np.zeros(2)])
    assert sorted(state) == ["m/000", "m/001", "v/000", "v/001"]
    assert [a.tolist() for a in state_arrays(state, "m", 2)] == [[0.0], [1.0, 1.0]]


def test_two_updates_from_one_client_are_refused() -> None:
    items = updates([1, 2, 1], [5, 5, 5])
    with pytest.raises(AggregationError, match="client 1 sent more than one update"):
        FedAvg().aggregate_round(weights(0), items, {})


def test_negative_sample_count_names_the_client() -> None:
    items = updates([1, 2], [5, -1])
    with pytest.raises(AggregationError, match="client 2 reports n_samples = -1"):
        FedAvg().aggregate_round(weights(0), items, {})


def test_wrong_layer_count_names_the_client() -> None:
    items = updates([1, 4], [5, 5])
    items[1] = ClientUpdate(4, items[1].weights[:2], 5)
    with pytest.raises(AggregationError, match="client 4 sent 2 layers; the global"):
        FedAvg().aggregate_round(weights(0), items, {})


def test_update_shaped_unlike_the_global_model_is_refused() -> None:
    items = [ClientUpdate(0, [np.zeros((2, 3)), np.zeros(2), np.zeros((2, 2, 2))], 1)]
    with pytest.raises(AggregationError, match=r"client 0: layer 0 has shape \(2, 3\)"):
        FedAvg().aggregate_round(weights(0), items, {})


def test_non_finite_global_weights_are_refused() -> None:
    start = weights(0)
    start[2][0, 0, 0] = np.nan
    with pytest.raises(AggregationError, match="global weights .* layer 2"):
        FedAvg().aggregate_round(start, updates([0], [1]), {})


def test_state_with_a_wrong_shape_is_refused() -> None:
    s = FedAvgM()
    start = weights(0)
    state = s.init_state(start)
    state["momentum/001"] = np.zeros(5)
    with pytest.raises(AggregationError, match=r"'momentum/001': shape \(5,\)"):
        s.aggregate_round(start, updates([0], [1]), state)


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_non_finite_result_is_refused_with_a_hint() -> None:
    s = FedAvgM(server_lr=1e308, server_momentum=0.0)
    start = weights(0, dtype=np.float64)
    items = updates([0], [1], dtype=np.float64, scale=100.0)
    with pytest.raises(AggregationError, match=r"non-finite .* strategy\.server_lr"):
        s.aggregate_round(start, items, s.init_state(start))


class _Careless(Strategy):
    """Writes into the global weights: the read-only views must stop it."""

    name = "careless"

    def aggregate(
        self, global_weights: list, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[list, State]:
        global_weights[0] += 1.0
        return global_weights, {}


def test_implementations_cannot_modify_inputs() -> None:
    start = weights(0)
    before = start[0].copy()
    with pytest.raises(ValueError, match="read-only"):
        _Careless().aggregate_round(start, updates([0], [1]), {})
    np.testing.assert_array_equal(start[0], before)

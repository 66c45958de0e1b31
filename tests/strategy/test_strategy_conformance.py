"""Checks every registered strategy must pass (the parametrize_with_checks idea).

A new strategy is tested here as soon as it is in ``STRATEGIES``; it only has to
be classified below as averaging the clients or optimizing on the server.
"""

from __future__ import annotations

import inspect
import itertools
from pathlib import Path

import numpy as np
import pytest
from strategy_helpers import (
    SHAPES,
    SUITE_SETTINGS,
    deep_copy,
    same_bits,
    same_state,
    steps_of,
    updates,
    weights,
)

from fedpipe.core.weights import load_state, save_state
from fedpipe.strategy import STRATEGIES, AggregationError, ClientUpdate, make_strategy

# identical client updates in -> that update out
AVERAGING = {
    "fedavg", "fedprox", "fedmedian", "fedtrimmedavg", "krum", "multikrum",
    "bulyan", "clipping",
}  # fmt: skip
# a server optimizer on top of the clients' mean: updates equal to the global
# weights leave them unchanged (fednova: a server step of tau_eff mean normalized
# updates; identical updates with different local steps do not average to
# themselves)
SERVER_OPTIMIZERS = {
    "fedavgm", "fedadagrad", "fedadam", "fedyogi", "scaffold", "fednova",
}  # fmt: skip

NAMES = sorted(STRATEGIES)
CLIENTS = [9, 0, 7, 3, 4]
COUNTS = [40, 10, 25, 5, 20]


def _strategy(name: str):
    return make_strategy(name, **SUITE_SETTINGS)


def _run(strategy, global_weights, rounds):
    """Thread the state through ``rounds`` (lists of updates); all results."""
    state = strategy.init_state(global_weights)
    out = []
    for round_updates in rounds:
        global_weights, state = strategy.aggregate_round(
            global_weights, round_updates, state
        )
        out.append((global_weights, state))
    return out


def _two_rounds(dtype: type = np.float32, scale: float = 1.0):
    first = updates(CLIENTS, COUNTS, dtype=dtype, scale=scale)
    second = [
        ClientUpdate(u.client, [w * 0.5 + 0.1 for w in u.weights], u.n_samples + 1,
                     u.extras, u.steps)
        for u in updates([1, 2, 5, 6, 8], COUNTS, dtype=dtype, scale=scale)
    ]  # fmt: skip
    return weights(0, dtype=dtype, scale=scale), [first, second]


# ---------------------------------------------------------------- registry


def test_every_strategy_is_classified() -> None:
    assert AVERAGING.isdisjoint(SERVER_OPTIMIZERS)
    assert set(STRATEGIES) == AVERAGING | SERVER_OPTIMIZERS


@pytest.mark.parametrize("name", NAMES)
def test_registered_under_its_own_name(name: str) -> None:
    strategy = _strategy(name)
    assert type(strategy) is STRATEGIES[name]
    assert strategy.name == name


@pytest.mark.parametrize("name", NAMES)
def test_settings_are_keyword_only_arguments_and_attributes(name: str) -> None:
    cls = STRATEGIES[name]
    strategy = _strategy(name)
    if cls.__init__ is object.__init__:
        assert cls.settings == ()
        return
    params = inspect.signature(cls.__init__).parameters
    for key in cls.settings:
        assert params[key].kind is inspect.Parameter.KEYWORD_ONLY
        assert hasattr(strategy, key)
        assert f"{key}=" in repr(strategy)
    assert set(params) - {"self"} == set(cls.settings)


@pytest.mark.parametrize("name", NAMES)
def test_settings_of_other_strategies_are_ignored(name: str) -> None:
    every_key = {
        "proximal_mu": 0.1, "server_lr": 0.5, "server_momentum": 0.5, "beta_1": 0.5,
        "beta_2": 0.5, "tau": 0.01, "beta": 0.1, "num_byzantine": 1,
        "num_selected": 2, "total_clients": 16, "unknown_key": "x",
        "clip_norm": 2.5, "clip_quantile": 0.75,
    }  # fmt: skip
    strategy = make_strategy(name, **every_key)
    for key in strategy.settings:
        assert getattr(strategy, key) == every_key[key]


# ---------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", NAMES)
def test_same_inputs_give_the_same_bits(name: str) -> None:
    start, rounds = _two_rounds()
    first = _run(_strategy(name), start, rounds)
    again = _run(_strategy(name), start, rounds)
    for (w1, s1), (w2, s2) in zip(first, again, strict=True):
        assert same_bits(w1, w2)
        assert same_state(s1, s2)


@pytest.mark.parametrize("name", NAMES)
def test_result_does_not_depend_on_arrival_order(name: str) -> None:
    # float64 layers scaled up: summation order would show in the last bits
    start, (round_updates, _) = _two_rounds(np.float64, scale=1e3)
    strategy = _strategy(name)
    state = strategy.init_state(start)
    want_w, want_s = strategy.aggregate_round(start, round_updates, state)
    for order in itertools.islice(itertools.permutations(range(5)), 1, None, 17):
        shuffled = [round_updates[i] for i in order]
        got_w, got_s = strategy.aggregate_round(start, shuffled, state)
        assert same_bits(got_w, want_w), order
        assert same_state(got_s, want_s), order


@pytest.mark.parametrize("name", NAMES)
def test_the_strategy_object_carries_nothing_between_runs(name: str) -> None:
    start, rounds = _two_rounds()
    used = _strategy(name)
    _run(used, weights(42), [updates([2, 4, 6, 8, 10], [1, 2, 3, 4, 5])])
    for (w1, s1), (w2, s2) in zip(
        _run(used, start, rounds), _run(_strategy(name), start, rounds), strict=True
    ):
        assert same_bits(w1, w2)
        assert same_state(s1, s2)


# ---------------------------------------------------------------- fixed points


@pytest.mark.parametrize("name", sorted(AVERAGING))
def test_identical_updates_come_out_unchanged(name: str) -> None:
    same = weights(7)
    round_updates = [
        ClientUpdate(c, [w.copy() for w in same], n) for c, n in zip(
            CLIENTS, COUNTS, strict=True)
    ]  # fmt: skip
    strategy = _strategy(name)
    start = weights(0)
    new, _ = strategy.aggregate_round(start, round_updates, strategy.init_state(start))
    assert same_bits(new, same)


@pytest.mark.parametrize("name", NAMES)
def test_updates_equal_to_the_global_weights_leave_them_unchanged(name: str) -> None:
    start = weights(3)
    strategy = _strategy(name)
    state = strategy.init_state(start)
    for _ in range(3):  # also with non-zero server state from earlier rounds
        round_updates = [
            ClientUpdate(
                c,
                [w.copy() for w in start],
                n,
                {"control_delta": weights(c)},
                steps_of(c),
            )
            for c, n in zip(CLIENTS, COUNTS, strict=True)
        ]
        new, state = strategy.aggregate_round(start, round_updates, state)
        if name in SERVER_OPTIMIZERS - {"scaffold"}:
            # momentum / moments are still zero: nothing moved the weights
            assert all(not np.any(a) for a in state.values())
        assert same_bits(new, start)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("name", NAMES)
def test_non_finite_update_names_the_client(name: str, bad: float) -> None:
    round_updates = updates(CLIENTS, COUNTS)
    broken = round_updates[2]  # client 7
    broken.weights[1][0] = bad
    strategy = _strategy(name)
    start = weights(0)
    with pytest.raises(AggregationError, match=r"client 7 .*non-finite.* layer 1"):
        strategy.aggregate_round(start, round_updates, strategy.init_state(start))


@pytest.mark.parametrize("name", NAMES)
def test_state_that_does_not_fit_is_refused(name: str) -> None:
    strategy = _strategy(name)
    start = weights(0)
    state = strategy.init_state(start)
    if state:
        state.pop(sorted(state)[0])
    else:
        state = {"m/000": np.zeros(SHAPES[0])}
    with pytest.raises(AggregationError, match="server state does not fit"):
        strategy.aggregate_round(start, updates(CLIENTS, COUNTS), state)


# ---------------------------------------------------------------- purity


@pytest.mark.parametrize("name", NAMES)
def test_inputs_are_not_modified(name: str) -> None:
    start, (first, second) = _two_rounds()
    strategy = _strategy(name)
    _, state = strategy.aggregate_round(start, first, strategy.init_state(start))
    start_copy = [w.copy() for w in start]
    updates_copy = deep_copy(second)
    state_copy = {k: v.copy() for k, v in state.items()}
    strategy.aggregate_round(start, second, state)
    assert same_bits(start, start_copy)
    assert same_state(state, state_copy)
    for got, want in zip(second, updates_copy, strict=True):
        assert same_bits(got.weights, want.weights)
        assert same_bits(got.extras["control_delta"], want.extras["control_delta"])


@pytest.mark.parametrize("name", NAMES)
def test_result_is_fresh_arrays_shaped_like_the_model(name: str) -> None:
    start = weights(0)
    start[1] = start[1].astype(np.float64)  # mixed dtypes are kept per layer
    round_updates = updates(CLIENTS, COUNTS)
    strategy = _strategy(name)
    new, state = strategy.aggregate_round(
        start, round_updates, strategy.init_state(start)
    )
    for got, ref in zip(new, start, strict=True):
        assert got.shape == ref.shape
        assert got.dtype == ref.dtype
        assert got.flags.writeable
        assert not np.shares_memory(got, ref)
        for u in round_updates:
            assert not any(np.shares_memory(got, w) for w in u.weights)
    assert all(isinstance(k, str) for k in state)


# ---------------------------------------------------------------- state


@pytest.mark.parametrize("name", NAMES)
def test_init_state_is_zeros_named_per_layer(name: str) -> None:
    strategy = _strategy(name)
    start = weights(0)
    state = strategy.init_state(start)
    assert set(state) == {
        f"{prefix}/{k:03d}" for prefix in strategy.state_names for k in range(3)
    }
    for key, array in state.items():
        assert array.dtype == np.float64
        assert array.shape == start[int(key.split("/")[1])].shape
        assert not np.any(array)


@pytest.mark.parametrize("name", NAMES)
def test_state_round_trips_through_a_file(name: str, tmp_path: Path) -> None:
    start, (first, second) = _two_rounds()
    straight = _run(_strategy(name), start, [first, second])

    # round 1, state to disk, then round 2 by a new strategy object from the file
    strategy = _strategy(name)
    save_state(tmp_path / "s0.npz", strategy.init_state(start))
    w1, s1 = strategy.aggregate_round(start, first, load_state(tmp_path / "s0.npz"))
    save_state(tmp_path / "s1.npz", s1)
    w2, s2 = _strategy(name).aggregate_round(
        w1, second, load_state(tmp_path / "s1.npz")
    )

    assert same_bits(w1, straight[0][0])
    assert same_state(s1, straight[0][1])
    assert same_bits(w2, straight[1][0])
    assert same_state(s2, straight[1][1])

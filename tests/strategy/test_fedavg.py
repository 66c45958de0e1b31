"""Tests for FedAvg and its math (weighted_average), and the registry."""

from __future__ import annotations

import numpy as np
import pytest

from fedpipe.strategy import (
    STRATEGIES,
    AggregationError,
    ClientUpdate,
    FedAvg,
    make_strategy,
    weighted_average,
)
from fedpipe.strategy.aggregate import normalized

# ---------------------------------------------------------------- helpers

SHAPES = [(3, 2), (2,), (2, 2, 2)]


def _weights(seed: int) -> list[np.ndarray]:
    """One client's weight list: three float32 layers of different shapes."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def _updates(counts: list[int]) -> list[ClientUpdate]:
    return [
        ClientUpdate(client=i, weights=_weights(100 + i), n_samples=n)
        for i, n in enumerate(counts)
    ]


def _reference(updates: list[list[np.ndarray]], counts: list[float]) -> list:
    """Hand-written weighted mean in float64, layer by layer."""
    total = float(sum(counts))
    out = []
    for layer in range(len(updates[0])):
        acc = sum(
            np.float64(n) * u[layer].astype(np.float64)
            for u, n in zip(updates, counts, strict=True)
        )
        out.append(acc / total)
    return out


# ---------------------------------------------------------------- weighted_average


def test_weighted_average_matches_hand_computed_mean() -> None:
    updates = [_weights(1), _weights(2), _weights(3)]
    counts = [10, 30, 60]
    result = weighted_average(updates, counts)
    expected = _reference(updates, counts)
    assert len(result) == len(SHAPES)
    for got, want in zip(result, expected, strict=True):
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_weighted_average_on_scalars_by_hand() -> None:
    updates = [[np.array([1.0])], [np.array([4.0])], [np.array([10.0])]]
    # (1*1 + 4*2 + 10*1) / 4 = 19 / 4
    result = weighted_average(updates, [1, 2, 1])
    assert result[0].tolist() == [4.75]


def test_coefficients_are_normalized() -> None:
    coef = normalized([10, 30, 60])
    assert coef.dtype == np.float64
    assert coef.tolist() == [0.1, 0.3, 0.6]
    assert coef.sum() == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("weights", [[0, 0], [-1, 2], [1, float("nan")], []])
def test_invalid_coefficients_raise(weights: list[float]) -> None:
    with pytest.raises(AggregationError):
        normalized(weights)


def test_identical_updates_come_out_unchanged() -> None:
    same = _weights(7)
    result = weighted_average([same, same, same], [3, 5, 11])
    for got, want in zip(result, same, strict=True):
        assert got.dtype == np.float32
        assert got.tobytes() == want.tobytes()


def test_zero_weight_client_has_no_influence() -> None:
    a, b, c = _weights(1), _weights(2), _weights(3)
    poisoned = [np.full(s, 1e6, dtype=np.float32) for s in SHAPES]
    with_zero = weighted_average([a, b, poisoned, c], [5, 7, 0, 9])
    without = weighted_average([a, b, c], [5, 7, 9])
    for got, want in zip(with_zero, without, strict=True):
        assert got.tobytes() == want.tobytes()


def test_doubling_a_count_shifts_result_as_computed() -> None:
    a = [np.array([0.0, 2.0])]
    b = [np.array([6.0, 2.0])]
    # 1:1 -> (0 + 6) / 2 = 3 ; 1:2 -> (0 + 2*6) / 3 = 4
    assert weighted_average([a, b], [10, 10])[0].tolist() == [3.0, 2.0]
    assert weighted_average([a, b], [10, 20])[0].tolist() == [4.0, 2.0]


def test_mismatched_layer_shape_raises() -> None:
    a = _weights(1)
    b = _weights(2)
    b[1] = np.zeros(3, dtype=np.float32)
    with pytest.raises(AggregationError, match=r"layer 1: shape \(3,\) differs"):
        weighted_average([a, b], [1, 1])


def test_update_and_weight_counts_must_match() -> None:
    with pytest.raises(AggregationError, match="2 updates but 3 weights"):
        weighted_average([_weights(1), _weights(2)], [1, 1, 1])


# ---------------------------------------------------------------- Strategy


def test_fedavg_aggregate_round_weights_by_samples() -> None:
    updates = _updates([10, 30, 60])
    result, state = FedAvg().aggregate_round(_weights(0), updates, {})
    assert state == {}
    expected = _reference([u.weights for u in updates], [10, 30, 60])
    for got, want in zip(result, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_result_does_not_depend_on_update_order() -> None:
    # float64 layers: here the summation order shows in the last bits, so only
    # sorting by client id makes the result order-independent
    counts = [13, 29, 7, 51]
    updates = [
        ClientUpdate(
            client=i,
            weights=[w.astype(np.float64) * 1e3 for w in _weights(100 + i)],
            n_samples=n,
        )
        for i, n in enumerate(counts)
    ]
    strategy = FedAvg()
    forward, _ = strategy.aggregate_round(_weights(0), updates, {})
    for order in ([3, 1, 0, 2], [2, 3, 1, 0], [3, 2, 1, 0]):
        shuffled = [updates[i] for i in order]
        unsorted = weighted_average(
            [u.weights for u in shuffled], [u.n_samples for u in shuffled]
        )
        assert any(
            a.tobytes() != b.tobytes() for a, b in zip(unsorted, forward, strict=True)
        ), "fixture too easy: order makes no difference even without sorting"
        result, _ = strategy.aggregate_round(_weights(0), shuffled, {})
        for got, want in zip(result, forward, strict=True):
            assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_update_names_the_client(bad: float) -> None:
    updates = _updates([10, 20, 30])
    broken = [w.copy() for w in updates[2].weights]
    broken[1][0] = bad
    updates[2] = ClientUpdate(client=7, weights=broken, n_samples=30)
    with pytest.raises(AggregationError, match="client 7 .* in layer 1"):
        FedAvg().aggregate_round(_weights(0), updates, {})


def test_no_updates_raise() -> None:
    with pytest.raises(AggregationError, match="no client updates"):
        FedAvg().aggregate_round(_weights(0), [], {})


def test_aggregate_round_rejects_mismatched_shapes() -> None:
    updates = _updates([1, 1])
    wrong = [w.copy() for w in updates[1].weights]
    wrong[0] = np.zeros((2, 3), dtype=np.float32)
    updates[1] = ClientUpdate(client=1, weights=wrong, n_samples=1)
    with pytest.raises(AggregationError, match="layer 0"):
        FedAvg().aggregate_round(_weights(0), updates, {})


# ---------------------------------------------------------------- registry


def test_make_strategy_returns_fedavg() -> None:
    strategy = make_strategy("fedavg")
    assert isinstance(strategy, FedAvg)
    assert set(STRATEGIES) == {
        "fedavg", "fedprox", "fedavgm", "fedadagrad", "fedadam", "fedyogi",
        "fedmedian", "fedtrimmedavg", "krum", "multikrum", "scaffold", "bulyan",
        "clipping", "fednova",
    }  # fmt: skip


def test_make_strategy_unknown_names_the_key() -> None:
    with pytest.raises(ValueError) as info:
        make_strategy("nope")
    msg = str(info.value)
    assert "strategy.name" in msg
    assert "'nope'" in msg
    assert "allowed: bulyan, clipping, fedadagrad, fedadam, fedavg, fedavgm, " in msg

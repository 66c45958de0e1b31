"""Tests for fedpipe.federation.health: each measure against a hand computation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fedpipe.core.jsonio import read_json, write_json
from fedpipe.federation.health import (
    HeldOut,
    ModelLayers,
    RoundUpdates,
    cosine,
    divergence,
    effective_weights,
    expected_calibration_error,
    held_out_part,
    loss_top_share,
    round_health,
)

# ---------------------------------------------------------------- divergence


def test_divergence_is_zero_for_identical_updates() -> None:
    delta = np.random.default_rng(0).standard_normal(50)
    assert divergence(np.tile(delta, (7, 1))) == pytest.approx(0.0, abs=1e-12)


def test_divergence_is_zero_for_one_client() -> None:
    assert divergence(np.array([[1.0, -2.0, 3.0]])) == pytest.approx(0.0, abs=1e-12)


def test_divergence_of_independent_random_updates_is_one_minus_one_over_k() -> None:
    # E||mean||^2 = E||Δ||^2 / K for independent zero-mean updates
    for k in (10, 100):
        deltas = np.random.default_rng(k).standard_normal((k, 20_000))
        assert divergence(deltas) == pytest.approx(1 - 1 / k, abs=0.01)


@pytest.mark.parametrize(
    ("deltas", "expected"),
    [
        # orthogonal: ||mean||^2 = 0.5, mean ||Δ||^2 = 1
        ([[1.0, 0.0], [0.0, 1.0]], 0.5),
        # opposite: they cancel
        ([[1.0, 0.0], [-1.0, 0.0]], 1.0),
        # same direction, sizes 2 and 1: 1 - 1.5^2 / 2.5
        ([[2.0, 0.0], [1.0, 0.0]], 0.1),
    ],
)
def test_divergence_on_two_client_toys(deltas: list, expected: float) -> None:
    assert divergence(np.array(deltas)) == pytest.approx(expected)


def test_divergence_of_zero_updates_is_nan() -> None:
    assert math.isnan(divergence(np.zeros((3, 4))))


# ---------------------------------------------------------------- cosine


def test_cosine_by_hand() -> None:
    assert cosine(np.array([1.0, 0.0]), np.array([1.0, 1.0])) == pytest.approx(
        1 / math.sqrt(2)
    )
    assert cosine(np.array([1.0, 2.0]), np.array([-2.0, -4.0])) == pytest.approx(-1.0)
    assert math.isnan(cosine(np.zeros(2), np.ones(2)))


# ---------------------------------------------------------------- aggregation fit


@pytest.fixture
def cohort() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Global weights, 6 client updates and FedAvg weights p (n_k / sum n)."""
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal(4000)
    deltas = 0.01 * rng.standard_normal((6, 4000))
    n = np.array([30, 10, 25, 50, 5, 40], dtype=float)
    return w0, deltas, n / n.sum()


def test_effective_weights_recover_fedavg(cohort) -> None:
    w0, deltas, p = cohort
    fit = effective_weights(deltas, p @ deltas, w0)
    np.testing.assert_allclose(fit.weights, p, atol=1e-9)
    assert fit.weight_sum == pytest.approx(1.0)
    assert fit.global_coefficient == pytest.approx(0.0, abs=1e-9)
    assert fit.residual < 1e-9


def test_effective_weights_of_float32_fedavg(cohort) -> None:
    # the round stores float32 weights: the fit must see through the rounding
    w0, deltas, p = cohort
    clients = (w0 + deltas).astype(np.float32)
    after = (p @ clients.astype(np.float64)).astype(np.float32)
    before = w0.astype(np.float32).astype(np.float64)
    fit = effective_weights(
        clients.astype(np.float64) - before, after.astype(np.float64) - before, before
    )
    assert fit.weight_sum == pytest.approx(1.0, abs=1e-3)
    assert fit.residual < 1e-3


def test_effective_weights_recover_a_planted_sum_of_1_8(cohort) -> None:
    # the bug: sum_k a_k w_k with a = 1.8 p, so the old weights are scaled too
    w0, deltas, p = cohort
    after = (1.8 * p) @ (w0 + deltas)
    fit = effective_weights(deltas, after - w0, w0)
    np.testing.assert_allclose(fit.weights, 1.8 * p, atol=1e-9)
    assert fit.weight_sum == pytest.approx(1.8)
    assert fit.global_coefficient == pytest.approx(0.8)
    assert fit.residual < 1e-9


def test_effective_weights_of_a_server_learning_rate(cohort) -> None:
    # w_before + 1.8 * FedAvg step: same sum, old weights untouched
    w0, deltas, p = cohort
    fit = effective_weights(deltas, 1.8 * (p @ deltas), w0)
    assert fit.weight_sum == pytest.approx(1.8)
    assert fit.global_coefficient == pytest.approx(0.0, abs=1e-9)


def test_effective_weights_split_collinear_updates_and_keep_the_sum(cohort) -> None:
    w0, deltas, p = cohort
    twins = np.vstack([deltas, deltas[:1]])  # client 6 sent client 0's update
    q = np.append(p, 0.1) / 1.1
    fit = effective_weights(twins, q @ twins, w0)
    assert fit.weight_sum == pytest.approx(1.0)
    assert fit.weights[0] == pytest.approx(fit.weights[6])
    assert fit.weights[0] + fit.weights[6] == pytest.approx(q[0] + q[6])
    assert fit.rank == 7  # 6 distinct updates and w_before


def test_effective_weights_with_one_client(cohort) -> None:
    w0, deltas, _ = cohort
    fit = effective_weights(deltas[:1], 0.7 * deltas[0], w0)
    assert fit.weights == pytest.approx([0.7])
    assert fit.weight_sum == pytest.approx(0.7)


def test_effective_weights_sum_is_nan_when_undetermined() -> None:
    # 11 clients but only 10 parameters vary (e.g. a dead layer): weight can move
    # between clients and change the sum, so no sum is reported
    rng = np.random.default_rng(2)
    deltas = np.zeros((11, 50))
    deltas[:, :10] = rng.standard_normal((11, 10))
    fit = effective_weights(deltas, deltas.mean(axis=0), rng.standard_normal(50))
    assert math.isnan(fit.weight_sum)


def test_effective_weights_residual_is_large_for_a_non_linear_server(cohort) -> None:
    w0, deltas, p = cohort
    fit = effective_weights(deltas, 0.001 * np.sign(p @ deltas), w0)  # sign-SGD
    assert fit.residual > 0.3


# ---------------------------------------------------------------- calibration


def test_ece_on_a_hand_example() -> None:
    probs = np.array(
        [
            [0.9, 0.05, 0.05],  # conf 0.9, label 0: right
            [0.9, 0.05, 0.05],  # conf 0.9, label 1: wrong
            [0.2, 0.62, 0.18],  # conf 0.62, label 1: right
            [0.62, 0.2, 0.18],  # conf 0.62, label 0: right
        ]
    )
    labels = np.array([0, 1, 1, 0])
    # bin of 0.9: accuracy 0.5 vs 0.9; bin of 0.62: accuracy 1 vs 0.62
    expected = 0.5 * abs(0.5 - 0.9) + 0.5 * abs(1.0 - 0.62)
    assert expected_calibration_error(probs, labels) == pytest.approx(expected)


def test_ece_of_a_sigmoid_output() -> None:
    probs = np.array([[0.8], [0.1]])  # confidences 0.8 and 0.9, both right
    assert expected_calibration_error(probs, np.array([1, 0])) == pytest.approx(0.15)


def test_loss_top_share() -> None:
    assert loss_top_share(np.ones(100)) == pytest.approx(0.01)
    assert loss_top_share(np.append(np.ones(99), 101.0)) == pytest.approx(101 / 200)
    assert math.isnan(loss_top_share(np.zeros(10)))


# ---------------------------------------------------------------- the record

CONTRACT = {
    "top": {"round", "clients", "layers", "aggregation", "global", "gap", "seconds"},
    "client": {
        "client",
        "n_train",
        "update_norm",
        "cosine_to_mean",
        "nonfinite",
        "train_loss",
        "aggregation_weight",
    },
    "layer": {
        "index",
        "name",
        "kind",
        "divergence",
        "update_norm_mean",
        "weight_norm",
        "weight_norm_before",
        "stats_divergence",
    },
    "aggregation": {"weight_sum", "fit_residual", "nominal_weights"},
    "global": {
        "weight_norm",
        "weight_norm_before",
        "nonfinite",
        "mean_confidence",
        "ece",
        "loss",
        "accuracy",
        "loss_top_share",
    },
    "gap": {"loss", "accuracy"},
}


def _toy_round(
    scale_client: float = 1.0,
) -> tuple[list[np.ndarray], dict[int, list[np.ndarray]], dict[int, int]]:
    """A 'dense' layer (kernel, bias) and a 'norm' layer (gamma, beta, mean, var)."""
    rng = np.random.default_rng(3)
    before = [
        rng.standard_normal((4, 3)).astype(np.float32),
        np.zeros(3, np.float32),
        np.ones(3, np.float32),
        np.zeros(3, np.float32),
        np.zeros(3, np.float32),
        np.ones(3, np.float32),
    ]
    clients = {}
    for c in (2, 0, 1):  # given out of order: the record sorts them
        w = [a + 0.1 * rng.standard_normal(a.shape).astype(np.float32) for a in before]
        clients[c] = w
    clients[1] = [a * np.float32(scale_client) for a in clients[1]]
    return before, clients, {0: 10, 1: 30, 2: 60}


LAYERS = [("dense", [0, 1], "dense"), ("bn", [2, 3, 4, 5], "norm")]
TRAINABLE = [0, 1, 2, 3]


def _fedavg(
    before: list[np.ndarray], clients: dict[int, list[np.ndarray]], n: dict[int, int]
) -> list[np.ndarray]:
    total = sum(n.values())
    return [
        sum(n[c] / total * clients[c][j].astype(np.float64) for c in clients).astype(
            np.float32
        )
        for j in range(len(before))
    ]


def test_round_health_follows_the_contract(tmp_path) -> None:
    before, clients, n = _toy_round()
    after = _fedavg(before, clients, n)
    probs = np.array([[0.7, 0.3], [0.2, 0.8], [0.6, 0.4]])
    summary = {
        "global": {"loss": 0.5, "accuracy": 2 / 3},
        "global_on_clients": {"loss": 0.6, "accuracy": 0.7},
        "local": {"loss": 0.4, "accuracy": 0.8},
    }
    h = round_health(
        3,
        RoundUpdates(before, after, clients, n, {0: 0.1, 1: 0.2, 2: float("nan")}),
        ModelLayers(LAYERS, TRAINABLE),
        HeldOut(probs, np.array([0, 1, 1]), np.array([0.3, 0.2, 1.0])),
        record=summary,
    )
    assert CONTRACT["top"] <= set(h)
    assert h["round"] == 3
    assert [c["client"] for c in h["clients"]] == [0, 1, 2]
    for c in h["clients"]:
        assert CONTRACT["client"] <= set(c)
    assert [layer["name"] for layer in h["layers"]] == ["dense", "bn"]
    for layer in h["layers"]:
        assert CONTRACT["layer"] <= set(layer)
    assert CONTRACT["aggregation"] <= set(h["aggregation"])
    assert CONTRACT["global"] <= set(h["global"])
    assert CONTRACT["gap"] <= set(h["gap"])
    # FedAvg: effective weights are the sample shares and sum to 1
    assert h["aggregation"]["weight_sum"] == pytest.approx(1.0, abs=1e-4)
    assert h["aggregation"]["nominal_weights"] == {"0": 0.1, "1": 0.3, "2": 0.6}
    for c in h["clients"]:
        assert c["aggregation_weight"] == pytest.approx(n[c["client"]] / 100, abs=1e-3)
    assert h["clients"][2]["train_loss"] is None  # NaN is written as null
    # the norm layer's trainable part is its gamma and beta; its stats compared apart
    assert h["layers"][1]["n_params"] == 6
    assert h["layers"][0]["stats_divergence"] is None
    assert 0 <= h["layers"][1]["stats_divergence"] <= 1
    # global numbers: the record's loss/accuracy, calibration from the probabilities
    assert h["global"]["loss"] == 0.5
    assert h["global"]["mean_confidence"] == pytest.approx((0.7 + 0.8 + 0.6) / 3)
    assert h["global"]["loss_top_share"] == pytest.approx(1.0 / 1.5, rel=1e-5)
    assert h["gap"] == {"loss": pytest.approx(0.2), "accuracy": pytest.approx(-0.1)}
    assert h["seconds"] >= 0
    # JSON-ready: written and read back unchanged, with 6 significant digits
    write_json(tmp_path / "h.json", h)
    assert read_json(tmp_path / "h.json") == h
    text = json.dumps(h)
    assert "NaN" not in text and "Infinity" not in text
    assert len(repr(h["global"]["weight_norm"]).replace(".", "").lstrip("0")) <= 7


def test_held_out_part_is_the_global_parts_prediction_numbers() -> None:
    # round_health composes its parts: the held-out numbers come from one of them
    before, clients, n = _toy_round()
    held_out = HeldOut(
        np.array([[0.7, 0.3], [0.2, 0.8], [0.6, 0.4]]),
        np.array([0, 1, 1]),
        np.array([0.3, 0.2, 1.0]),
    )
    h = round_health(
        1,
        RoundUpdates(before, _fedavg(before, clients, n), clients, n),
        ModelLayers(LAYERS, TRAINABLE),
        held_out,
    )
    part = held_out_part(held_out)
    assert part["accuracy"] == pytest.approx(2 / 3)
    assert {k: h["global"][k] for k in part} == pytest.approx(part, rel=1e-5)
    assert set(held_out_part(HeldOut()).values()) == {None}


def test_round_health_norms_and_cosines_by_hand() -> None:
    before, clients, n = _toy_round()
    after = _fedavg(before, clients, n)
    h = round_health(
        1, RoundUpdates(before, after, clients, n), ModelLayers(LAYERS, TRAINABLE)
    )
    flat = {
        c: np.concatenate(
            [(clients[c][j].astype(np.float64) - before[j]).ravel() for j in TRAINABLE]
        )
        for c in clients
    }
    mean = np.mean([flat[c] for c in sorted(flat)], axis=0)
    for row in h["clients"]:
        d = flat[row["client"]]
        assert row["update_norm"] == pytest.approx(np.linalg.norm(d), rel=1e-5)
        assert row["cosine_to_mean"] == pytest.approx(cosine(d, mean), rel=1e-5)
    dense = np.stack([flat[c][:15] for c in sorted(flat)])
    assert h["layers"][0]["divergence"] == pytest.approx(divergence(dense), rel=1e-5)
    w1 = np.concatenate([after[j].astype(np.float64).ravel() for j in TRAINABLE])
    assert h["global"]["weight_norm"] == pytest.approx(np.linalg.norm(w1), rel=1e-5)


def test_round_health_when_aggregation_was_refused() -> None:
    # a client blew up: the round stage writes the record with after=None
    before, clients, n = _toy_round()
    clients[1][0][0, 0] = np.nan
    h = round_health(
        2, RoundUpdates(before, None, clients, n), ModelLayers(LAYERS, TRAINABLE)
    )
    broken = h["clients"][1]
    assert broken["nonfinite"] == 1
    assert broken["update_norm"] is None and broken["cosine_to_mean"] is None
    assert h["clients"][0]["update_norm"] > 0  # the others are still measured
    assert h["aggregation"]["weight_sum"] is None
    assert h["global"]["weight_norm"] is None and h["global"]["nonfinite"] is None
    assert h["layers"][0]["divergence"] is not None


def test_layer_info_gives_kinds_and_trainable_indices() -> None:
    from fedpipe.model.zoo import build_model, layer_info

    model = build_model("cnn", (8, 8, 1), 3, depth=2, width=2, batch_norm=True)
    rows = layer_info(model)
    assert [(r.name, r.kind) for r in rows] == [
        ("conv_01", "conv"),
        ("bn_01", "norm"),
        ("conv_02", "conv"),
        ("bn_02", "norm"),
        ("output", "dense"),
    ]
    assert rows[1].indices == [1, 2, 3, 4] and rows[1].trainable == [1, 2]
    assert sum(len(r.indices) for r in rows) == len(model.get_weights())


def test_health_and_doctor_do_not_load_tensorflow() -> None:
    # the doctor runs on a run's files alone; round_health on arrays alone
    import subprocess
    import sys

    code = (
        "import sys, fedpipe.federation.health, fedpipe.observe.doctor\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'tensorflow', 'keras'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_rows_are_built_in_place_with_the_bits_of_concatenation() -> None:
    from fedpipe.federation.health import _flat, _stacked

    rng = np.random.default_rng(3)
    before = [rng.normal(size=s).astype(np.float32) for s in [(6, 4), (4,), (4, 2)]]
    clients = [
        [(w + rng.normal(scale=0.1, size=w.shape)).astype(np.float32) for w in before]
        for _ in range(3)
    ]
    after = [np.mean([c[j] for c in clients], axis=0) for j in range(3)]
    idx = [0, 2]  # a layer left out (not trainable)
    w0, w1 = _flat(before, idx), _flat(after, idx)
    naive = np.concatenate(
        [
            np.stack([_flat(c, idx) - w0 for c in clients]),
            w0[None],
            (w1 - w0)[None],
            w1[None],
        ]
    )
    got = _stacked(before, after, idx, clients)
    assert got.dtype == np.float64 and got.tobytes() == naive.tobytes()
    assert _stacked(before, None, idx, clients).tobytes() == naive[:4].tobytes()

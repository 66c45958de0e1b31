"""Client sampling (fedpipe.federation.round), round records
(fedpipe.federation.records), seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedpipe.core.seeds import PURPOSES, derive_seed, rng_for
from fedpipe.federation.records import RoundRecord
from fedpipe.federation.round import sample_clients
from fedpipe.model.metrics import METRIC_NAMES

# ---------------------------------------------------------------- helpers

NAN = float("nan")


def _row(loss: float, accuracy: float, precision: float, recall: float, auc: float):
    # balanced accuracy: the macro recall's value here (the mean class recall)
    values = (loss, accuracy, precision, recall, auc, recall)
    return dict(zip(METRIC_NAMES, values, strict=True))


def _record() -> RoundRecord:
    """Three clients with 10, 30, 60 test samples; clients 0 and 2 trained."""
    return RoundRecord(
        round=4,
        selected=[0, 2],
        n_test=[10, 30, 60],
        global_test=_row(0.25, 0.9, 0.85, 0.8, 0.95),
        global_clients=[
            _row(1.0, 0.1, 0.2, 0.3, 0.4),
            _row(2.0, 0.2, 0.4, 0.6, NAN),
            _row(3.0, 0.3, 0.6, 0.9, 0.8),
        ],
        local={
            0: _row(2.0, 0.5, 0.4, 0.6, 0.7),
            2: _row(1.0, 0.8, 0.9, 0.3, NAN),
        },
        aggregation_weight_sum=123.0,
    )


def _sample(round_: int, *, seed: int = 42, n: int = 10, k: int = 3) -> list[int]:
    return sample_clients(n_clients=n, per_round=k, seed=seed, round_=round_)


# ---------------------------------------------------------------- sample_clients


@pytest.mark.parametrize("per_round", [10, 11])
def test_all_clients_when_per_round_covers_them(per_round: int) -> None:
    assert _sample(1, k=per_round) == list(range(10))


def test_sample_size_is_per_round_without_repeats() -> None:
    for round_ in range(1, 21):
        chosen = _sample(round_, k=4)
        assert len(chosen) == 4
        assert len(set(chosen)) == 4
        assert all(0 <= c < 10 for c in chosen)


def test_sample_is_sorted() -> None:
    for round_ in range(1, 21):
        chosen = _sample(round_, k=5)
        assert chosen == sorted(chosen)


def test_sample_is_seeded_per_round() -> None:
    assert _sample(3) == _sample(3)
    assert all(type(c) is int for c in _sample(3))


def test_sample_differs_across_rounds() -> None:
    samples = {tuple(_sample(r)) for r in range(1, 11)}
    assert len(samples) > 1


def test_sample_depends_on_seed() -> None:
    assert any(_sample(r, seed=1) != _sample(r, seed=2) for r in range(1, 11))


def test_sample_is_stable_across_versions() -> None:
    # reproducing an old run depends on these exact draws
    assert [_sample(r) for r in (1, 2, 3)] == [[3, 4, 8], [1, 8, 9], [0, 4, 9]]


# ---------------------------------------------------------------- RoundRecord


def test_local_mean_weights_selected_clients_by_test_size() -> None:
    mean = _record().local_mean()
    # clients 0 (10 samples) and 2 (60 samples)
    assert mean["loss"] == pytest.approx((2.0 * 10 + 1.0 * 60) / 70, abs=1e-12)
    assert mean["accuracy"] == pytest.approx((0.5 * 10 + 0.8 * 60) / 70, abs=1e-12)
    assert mean["recall"] == pytest.approx((0.6 * 10 + 0.3 * 60) / 70, abs=1e-12)
    assert mean["auc"] == pytest.approx(0.7, abs=1e-12)  # client 2's NaN skipped


def test_global_clients_mean_weights_all_clients_by_test_size() -> None:
    mean = _record().global_clients_mean()
    assert mean["loss"] == pytest.approx((10 + 60 + 180) / 100, abs=1e-12)
    assert mean["precision"] == pytest.approx((2 + 12 + 36) / 100, abs=1e-12)
    assert mean["auc"] == pytest.approx((4 + 48) / 70, abs=1e-12)


def test_local_std_across_selected_clients() -> None:
    std = _record().local_std()
    assert std["loss"] == pytest.approx(0.5, abs=1e-12)
    assert std["accuracy"] == pytest.approx(0.15, abs=1e-12)
    assert std["auc"] == 0.0  # one finite value


def test_summary_contents() -> None:
    summary = _record().summary()
    assert summary["round"] == 4
    assert summary["clients_selected"] == [0, 2]
    assert summary["aggregation_weight_sum"] == 123.0
    assert summary["global"] == {
        "loss": 0.25,
        "accuracy": 0.9,
        "precision": 0.85,
        "recall": 0.8,
        "auc": 0.95,
        "balanced_accuracy": 0.8,
    }
    assert summary["local"]["accuracy"] == round(5.3 / 7, 6)
    assert summary["global_on_clients"]["loss"] == 2.5
    assert summary["local_std"]["loss"] == 0.5


def test_summary_writes_nan_as_none() -> None:
    record = _record()
    record.global_test["auc"] = NAN
    assert record.summary()["global"]["auc"] is None


def test_client_table_has_one_row_per_client() -> None:
    table = _record().client_table()
    assert table["client"].tolist() == [0, 1, 2]
    assert table["selected"].tolist() == [True, False, True]
    assert table["n_test"].tolist() == [10, 30, 60]
    expected = ["client", "selected", "n_test"]
    expected += [f"local_{m}" for m in METRIC_NAMES]
    expected += [f"global_{m}" for m in METRIC_NAMES]
    assert table.columns.tolist() == expected


def test_client_table_unselected_client_has_nan_local_metrics() -> None:
    row = _record().client_table().set_index("client").loc[1]
    assert all(math.isnan(row[f"local_{m}"]) for m in METRIC_NAMES)
    assert row["global_loss"] == 2.0
    assert row["global_recall"] == 0.6


def test_client_table_selected_client_has_its_local_metrics() -> None:
    row = _record().client_table().set_index("client").loc[2]
    assert row["local_accuracy"] == 0.8
    assert row["global_accuracy"] == 0.3


# ---------------------------------------------------------------- derive_seed


def test_derive_seed_is_stable() -> None:
    # fixed values: changing the derivation would change every old run's draws
    assert derive_seed(42, "init") == 964687612
    assert derive_seed(42, "sample", 1) == 717659619
    assert derive_seed(42, "train", 3, 7) == 984860657


def test_derive_seed_differs_by_purpose() -> None:
    seeds = {derive_seed(42, purpose, 1) for purpose in PURPOSES}
    assert len(seeds) == len(PURPOSES)


def test_derive_seed_differs_by_coordinates() -> None:
    assert derive_seed(42, "train", 3, 7) != derive_seed(42, "train", 7, 3)
    assert derive_seed(42, "train", 3, 7) != derive_seed(42, "train", 3, 8)
    assert derive_seed(42, "sample", 1) != derive_seed(42, "sample", 2)


def test_derive_seed_differs_by_run_seed() -> None:
    assert derive_seed(42, "init") != derive_seed(43, "init")


def test_derive_seed_fits_31_bits() -> None:
    seeds = [
        derive_seed(s, "train", r, c)
        for s in (0, 42)
        for r in range(5)
        for c in range(5)
    ]
    assert all(0 <= s < 2**31 for s in seeds)


def test_derive_seed_unknown_purpose_raises() -> None:
    with pytest.raises(KeyError):
        derive_seed(42, "nope")


def test_rng_for_is_seeded_by_derive_seed() -> None:
    expected = np.random.default_rng(derive_seed(7, "partition")).random(3)
    assert rng_for(7, "partition").random(3).tolist() == expected.tolist()


def test_a_metric_no_client_could_compute_has_no_spread_and_no_warning() -> None:
    import math
    import warnings

    from fedpipe.federation.records import _std
    from fedpipe.model.metrics import METRIC_NAMES

    nan = float("nan")
    rows = [{m: nan for m in METRIC_NAMES} for _ in range(3)]
    rows[1]["accuracy"], rows[2]["accuracy"] = 0.5, 0.7  # two of three known
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "Degrees of freedom <= 0"
        spread = _std(rows)
        assert all(math.isnan(v) for v in _std([]).values())
    assert spread["accuracy"] == pytest.approx(0.1)
    assert math.isnan(spread["auc"])

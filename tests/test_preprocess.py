"""Federated preprocessing (fedpipe.data.preprocess): the fit sees only the
clients' merged training statistics, equals the pooled rows' statistics, and is
applied where the federation reads its data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.config.params import PreprocessParams
from fedpipe.core.errors import FedpipeError
from fedpipe.core.jsonio import read_json, write_json
from fedpipe.data.ingest import ingest_arrays, ingest_table, read_samples
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.preprocess import (
    PreprocessError,
    Transform,
    fit_prepared,
    fit_transform,
    read_transform,
)
from fedpipe.data.preprocess.stats import edges_for, histogram, merge, moments
from fedpipe.data.splits import open_federated

COLUMNS = ["tiny", "mid", "huge"]


def _clients(
    seed: int = 0, sizes: tuple[int, ...] = (40, 7, 90, 13)
) -> list[np.ndarray]:
    """Clients' training rows on scales 1e-3, 1 and 1e4, each client shifted."""
    rng = np.random.default_rng(seed)
    scales = np.array([1e-3, 1.0, 1e4])
    return [
        (rng.normal(i, 1 + i, size=(n, 3)) * scales).astype(np.float32)
        for i, n in enumerate(sizes)
    ]


def _fit(rows: list[np.ndarray], **settings: object) -> Transform:
    merged = {
        "numeric": "standard",
        "fit": "federated",
        "missing": "refuse",
        "bins": 256,
    }
    merged.update(settings)
    return fit_transform(rows, columns=COLUMNS, **merged)  # type: ignore[arg-type]


# ---------------------------------------------------------------- statistics


def test_federated_mean_and_std_equal_the_pooled_training_rows() -> None:
    rows = _clients()
    pooled = np.concatenate(rows).astype(np.float64)
    fitted = _fit(rows).federated
    assert fitted is not None
    np.testing.assert_allclose(fitted.center, pooled.mean(axis=0), rtol=1e-9, atol=0)
    np.testing.assert_allclose(fitted.scale, pooled.std(axis=0), rtol=1e-9, atol=0)


def test_merge_is_the_statistics_of_the_union() -> None:
    rows = _clients(1)
    merged = merge([moments(x) for x in rows])
    whole = moments(np.concatenate(rows))
    assert merged.rows == whole.rows
    np.testing.assert_array_equal(merged.count, whole.count)
    np.testing.assert_array_equal(merged.low, whole.low)
    np.testing.assert_array_equal(merged.high, whole.high)
    np.testing.assert_allclose(merged.total, whole.total, rtol=1e-12)


def test_robust_quantiles_are_within_one_bin_of_the_pooled_ones() -> None:
    rows = _clients(2)
    pooled = np.concatenate(rows).astype(np.float64)
    bins = 64
    fitted = _fit(rows, numeric="robust", bins=bins).federated
    assert fitted is not None
    width = (pooled.max(axis=0) - pooled.min(axis=0)) / bins
    median = np.quantile(pooled, 0.5, axis=0)
    iqr = np.quantile(pooled, 0.75, axis=0) - np.quantile(pooled, 0.25, axis=0)
    assert np.all(np.abs(fitted.center - median) <= width)
    assert np.all(np.abs(fitted.scale - iqr) <= 2 * width)


def test_client_histograms_add_up_to_the_pooled_histogram() -> None:
    rows = _clients(3)
    merged = merge([moments(x) for x in rows])
    edges = edges_for(merged, 32)
    summed = sum(histogram(x, edges) for x in rows)
    np.testing.assert_array_equal(summed, histogram(np.concatenate(rows), edges))
    assert int(np.asarray(summed).sum()) == 3 * sum(len(x) for x in rows)


def test_minmax_maps_the_training_rows_onto_0_1() -> None:
    rows = _clients(4)
    transform = _fit(rows, numeric="minmax")
    from fedpipe.data.preprocess import row_transform

    out = row_transform(transform, None)(np.concatenate(rows))  # type: ignore[misc]
    np.testing.assert_allclose(out.min(axis=0), 0.0, atol=1e-6)
    np.testing.assert_allclose(out.max(axis=0), 1.0, atol=1e-6)


def test_none_leaves_the_rows_bitwise_as_they_were() -> None:
    from fedpipe.data.preprocess import row_transform

    rows = _clients(5)
    x = np.concatenate(rows)
    out = row_transform(_fit(rows, numeric="none"), None)(x)  # type: ignore[misc]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, x)


def test_a_constant_column_is_centered_not_divided_by_zero() -> None:
    rows = [np.array([[1.0, 2.0, 5.0], [3.0, 4.0, 5.0]], np.float32)]
    fitted = _fit(rows).federated
    assert fitted is not None and fitted.scale[2] == 1.0 and fitted.center[2] == 5.0


# ---------------------------------------------------------------- fit: local


def test_local_fit_scales_each_client_by_its_own_statistics() -> None:
    rows = _clients(6)
    transform = _fit(rows, fit="local")
    assert len(transform.local) == len(rows)
    for x, own in zip(rows, transform.local, strict=True):
        x64 = x.astype(np.float64)
        np.testing.assert_allclose(own.center, x64.mean(axis=0), rtol=1e-9)
        np.testing.assert_allclose(own.scale, x64.std(axis=0), rtol=1e-9)
    centers = np.array([s.center for s in transform.local])
    assert len({tuple(c) for c in centers}) == len(rows)  # differs per client
    federated = _fit(rows).federated
    assert federated is not None and transform.federated is not None
    np.testing.assert_array_equal(transform.federated.center, federated.center)


# ---------------------------------------------------------------- missing values


def _with_missing(rows: list[np.ndarray]) -> list[np.ndarray]:
    out = [x.copy() for x in rows]
    out[0][[1, 5], 0] = np.nan
    out[2][3, 0] = np.nan
    return out


def test_mean_imputation_fills_and_adds_an_indicator_column() -> None:
    from fedpipe.data.preprocess import row_transform

    rows = _with_missing(_clients(7))
    transform = _fit(rows, missing="mean")
    assert transform.indicators == (0,) and transform.n_outputs == 4
    pooled = np.concatenate(rows).astype(np.float64)
    fitted = transform.federated
    assert fitted is not None and fitted.fill is not None
    np.testing.assert_allclose(fitted.fill[0], np.nanmean(pooled[:, 0]), rtol=1e-9)
    np.testing.assert_allclose(fitted.center[0], np.nanmean(pooled[:, 0]), rtol=1e-9)
    np.testing.assert_allclose(fitted.scale[0], np.nanstd(pooled[:, 0]), rtol=1e-9)
    out = row_transform(transform, None)(rows[0])  # type: ignore[misc]
    assert out.shape == (len(rows[0]), 4) and np.isfinite(out).all()
    np.testing.assert_array_equal(out[:, 3], np.isnan(rows[0][:, 0]))
    assert out[1, 0] == pytest.approx(0.0, abs=1e-6)  # the mean, standardized


def test_median_imputation_fills_with_the_histogram_median() -> None:
    rows = _with_missing(_clients(8))
    transform = _fit(rows, missing="median", bins=128)
    pooled = np.concatenate(rows).astype(np.float64)
    col = pooled[:, 0][~np.isnan(pooled[:, 0])]
    width = (col.max() - col.min()) / 128
    assert transform.federated is not None and transform.federated.fill is not None
    assert abs(transform.federated.fill[0] - np.median(col)) <= width


def test_refuse_names_the_key_that_changes_it() -> None:
    rows = _with_missing(_clients(9))
    with pytest.raises(PreprocessError, match=r"preprocess\.missing") as info:
        _fit(rows, missing="refuse")
    assert isinstance(info.value, FedpipeError)
    assert "mean or median" in str(info.value)


def test_a_column_without_any_training_value_is_named() -> None:
    rows = _clients(10)
    for x in rows:
        x[:, 1] = np.nan
    with pytest.raises(PreprocessError, match="'mid'"):
        _fit(rows, missing="mean")


# ---------------------------------------------------------------- the JSON


def test_transform_json_round_trips_exactly(tmp_path: Path) -> None:
    transform = _fit(_with_missing(_clients(11)), missing="mean", fit="local")
    write_json(tmp_path / "t.json", transform.to_json())
    back = read_transform(tmp_path / "t.json")
    assert back.to_json() == transform.to_json()
    raw = json.loads((tmp_path / "t.json").read_text())
    assert raw["settings"] == {
        "numeric": "standard",
        "fit": "local",
        "missing": "mean",
        "bins": 256,
    }
    assert raw["indicators"] == ["tiny"]
    assert set(raw["statistics"]["columns"]["huge"]) >= {
        "mean",
        "std",
        "q50",
        "missing",
    }


# ---------------------------------------------------------------- a prepared table


def _prepared_table(
    root: Path, *, missing: bool = False, fit: str = "federated"
) -> dict:
    rng = np.random.default_rng(0)
    n = 160
    labels = rng.integers(0, 2, size=n)
    df = pd.DataFrame(
        {
            "a": rng.normal(0, 1e-3, n) + labels * 1e-3,
            "b": rng.normal(100, 20, n),
            "c": rng.normal(4000, 900, n) - labels * 500,
            "label": labels,
        }
    )
    if missing:
        df.loc[rng.choice(n, 8, replace=False), "b"] = np.nan
    df.to_csv(root / "table.csv", index=False)
    prepared = root / "prepared"
    ingest_table(root / "table.csv", out_dir=prepared, label_column="label")
    manifest = partition_table(
        read_samples(prepared),
        classes=[0, 1],
        seed=1,
        test_fraction=0.2,
        method="iid",
        n_clients=4,
        local_test_fraction=0.25,
        dedupe=True,
        settings={"min_samples": 5, "min_classes": 1},
    )
    write_json(root / "manifest.json", manifest)
    settings = PreprocessParams(missing="mean" if missing else "refuse", fit=fit)
    return {
        "prepared": prepared,
        "manifest": root / "manifest.json",
        "settings": settings,
        "samples": read_samples(prepared),
        "raw": manifest,
    }


def _rows_of(table: dict, ids: list[str]) -> np.ndarray:
    position = {s: i for i, s in enumerate(table["samples"]["sample_id"])}
    return np.array([position[i] for i in ids], dtype=np.int64)


def _scramble(table: dict, ids: list[str]) -> None:
    """Rewrite these samples' features in features.npy (same file size)."""
    features = np.load(table["prepared"] / "features.npy", mmap_mode="r+")
    features[_rows_of(table, ids)] = 1e6
    features.flush()
    del features


def test_the_fit_equals_the_pooled_client_training_rows(tmp_path: Path) -> None:
    table = _prepared_table(tmp_path)
    transform = fit_prepared(table["prepared"], table["manifest"], table["settings"])
    train = [i for c in table["raw"]["clients"] for i in c["train"]]
    features = np.load(table["prepared"] / "features.npy")
    pooled = features[_rows_of(table, train)].astype(np.float64)
    assert transform.federated is not None
    np.testing.assert_allclose(
        transform.federated.center, pooled.mean(axis=0), rtol=1e-9
    )
    np.testing.assert_allclose(transform.federated.scale, pooled.std(axis=0), rtol=1e-9)


@pytest.mark.parametrize("fit", ["federated", "local"])
def test_test_splits_and_the_heldout_set_do_not_influence_the_fit(
    tmp_path: Path, fit: str
) -> None:
    table = _prepared_table(tmp_path, fit=fit)
    before = fit_prepared(table["prepared"], table["manifest"], table["settings"])
    tests = [i for c in table["raw"]["clients"] for i in c["test"]]
    _scramble(table, table["raw"]["heldout"] + tests)
    after = fit_prepared(table["prepared"], table["manifest"], table["settings"])
    assert after.to_json() == before.to_json()
    # ... while a client's training rows do
    _scramble(table, table["raw"]["clients"][0]["train"][:3])
    changed = fit_prepared(table["prepared"], table["manifest"], table["settings"])
    assert changed.to_json() != before.to_json()


def test_the_federation_reads_its_splits_through_the_transform(tmp_path: Path) -> None:
    table = _prepared_table(tmp_path, missing=True, fit="local")
    transform = fit_prepared(table["prepared"], table["manifest"], table["settings"])
    write_json(tmp_path / "transform.json", transform.to_json())
    data = open_federated(
        table["prepared"], table["manifest"], tmp_path / "transform.json"
    )
    assert data.spec.input_shape == (4,)  # 3 columns + the indicator of "b"
    for i, client in enumerate(data.clients):
        x = client.x_train
        assert x.shape[1] == 4 and np.isfinite(x).all()
        # each client's own training rows standardized by its own statistics
        np.testing.assert_allclose(x[:, [0, 2]].mean(axis=0), 0.0, atol=1e-5)
        assert client.x_test.shape[1] == 4
        assert data.clients[i].x_train_lazy.shape == x.shape
    assert data.x_test.shape == (len(table["raw"]["heldout"]), 4)
    assert np.isfinite(data.x_test).all()
    raw = open_federated(table["prepared"], table["manifest"])
    assert raw.spec.input_shape == (3,) and raw.clients[0].x_train.shape[1] == 3


def test_image_data_gets_an_identity_transform(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(60, 4, 4, 1), dtype=np.uint8)
    y = np.arange(60) % 2
    prepared = tmp_path / "prepared"
    ingest_arrays(
        x, y, out_dir=prepared, source="digits", class_names=["0", "1"],
        value_range=(0.0, 255.0), scale=255.0,
    )  # fmt: skip
    manifest = partition_table(
        read_samples(prepared), classes=[0, 1], seed=1, test_fraction=0.2,
        method="iid", n_clients=2, local_test_fraction=0.2, dedupe=True,
        settings={"min_samples": 5, "min_classes": 1},
    )  # fmt: skip
    write_json(tmp_path / "manifest.json", manifest)
    transform = fit_prepared(prepared, tmp_path / "manifest.json", PreprocessParams())
    assert transform.is_identity
    write_json(tmp_path / "transform.json", transform.to_json())
    assert read_json(tmp_path / "transform.json")["kind"] == "identity"
    with_t = open_federated(
        prepared, tmp_path / "manifest.json", tmp_path / "transform.json"
    )
    without = open_federated(prepared, tmp_path / "manifest.json")
    assert with_t.spec == without.spec
    np.testing.assert_array_equal(with_t.clients[1].x_train, without.clients[1].x_train)
    np.testing.assert_array_equal(with_t.x_test, without.x_test)


def test_a_client_sent_to_another_process_keeps_its_transform(tmp_path: Path) -> None:
    """Client data travels by reference (Dask): the reference names the
    transform, so the receiving process reads the same transformed rows."""
    import pickle

    from fedpipe.data.splits import forget_opened

    table = _prepared_table(tmp_path, missing=True, fit="local")
    transform = fit_prepared(table["prepared"], table["manifest"], table["settings"])
    write_json(tmp_path / "transform.json", transform.to_json())
    data = open_federated(
        table["prepared"], table["manifest"], tmp_path / "transform.json"
    )
    payload = pickle.dumps(data.clients[2])
    assert len(payload) < 2000  # a reference, not the rows
    expected = data.clients[2].x_train
    forget_opened()  # as a fresh worker process
    client = pickle.loads(payload)
    np.testing.assert_array_equal(client.x_train, expected)
    assert client.x_train.shape[1] == 4

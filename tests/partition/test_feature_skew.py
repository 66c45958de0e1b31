"""Feature skew over any partition (noise, domains), the continuous partitioner,
and the feature-skew figure of the partition report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedpipe.config.params import (
    ParamsError,
    PartitionParams,
    parse_params,
    round_chain,
)
from fedpipe.data.ingest import (
    ingest_arrays,
    ingest_table,
    open_features,
    read_samples,
    read_schema,
)
from fedpipe.data.partition import PartitionError
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.partition.diagnostics import (
    feature_skew,
    feature_skew_plot,
    feature_stats,
)
from fedpipe.data.sources import prepared_spec
from fedpipe.data.splits import FederatedData, federated_data

N_CLIENTS = 5


def _digits(n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` distinct 12x12 grey images: a bright bar on a dark, faintly noisy
    background (MNIST-like)."""
    x = rng.integers(0, 20, size=(n, 12, 12, 1)).astype(np.uint8)
    for i in range(n):
        row = int(rng.integers(2, 10))
        x[i, row - 1 : row + 2, 2:10, 0] = rng.integers(150, 256)
    return x


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    ingest_arrays(
        _digits(400, rng),
        np.arange(400) % 4,
        out_dir=root,
        source="random",
        class_names=["a", "b", "c", "d"],
        value_range=(0.0, 255.0),
        scale=255.0,
    )
    return root


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("table")
    rng = np.random.default_rng(1)
    x = rng.normal([0.0, 10.0, -3.0], [1.0, 2.0, 0.5], size=(300, 3))
    ingest_arrays(
        x.astype(np.float32),
        np.arange(300) % 2,
        out_dir=root,
        source="table",
        class_names=["no", "yes"],
        value_range=(-100.0, 100.0),
        scale=1.0,
    )
    return root


def _manifest(
    prepared: Path, *, method: str = "iid", seed: int = 0, **partition: Any
) -> dict[str, Any]:
    settings = PartitionParams(method=method, **partition).model_dump(
        exclude={"method", "local_test_fraction"}
    )
    settings["min_samples"] = 2
    n_classes = len(np.unique(read_samples(prepared)["label"]))
    spec = prepared_spec(prepared)
    return partition_table(
        read_samples(prepared),
        classes=list(range(n_classes)),
        seed=seed,
        test_fraction=0.2,
        method=method,
        n_clients=N_CLIENTS,
        local_test_fraction=0.2,
        dedupe=False,
        settings=settings,
        features=open_features(prepared),
        spec=spec,
        feature_names=["a", "b", "c"] if len(spec.input_shape) == 1 else None,
    )


def _data(prepared: Path, manifest: dict[str, Any]) -> FederatedData:
    return federated_data(
        open_features(prepared),
        read_samples(prepared),
        json.loads(json.dumps(manifest)),  # as the stage writes and reads it
        prepared_spec(prepared),
    )


def _figure(prepared: Path, manifest: dict[str, Any], *, image: bool) -> float:
    data = _data(prepared, manifest)
    table = feature_stats(
        [(c.client, c.x_train_lazy) for c in data.clients], image=image
    )
    return feature_skew(table)


# ---------------------------------------------------------------- noise


def test_noise_is_recorded_per_client_and_grows_with_its_index(images: Path) -> None:
    manifest = _manifest(images, feature_skew="noise", noise_sigma=0.5)
    assert manifest["params"]["feature_skew"] == "noise"
    assert manifest["params"]["noise_sigma"] == 0.5
    stds = [c["feature_transform"]["std"] for c in manifest["clients"]]
    assert stds == pytest.approx([0.5 * (k + 1) / N_CLIENTS for k in range(5)])
    clean = _data(images, _manifest(images))
    noisy = _data(images, manifest)
    for k in (0, 4):
        added = noisy.clients[k].x_train - clean.clients[k].x_train
        assert added.std() == pytest.approx(stds[k], rel=0.05)
    # the held-out set is never skewed
    assert np.array_equal(noisy.x_test, clean.x_test)


def test_same_seed_same_bits_other_seed_other_noise(images: Path) -> None:
    one = _manifest(images, feature_skew="noise", noise_sigma=0.3)
    two = _manifest(images, feature_skew="noise", noise_sigma=0.3)
    assert one == two
    a, b = _data(images, one), _data(images, two)
    assert np.array_equal(a.clients[2].x_train, b.clients[2].x_train)
    other = _data(images, _manifest(images, seed=1, feature_skew="noise"))
    assert not np.array_equal(a.clients[2].x_test, other.clients[2].x_test)


def test_a_row_is_skewed_the_same_in_any_chunk(images: Path) -> None:
    data = _data(images, _manifest(images, feature_skew="noise", noise_sigma=0.3))
    view = data.clients[3].x_train_lazy
    whole = view[:]
    parts = np.concatenate([view[:7], view[7:20], view[20:]])
    assert np.array_equal(whole, parts)
    picked = np.array([11, 2, 30])
    assert np.array_equal(view[picked], whole[picked])


def test_feature_skew_composes_with_the_label_partition(images: Path) -> None:
    plain = _manifest(images, method="dirichlet", alpha=0.3)
    skewed = _manifest(images, method="dirichlet", alpha=0.3, feature_skew="noise")
    for a, b in zip(plain["clients"], skewed["clients"], strict=True):
        assert (a["train"], a["test"]) == (b["train"], b["test"])
    assert skewed["params"]["alpha"] == 0.3


def test_no_feature_skew_leaves_the_manifest_as_it_was(images: Path) -> None:
    manifest = _manifest(images)
    without_inputs = partition_table(
        read_samples(images),
        classes=[0, 1, 2, 3],
        seed=0,
        test_fraction=0.2,
        method="iid",
        n_clients=N_CLIENTS,
        local_test_fraction=0.2,
        dedupe=False,
        settings={
            **PartitionParams().model_dump(exclude={"method", "local_test_fraction"}),
            "min_samples": 2,
        },
    )
    assert manifest == without_inputs
    assert "feature_transform" not in json.dumps(manifest)
    assert "feature_skew" not in manifest["params"]


# ---------------------------------------------------------------- domains


def test_image_domains_are_seeded_transforms_one_per_client(images: Path) -> None:
    manifest = _manifest(images, feature_skew="domains")
    kinds = [c["feature_transform"]["kind"] for c in manifest["clients"]]
    assert kinds == ["rotation", "contrast", "inversion", "blur", "rotation"]
    assert manifest == _manifest(images, feature_skew="domains")
    angles = [c["feature_transform"] for c in manifest["clients"][::4]]
    assert angles[0]["degrees"] != angles[1]["degrees"]  # each client its own domain
    clean, skewed = _data(images, _manifest(images)), _data(images, manifest)
    x, x_inv = clean.clients[2].x_train, skewed.clients[2].x_train
    assert np.array_equal(x_inv, np.float32(1.0) - x)
    blurred = skewed.clients[3].x_train
    assert blurred.std() < clean.clients[3].x_train.std()
    assert blurred.max() < clean.clients[3].x_train.max()
    rotated = skewed.clients[0].x_train
    assert rotated.shape == x.shape and not np.array_equal(
        rotated, clean.clients[0].x_train
    )
    assert 0.0 <= rotated.min() and rotated.max() <= 1.0


def test_chosen_transforms_cycle_over_the_clients(images: Path) -> None:
    manifest = _manifest(
        images, feature_skew="domains", domain_transforms=["identity", "inversion"]
    )
    kinds = [c["feature_transform"]["kind"] for c in manifest["clients"]]
    assert kinds == ["identity", "inversion", "identity", "inversion", "identity"]
    assert manifest["params"]["domain_transforms"] == ["identity", "inversion"]
    clean, skewed = _data(images, _manifest(images)), _data(images, manifest)
    assert np.array_equal(clean.clients[0].x_train, skewed.clients[0].x_train)


COLORS = ["blue", "green", "red", "violet"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three numeric columns (a, b, c) and a string column (color), from a CSV."""
    root = tmp_path_factory.mktemp("mixed")
    rng = np.random.default_rng(4)
    n = 300
    x = rng.normal([0.0, 10.0, -3.0], [1.0, 2.0, 0.5], size=(n, 3))
    frame = pd.DataFrame(x, columns=["a", "b", "c"])
    frame["color"] = rng.choice(COLORS, size=n, p=[0.4, 0.3, 0.2, 0.1])
    frame["label"] = np.arange(n) % 2
    frame.to_csv(root / "t.csv", index=False)
    ingest_table(root / "t.csv", out_dir=root / "prepared", label_column="label")
    return root / "prepared"


def _mixed_data(prepared: Path, **partition: Any) -> FederatedData:
    """Each client's rows of ``prepared`` (feature skew as ``partition`` says)."""
    settings = PartitionParams(method="iid", **partition).model_dump(
        exclude={"method", "local_test_fraction"}
    )
    schema = read_schema(prepared)
    manifest = partition_table(
        read_samples(prepared), classes=[0, 1], seed=0, test_fraction=0.2,
        method="iid", n_clients=N_CLIENTS, local_test_fraction=0.2, dedupe=False,
        settings={**settings, "min_samples": 2}, features=open_features(prepared),
        spec=prepared_spec(prepared), feature_names=schema["feature_names"],
        column_types=schema.get("column_types"),
    )  # fmt: skip
    return _data(prepared, manifest)


def _colors(prepared: Path, rows: np.ndarray) -> list[str]:
    """The color of each row, read back from its code (a code must stay a code)."""
    codes = rows[:, 3]
    assert np.array_equal(codes, np.round(codes)), "codes are no longer codes"
    values = read_schema(prepared)["strings"]["color"]
    return [values[int(c)] for c in codes]


def test_table_domains_shift_and_rescale_only_the_chosen_columns(mixed: Path) -> None:
    """What docs/own-data.md promises, measured on the rows (not read from the
    transform's own record): each client's ``b`` is ``b`` rescaled by a factor
    in 0.5..2 about the pooled mean of ``b`` and shifted by at most 1.5 pooled
    std, each client by its own amounts; ``a``, ``c`` and the string column
    ``color`` are as they were."""
    assert read_schema(mixed)["feature_names"] == ["a", "b", "c", "color"]
    clean = _mixed_data(mixed)
    skewed = _mixed_data(mixed, feature_skew="domains", domain_columns=["b"])
    # the training pool: every client's rows (train and local test), unskewed
    pool = np.concatenate([r for c in clean.clients for r in (c.x_train, c.x_test)])
    mean, std = pool[:, 1].astype(np.float64).mean(), pool[:, 1].std()
    scales, shifts = [], []
    for before, after in zip(clean.clients, skewed.clients, strict=True):
        x, y = before.x_train, after.x_train
        assert np.array_equal(x[:, [0, 2, 3]], y[:, [0, 2, 3]])
        assert _colors(mixed, y) == _colors(mixed, x)
        # y = scale * (x - mean) + mean + shift, for every row of the client
        scale, intercept = np.polyfit(x[:, 1], y[:, 1], 1)
        np.testing.assert_allclose(y[:, 1], scale * x[:, 1] + intercept, atol=1e-3)
        shift = intercept - mean * (1.0 - scale)
        assert 0.5 <= scale <= 2.0 and abs(shift) <= 1.5 * std
        # the client's mean of b moved by exactly that much
        moved = y[:, 1].astype(np.float64).mean() - x[:, 1].astype(np.float64).mean()
        expected = (scale - 1) * (x[:, 1].astype(np.float64).mean() - mean) + shift
        assert moved == pytest.approx(expected, abs=1e-4)
        scales.append(scale)
        shifts.append(shift)
    # each client its own domain, and a domain that changes something
    assert len({round(s, 3) for s in scales}) == N_CLIENTS
    assert max(abs(np.log(scales))) > np.log(1.2) and max(np.abs(shifts)) > 0.2 * std
    # the held-out set is never skewed
    assert np.array_equal(skewed.x_test, clean.x_test)


def test_table_noise_leaves_the_string_column_as_it_was(mixed: Path) -> None:
    """``noise`` on a table with a string column: Gaussian noise of std
    sigma (k + 1) / N on client k's numeric columns, measured; the colors of
    every row as they were."""
    clean = _mixed_data(mixed)
    noisy = _mixed_data(mixed, feature_skew="noise", noise_sigma=1.0)
    for k, (before, after) in enumerate(zip(clean.clients, noisy.clients, strict=True)):
        x, y = before.x_train, after.x_train
        assert _colors(mixed, y) == _colors(mixed, x)
        added = (y[:, :3] - x[:, :3]).astype(np.float64)
        assert abs(added.mean()) < 0.35 * (k + 1) / N_CLIENTS
        assert added.std() == pytest.approx((k + 1) / N_CLIENTS, rel=0.15)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("partition", "key"),
    [
        ({"noise_sigma": -0.1}, "partition.noise_sigma"),
        ({"feature_skew": "blurry"}, "partition.feature_skew"),
        ({"domain_transforms": ["rotation", "spin"]}, "partition.domain_transforms"),
        ({"strictness": 1.5}, "partition.strictness"),
    ],
)
def test_bad_settings_name_their_key(partition: dict[str, Any], key: str) -> None:
    raw = {"federation": {"clients": 4, "rounds": 1}, "round_chain": round_chain(1)}
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        parse_params({**raw, "partition": partition})


@pytest.mark.parametrize(
    ("which", "partition", "message"),
    [
        (
            "table",
            {"feature_skew": "domains", "domain_transforms": ["rotation"]},
            "partition.domain_transforms: unknown 'rotation' for tables; "
            "allowed: affine, identity",
        ),
        (
            "images",
            {"feature_skew": "domains", "domain_transforms": ["affine"]},
            "partition.domain_transforms: unknown 'affine' for images",
        ),
        (
            "table",
            {"feature_skew": "domains", "domain_columns": ["z"]},
            "partition.domain_columns: 'z' is not a feature column; allowed: a, b, c",
        ),
        (
            "images",
            {"method": "continuous", "strictness": 1.0, "continuous_by": "a"},
            "partition.continuous_by: 'a' is not an image property",
        ),
        (
            "table",
            {"method": "continuous", "strictness": 1.0},
            "partition.continuous_by: 'mean_intensity' is not a feature column",
        ),
    ],
)
def test_settings_that_do_not_fit_the_data_name_their_key(
    which: str,
    partition: dict[str, Any],
    message: str,
    images: Path,
    table: Path,
) -> None:
    prepared = images if which == "images" else table
    with pytest.raises(PartitionError, match="^" + message.replace(".", r"\.")):
        _manifest(prepared, **partition)


def test_a_negative_sigma_is_refused_in_the_library_too() -> None:
    from fedpipe.data.partition import client_feature_transforms

    with pytest.raises(PartitionError, match=r"partition\.noise_sigma must be"):
        client_feature_transforms(
            "noise",
            n_clients=3,
            seed=0,
            input_shape=(4, 4, 1),
            value_range=(0.0, 1.0),
            noise_sigma=-1.0,
        )


# ---------------------------------------------------------------- continuous


def test_strict_continuous_sorts_clients_by_mean_intensity(images: Path) -> None:
    manifest = _manifest(images, method="continuous", strictness=1.0)
    data = _data(images, manifest)
    means = [
        np.concatenate([c.x_train, c.x_test]).mean(axis=(1, 2, 3)) for c in data.clients
    ]
    for low, high in zip(means, means[1:], strict=False):
        assert low.max() <= high.min()
    assert manifest == _manifest(images, method="continuous", strictness=1.0)
    assert manifest["params"]["continuous_by"] == "mean_intensity"


def test_continuous_strictness_moves_from_sorted_to_iid(images: Path) -> None:
    figures = [
        _figure(
            images, _manifest(images, method="continuous", strictness=s), image=True
        )
        for s in (0.0, 0.5, 1.0)
    ]
    assert figures[0] < figures[1] < figures[2]


def test_continuous_by_a_table_column(table: Path) -> None:
    manifest = _manifest(table, method="continuous", strictness=1.0, continuous_by="b")
    data = _data(table, manifest)
    column = [np.concatenate([c.x_train, c.x_test])[:, 1] for c in data.clients]
    assert column[0].max() <= column[1].min()


def test_continuous_without_the_inputs_says_so(images: Path) -> None:
    settings = PartitionParams(method="continuous").model_dump(
        exclude={"method", "local_test_fraction"}
    )
    with pytest.raises(PartitionError, match="reads the inputs"):
        partition_table(
            read_samples(images),
            classes=[0, 1, 2, 3],
            seed=0,
            test_fraction=0.2,
            method="continuous",
            n_clients=3,
            local_test_fraction=0.2,
            dedupe=False,
            settings=settings,
        )


# ---------------------------------------------------------------- the report


def test_the_image_feature_skew_figure_rises_with_sigma(images: Path) -> None:
    figures = [
        _figure(
            images, _manifest(images, feature_skew="noise", noise_sigma=s), image=True
        )
        for s in (0.0, 0.05, 0.2, 0.5)
    ]
    assert figures == sorted(figures) and len(set(figures)) == 4
    assert figures[-1] > 3 * figures[0]


def test_the_table_feature_skew_figure_rises_with_sigma(table: Path) -> None:
    figures = [
        _figure(
            table, _manifest(table, feature_skew="noise", noise_sigma=s), image=False
        )
        for s in (0.0, 1.0, 4.0)  # in the columns' units (their stds: 1, 2, 0.5)
    ]
    assert figures[0] < figures[1] < figures[2]


def test_domains_show_as_feature_skew(images: Path, table: Path) -> None:
    for prepared, image in ((images, True), (table, False)):
        plain = _figure(prepared, _manifest(prepared), image=image)
        domains = _figure(
            prepared, _manifest(prepared, feature_skew="domains"), image=image
        )
        assert domains > 2 * plain


def test_table_stats_are_in_global_std_units() -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(0.0, 1.0, size=(4000, 2))
    b = rng.normal(0.0, 1.0, size=(4000, 2))
    b[:, 0] += 2.0  # client 1's first column sits 2 (its own) std higher
    table = feature_stats([(0, a), (1, b)], image=False)
    # pooled std of column 0 is sqrt(1 + 1) = 1.41; each client is 1 from the pooled
    # mean: 1 / 1.41 = 0.71 in column 0, 0 in column 1 -> rms 0.5
    assert table["location"].tolist() == pytest.approx([0.5, 0.5], abs=0.03)


def test_the_plot_is_written(images: Path, tmp_path: Path) -> None:
    data = _data(images, _manifest(images, feature_skew="noise"))
    table = feature_stats(
        [(c.client, c.x_train_lazy) for c in data.clients], image=True
    )
    feature_skew_plot(table, tmp_path / "sub" / "feature_skew.png", image=True)
    assert (tmp_path / "sub" / "feature_skew.png").read_bytes()[:4] == b"\x89PNG"


def test_status_shows_both_skews() -> None:
    from fedpipe.observe.status import _skew_text

    part = {"skew": {"label_skew": 0.4123, "feature_skew": 0.0712, "n_clients": 3}}
    assert _skew_text(part) == "; label skew 0.412, feature skew 0.071"
    assert _skew_text({"skew": {}}) == ""


def test_a_quarter_turn_is_a_quarter_turn() -> None:
    from fedpipe.data.partition import apply_feature_transform

    x = np.random.default_rng(0).random((2, 7, 7, 3), dtype=np.float32)
    turned = apply_feature_transform(
        {"kind": "rotation", "degrees": 90.0}, x, np.arange(2)
    )
    np.testing.assert_allclose(turned, np.rot90(x, -1, axes=(1, 2)), atol=1e-5)
    with pytest.raises(PartitionError, match="unknown feature_transform 'spin'"):
        apply_feature_transform({"kind": "spin"}, x, np.arange(2))


def test_affine_measures_columns_without_their_missing_values() -> None:
    from fedpipe.data.partition import (
        apply_feature_transform,
        client_feature_transforms,
    )

    pool = np.array([[1.0, np.nan], [3.0, 5.0], [np.nan, 7.0]], dtype=np.float32)
    (spec,) = client_feature_transforms(
        "domains",
        n_clients=1,
        seed=0,
        input_shape=(2,),
        value_range=(-10.0, 10.0),
        feature_names=["u", "v"],
        pool=pool,
    )
    assert spec["center"] == [2.0, 6.0]
    out = apply_feature_transform(spec, pool, np.arange(3))
    assert np.isnan(out[0, 1]) and np.isnan(out[2, 0])
    assert np.isfinite(out[1]).all()

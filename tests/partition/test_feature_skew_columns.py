"""Feature skew on a table changes its numeric columns only (categories and
texts stay as they were, the manifest and report say which columns), and the
table feature-skew figure is not inflated by near-constant columns."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedpipe.config.params import PartitionParams, PreprocessParams
from fedpipe.core.jsonio import write_json
from fedpipe.data.ingest import ingest_table, open_features, read_samples, read_schema
from fedpipe.data.partition import PartitionError
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.partition.diagnostics import feature_skew, feature_stats
from fedpipe.data.preprocess import fit_prepared
from fedpipe.data.sources import prepared_spec
from fedpipe.data.splits import open_federated

COLORS = ["blue", "green", "red", "violet"]


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A table with a numeric, a categorical and a text column."""
    root = tmp_path_factory.mktemp("strings")
    rng = np.random.default_rng(3)
    n = 240
    pd.DataFrame(
        {
            "size": rng.normal(10.0, 2.0, n),
            "color": rng.choice(COLORS, size=n, p=[0.36, 0.29, 0.29, 0.06]),
            "note": rng.choice(["good film", "bad plot", "the end"], size=n),
            "label": np.arange(n) % 2,
        }
    ).to_csv(root / "t.csv", index=False)
    ingest_table(
        root / "t.csv", out_dir=root / "prepared", label_column="label", text=["note"]
    )
    return root / "prepared"


def _manifest(prepared: Path, root: Path, **partition: Any) -> Path:
    settings = PartitionParams(method="iid", **partition).model_dump(
        exclude={"method", "local_test_fraction"}
    )
    schema = read_schema(prepared)
    manifest = partition_table(
        read_samples(prepared), classes=[0, 1], seed=0, test_fraction=0.2,
        method="iid", n_clients=4, local_test_fraction=0.2, dedupe=False,
        settings=settings, features=open_features(prepared),
        spec=prepared_spec(prepared), feature_names=schema["feature_names"],
        column_types=schema.get("column_types"),
    )  # fmt: skip
    path = root / f"manifest-{len(list(root.glob('manifest-*')))}.json"
    write_json(path, manifest)
    return path


def _client_colors(prepared: Path, manifest: Path) -> list[Counter[str]]:
    """Each client's training rows per color, as the skewed rows hold them."""
    values = read_schema(prepared)["strings"]["color"]
    out = []
    for client in open_federated(prepared, manifest).clients:
        codes = client.x_train[:, 1]
        assert np.array_equal(codes, np.round(codes)), "codes are no longer codes"
        out.append(Counter(values[int(c)] for c in codes))
    return out


@pytest.mark.parametrize(
    "skew",
    [
        {"feature_skew": "noise", "noise_sigma": 2.0},
        {"feature_skew": "domains"},
    ],
)
def test_feature_skew_leaves_categories_and_texts_as_they_were(
    table: Path, tmp_path: Path, skew: dict[str, Any]
) -> None:
    plain = _manifest(table, tmp_path)
    skewed = _manifest(table, tmp_path, **skew)
    assert _client_colors(table, skewed) == _client_colors(table, plain)
    before = open_federated(table, plain).clients
    after = open_federated(table, skewed).clients
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a.x_train[:, 1:], b.x_train[:, 1:])
        assert not np.array_equal(a.x_train[:, 0], b.x_train[:, 0])  # size: skewed
    # the preprocess stage fits on the skewed rows (it used to stop here)
    transform = fit_prepared(table, skewed, PreprocessParams(text=["note"]))
    (color,) = [e for e in transform.encodings if e.name == "color"]
    assert set(color.vocabulary) <= set(COLORS)


def test_the_manifest_says_which_columns_were_skewed(
    table: Path, tmp_path: Path
) -> None:
    import json

    manifest = json.loads(_manifest(table, tmp_path, feature_skew="noise").read_text())
    assert manifest["feature_skew_columns"] == {
        "skewed": ["size"],
        "left_alone": {"color": "categorical", "note": "text"},
    }
    assert manifest["clients"][0]["feature_transform"]["columns"] == [0]


def test_a_categorical_domain_column_is_refused_by_name(
    table: Path, tmp_path: Path
) -> None:
    with pytest.raises(PartitionError, match=r"domain_columns: 'color' \(categorical"):
        _manifest(table, tmp_path, feature_skew="domains", domain_columns=["color"])


def _iid(x: np.ndarray, n_clients: int, seed: int = 0) -> list[tuple[int, Any]]:
    order = np.random.default_rng(seed).permutation(len(x))
    return list(enumerate(x[p] for p in np.array_split(order, n_clients)))


def test_a_near_constant_column_does_not_inflate_the_iid_figure() -> None:
    rng = np.random.default_rng(0)
    n = 2000
    x = rng.normal(0.0, 1.0, size=(n, 5))
    rare = np.zeros(n)
    rare[rng.choice(n, size=4, replace=False)] = 1.0  # most clients: all zero
    x = np.column_stack([x, rare])
    figure = feature_skew(feature_stats(_iid(x, 10), image=False))
    assert figure < 0.2


def test_small_iid_clients_sit_near_zero() -> None:
    x = np.random.default_rng(1).normal(0.0, 1.0, size=(150, 4))
    figure = feature_skew(feature_stats(_iid(x, 10), image=False))  # 15 rows each
    assert figure < 0.2


def test_a_public_table_iid_figure_is_small_and_a_real_skew_still_shows() -> None:
    # scikit-learn's bundled digits as a table: 64 pixel columns, many nearly
    # always 0 (the figure was 6.8 here: a client's std of 0 on them)
    from sklearn.datasets import load_digits

    x = load_digits().data
    assert feature_skew(feature_stats(_iid(x, 10), image=False)) < 0.2
    shifted = [(k, rows * (1.0 + 0.5 * k) + k) for k, rows in _iid(x, 4)]
    assert feature_skew(feature_stats(shifted, image=False)) > 0.5


def test_only_the_listed_columns_are_measured() -> None:
    rng = np.random.default_rng(2)
    a = rng.normal(0.0, 1.0, size=(500, 2))
    b = rng.normal(0.0, 1.0, size=(500, 2))
    b[:, 1] += 5.0  # the second column (a code, say) differs; the first does not
    both = feature_stats([(0, a), (1, b)], image=False)
    first = feature_stats([(0, a), (1, b)], image=False, columns=[0])
    assert feature_skew(both) > 0.5 > 0.2 > feature_skew(first)

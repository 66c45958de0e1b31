"""Tests for fedpipe.data.partition.diagnostics: count table, heatmap, skew summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedpipe.data.partition import (
    PartitionError,
    build_manifest,
    class_count_table,
    label_heatmap,
    label_skew,
    make_partitioner,
    skew_summary,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _manifest(
    method: str = "pathological",
    *,
    n: int = 600,
    n_classes: int = 10,
    n_clients: int = 6,
    seed: int = 0,
    **settings: object,
) -> dict:
    """A real manifest: classes 3..3+n_classes (not 0-based), 20% local test."""
    labels = 3 + np.arange(n) % n_classes
    settings = settings or {"classes_per_client": 2}
    shares = make_partitioner(method, min_samples=0, **settings).partition(
        labels, n_clients, np.random.default_rng(seed)
    )
    return build_manifest(
        sample_ids=np.arange(n),
        labels=labels,
        client_indices=shares,
        heldout_ids=np.array([], dtype=np.int64),
        local_test_fraction=0.2,
        rng=np.random.default_rng(seed),
        classes=list(range(3, 3 + n_classes)),
        method=method,
        params={**settings, "min_samples": 0, "seed": seed},
    )


# ---------------------------------------------------------------- class_count_table


def test_count_table_columns_and_rows() -> None:
    m = _manifest()
    table = class_count_table(m)
    assert list(table.columns) == ["client", "n_train", "n_test", *range(3, 13)]
    assert table["client"].tolist() == list(range(6))
    assert all(str(t) == "int64" for t in table.dtypes)


def test_count_table_columns_named_by_class_names() -> None:
    names = [f"class_{i}" for i in range(13)]
    table = class_count_table(_manifest(), class_names=names)
    assert list(table.columns)[3:] == names[3:]
    assert table.equals(
        class_count_table(_manifest()).set_axis(list(table.columns), axis=1)
    )


def test_count_table_adds_up_to_the_manifest() -> None:
    m = _manifest()
    table = class_count_table(m)
    class_cols = m["classes"]
    for row, client in zip(table.itertuples(index=False), m["clients"], strict=True):
        assert row.n_train == len(client["train"])
        assert row.n_test == len(client["test"])
    assert table[class_cols].to_numpy().tolist() == [
        c["train_class_counts"] for c in m["clients"]
    ]
    assert table[class_cols].sum(axis=1).tolist() == table["n_train"].tolist()
    assert int(table[class_cols].to_numpy().sum()) == sum(
        len(c["train"]) for c in m["clients"]
    )


def test_count_table_accepts_a_json_round_trip() -> None:
    m = _manifest()
    assert class_count_table(json.loads(json.dumps(m))).equals(class_count_table(m))


def test_count_table_rejects_counts_not_matching_classes() -> None:
    m = _manifest()
    m["clients"][2]["train_class_counts"] = [1, 2]
    with pytest.raises(PartitionError, match=r"client 2: train_class_counts has 2"):
        class_count_table(m)


# ---------------------------------------------------------------- label_heatmap


def test_heatmap_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "plots" / "labels.png"
    label_heatmap(_manifest(), out)
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000


def test_heatmap_many_clients_skips_row_labels_and_counts(tmp_path: Path) -> None:
    out = tmp_path / "labels.png"
    m = _manifest("dirichlet", n=3000, n_clients=80, alpha=0.3)
    label_heatmap(m, out)
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 10_000


def test_heatmap_without_clients_rejected(tmp_path: Path) -> None:
    m = _manifest()
    m["clients"] = []
    with pytest.raises(PartitionError, match="at least one client"):
        label_heatmap(m, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


# ---------------------------------------------------------------- skew_summary


def test_skew_summary_of_pathological_partition() -> None:
    m = _manifest()  # 600 balanced samples, 6 clients x 2 classes
    summary = skew_summary(m)
    assert list(summary) == [
        "n_clients",
        "label_skew",
        "size_cv",
        "min_client_size",
        "max_client_size",
        "min_classes_per_client",
    ]
    assert summary["n_clients"] == 6
    assert summary["label_skew"] == label_skew(m)
    assert summary["label_skew"] > 0.7
    assert summary["min_classes_per_client"] == 2
    assert summary["min_client_size"] + summary["max_client_size"] <= 600
    assert json.loads(json.dumps(summary)) == summary


def test_skew_summary_figures_from_counts() -> None:
    m = {
        "classes": [0, 1, 2],
        "clients": [
            {
                "client": 0,
                "train_class_counts": [8, 0, 0],
                "test_class_counts": [2, 0, 0],
            },
            {
                "client": 1,
                "train_class_counts": [10, 10, 0],
                "test_class_counts": [0, 0, 10],
            },
        ],
    }
    summary = skew_summary(m)
    # sizes 10 and 30: mean 20, population std 10
    assert summary["size_cv"] == pytest.approx(0.5)
    assert (summary["min_client_size"], summary["max_client_size"]) == (10, 30)
    assert summary["min_classes_per_client"] == 1


def test_skew_summary_size_cv_for_quantity_skew() -> None:
    equal = skew_summary(
        _manifest("quantity", n=2000, n_clients=20, quantity_sigma=0.0)
    )
    skewed = skew_summary(
        _manifest("quantity", n=2000, n_clients=20, quantity_sigma=1.0)
    )
    assert equal["size_cv"] < 0.05
    assert skewed["size_cv"] > 0.4


def test_skew_summary_without_clients_is_zero() -> None:
    summary = skew_summary({"classes": [0, 1], "clients": []})
    assert summary == {
        "n_clients": 0,
        "label_skew": 0.0,
        "size_cv": 0.0,
        "min_client_size": 0,
        "max_client_size": 0,
        "min_classes_per_client": 0,
    }


def test_importing_partition_loads_neither_pandas_nor_matplotlib() -> None:
    # the diagnostics import them on call, keeping the partitioners numpy-only
    code = (
        "import sys, fedpipe.data.partition\n"
        "print(sorted({'pandas', 'matplotlib'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# ------------------------------------------------- shown_counts (issue 36, item 7)


def _skewed_manifest() -> dict:
    """Three clients, two classes; client 2 holds 3 rows of class 4 (dirichlet
    with a tiny alpha leaves small cells)."""
    labels = np.r_[np.full(90, 3), np.full(30, 4)]
    shares = [np.arange(0, 40), np.r_[np.arange(40, 80), np.arange(90, 117)],
              np.r_[np.arange(80, 90), np.arange(117, 120)]]  # fmt: skip
    return build_manifest(
        sample_ids=np.arange(120),
        labels=labels,
        client_indices=shares,
        heldout_ids=np.array([], dtype=np.int64),
        local_test_fraction=0.0,
        rng=np.random.default_rng(0),
        classes=[3, 4],
        method="iid",
        params={"min_samples": 0, "seed": 0},
    )


def test_published_class_counts_hide_small_cells_and_their_complement() -> None:
    from fedpipe.data.partition.diagnostics import shown_counts

    exact = class_count_table(_skewed_manifest())
    assert exact.loc[2, [3, 4]].tolist() == [10, 3]  # what the partition made
    table = shown_counts(exact, 5)
    assert table.loc[2, ["n_train", "3", "4"]].tolist() == [13, ">=5", "<5"]
    assert table.loc[0, ["n_train", "3", "4"]].tolist() == [40, 40, 0]
    assert table["client"].tolist() == [0, 1, 2]
    for row in table.to_dict("records"):  # no count 1..4, none by difference
        cells = [row["n_train"], row["n_test"], row["3"], row["4"]]
        assert not [v for v in cells if isinstance(v, int) and 0 < v < 5]
        hidden = [v for v in (row["3"], row["4"]) if isinstance(v, str)]
        assert len(hidden) != 1


def test_the_report_shows_class_counts_under_the_rule(tmp_path: Path) -> None:
    """The report's class-count table (and its bars) from the manifest, when
    no class_counts.csv is there: '<5', never the 3 (it showed 1 and 3)."""
    from fedpipe.core.jsonio import write_json
    from fedpipe.observe.report import build_report

    write_json(tmp_path / "data/partition/manifest.json", _skewed_manifest())
    page = build_report(tmp_path, findings=[], generated=None)
    table = page[page.index("Class counts table") :]
    table = table[: table.index("</table>")]
    assert "<td>13</td><td>0</td><td>&gt;=5</td><td>&lt;5</td>" in table.replace(
        ' class="num"', ""
    )
    assert "<td>3</td>" not in table and "<td>10</td>" not in table

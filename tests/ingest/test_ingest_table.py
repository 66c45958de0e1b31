"""Tests for fedpipe.data.ingest.ingest_table: CSV and Parquet, and the bad-input corpus
(missing columns, NaN, strings in numbers, bad labels, unsupported files, ...)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fedpipe.data.ingest.table as table_module
from fedpipe.data.ingest import (
    IngestError,
    ingest_table,
    open_features,
    read_samples,
    read_schema,
    row_summaries,
)

# ---------------------------------------------------------------- helpers


def _frame() -> pd.DataFrame:
    """4 rows, 2 features, labels 0..2 (the good case)."""
    return pd.DataFrame(
        {
            "x1": [0.5, 1.0, -2.0, 3.25],
            "y": [0, 1, 2, 1],
            "x2": [10, 20, 30, 40],
        }
    )


def _csv(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _write(tmp_path: Path, frame: pd.DataFrame, name: str = "t.csv") -> Path:
    path = tmp_path / name
    if name.endswith((".parquet", ".pq")):
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)
    return path


def _ingest(path: Path, tmp_path: Path, **kwargs: object):
    kwargs.setdefault("label_column", "y")
    return ingest_table(path, out_dir=tmp_path / "out", **kwargs)


def _samples(tmp_path: Path) -> pd.DataFrame:
    return read_samples(tmp_path / "out")


def _features(tmp_path: Path) -> np.ndarray:
    return np.asarray(open_features(tmp_path / "out"))


# ---------------------------------------------------------------- good tables


def test_csv_features_in_file_order_as_float32(tmp_path: Path) -> None:
    _ingest(_write(tmp_path, _frame()), tmp_path)
    features = _features(tmp_path)
    assert features.dtype == np.float32
    np.testing.assert_array_equal(
        features, [[0.5, 10], [1.0, 20], [-2.0, 30], [3.25, 40]]
    )


def test_csv_samples(tmp_path: Path) -> None:
    path = _write(tmp_path, _frame())
    _ingest(path, tmp_path)
    samples = _samples(tmp_path)
    assert list(samples.columns) == [
        "sample_id",
        "label",
        "content_hash",
        "status",
        "source",
    ]
    assert samples["sample_id"].tolist() == ["row-1", "row-2", "row-3", "row-4"]
    assert samples["label"].tolist() == [0, 1, 2, 1]
    assert samples["status"].tolist() == ["ok"] * 4
    assert samples["source"].tolist() == [f"{path}:{n}" for n in range(1, 5)]


def test_csv_schema(tmp_path: Path) -> None:
    _ingest(_write(tmp_path, _frame()), tmp_path)
    assert read_schema(tmp_path / "out") == {
        "source": "table",
        "input_shape": [2],
        "dtype": "float32",
        "value_range": [-2.0, 40.0],
        "scale": 1.0,
        "classes": [0, 1, 2],
        "class_names": ["0", "1", "2"],
        "n_samples": 4,
        "feature_names": ["x1", "x2"],
    }


def test_csv_result(tmp_path: Path) -> None:
    result = _ingest(_write(tmp_path, _frame()), tmp_path)
    assert (result.n_samples, result.n_problems) == (4, 0)
    assert result.input_shape == (2,)
    assert result.class_names == ("0", "1", "2")


def test_parquet_gives_the_same_features_and_labels_as_csv(tmp_path: Path) -> None:
    _ingest(_write(tmp_path, _frame(), "t.parquet"), tmp_path)
    np.testing.assert_array_equal(
        _features(tmp_path), [[0.5, 10], [1.0, 20], [-2.0, 30], [3.25, 40]]
    )
    assert _samples(tmp_path)["label"].tolist() == [0, 1, 2, 1]
    assert read_schema(tmp_path / "out")["feature_names"] == ["x1", "x2"]


def test_pq_suffix_is_parquet(tmp_path: Path) -> None:
    result = _ingest(_write(tmp_path, _frame(), "t.pq"), tmp_path)
    assert result.n_samples == 4


def test_parquet_stored_index_is_not_a_feature(tmp_path: Path) -> None:
    frame = _frame().set_index(pd.Index(["a", "b", "c", "d"], name="key"))
    frame.to_parquet(tmp_path / "t.parquet")
    _ingest(tmp_path / "t.parquet", tmp_path)
    assert read_schema(tmp_path / "out")["feature_names"] == ["x1", "x2"]


def test_gzipped_csv(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress(_frame().to_csv(index=False).encode()))
    _ingest(path, tmp_path)
    assert _features(tmp_path)[3].tolist() == [3.25, 40.0]


def test_feature_columns_select_and_order(tmp_path: Path) -> None:
    _ingest(_write(tmp_path, _frame()), tmp_path, feature_columns=["x2"])
    assert _features(tmp_path)[:, 0].tolist() == [10, 20, 30, 40]
    assert read_schema(tmp_path / "out")["feature_names"] == ["x2"]


def test_id_column_becomes_sample_id(tmp_path: Path) -> None:
    frame = _frame().assign(uid=["p", "q", "r", "s"])
    _ingest(_write(tmp_path, frame), tmp_path, id_column="uid")
    assert _samples(tmp_path)["sample_id"].tolist() == ["p", "q", "r", "s"]
    assert read_schema(tmp_path / "out")["feature_names"] == ["x1", "x2"]


def test_integer_ids_from_parquet_are_text(tmp_path: Path) -> None:
    frame = _frame().assign(uid=[7, 8, 9, 10])
    _ingest(_write(tmp_path, frame, "t.parquet"), tmp_path, id_column="uid")
    assert _samples(tmp_path)["sample_id"].tolist() == ["7", "8", "9", "10"]


def test_client_column_kept_as_client_key(tmp_path: Path) -> None:
    frame = _frame().assign(site=["h1", "h2", "h1", "h3"])
    _ingest(_write(tmp_path, frame), tmp_path, client_column="site")
    samples = _samples(tmp_path)
    assert samples["client_key"].tolist() == ["h1", "h2", "h1", "h3"]
    assert read_schema(tmp_path / "out")["feature_names"] == ["x1", "x2"]


def test_missing_client_key_is_a_problem_row(tmp_path: Path) -> None:
    path = _csv(tmp_path, "x,y,site\n1,0,h1\n2,1,\n")
    _ingest(path, tmp_path, client_column="site")
    samples = _samples(tmp_path)
    assert samples["client_key"].tolist() == ["h1", ""]
    assert samples["status"].tolist() == ["ok", "client key missing in column 'site'"]


def test_two_ingests_are_byte_identical(tmp_path: Path) -> None:
    path = _write(tmp_path, _frame())
    ingest_table(path, out_dir=tmp_path / "one", label_column="y")
    ingest_table(path, out_dir=tmp_path / "two", label_column="y")
    for name in ("features.npy", "samples.parquet", "schema.json"):
        one = (tmp_path / "one" / name).read_bytes()
        assert one == (tmp_path / "two" / name).read_bytes(), name


def test_chunked_read_equals_one_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(50, 3)), columns=["a", "b", "c"])
    frame["y"] = rng.integers(0, 3, 50)
    frame["uid"] = [f"s{i}" for i in range(50)]
    path = _write(tmp_path, frame)
    ingest_table(path, out_dir=tmp_path / "whole", label_column="y", id_column="uid")
    monkeypatch.setattr(table_module, "_CHUNK_CELLS", 20)  # 4 rows per chunk
    ingest_table(path, out_dir=tmp_path / "chunks", label_column="y", id_column="uid")
    for name in ("features.npy", "samples.parquet", "schema.json"):
        whole = (tmp_path / "whole" / name).read_bytes()
        assert whole == (tmp_path / "chunks" / name).read_bytes(), name


# ---------------------------------------------------------------- values


def test_nan_features_keep_status_ok(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x1,x2,y\n1,2,0\n,4,1\nNaN,NA,1\n"), tmp_path)
    assert _samples(tmp_path)["status"].tolist() == ["ok", "ok", "ok"]
    assert np.isnan(_features(tmp_path)).sum(axis=1).tolist() == [0, 1, 2]


def test_nan_features_are_counted_by_row_summaries(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x1,x2,y\n1,2,0\n,4,1\nNaN,NA,1\n"), tmp_path)
    summary = row_summaries(tmp_path / "out")
    assert summary["feature_nan_count"].tolist() == [0, 1, 2]
    assert summary["feature_min"].tolist()[:2] == [1.0, 4.0]
    assert np.isnan(summary["feature_min"].iloc[2])


def test_string_in_numeric_column_names_row_and_column(tmp_path: Path) -> None:
    path = _csv(tmp_path, "x1,x2,y\n1,2,0\n3,abc,1\n5,6,1\n")
    result = _ingest(path, tmp_path)
    row = _samples(tmp_path).iloc[1]
    assert result.n_problems == 1
    assert row["status"] == "non-numeric value 'abc' in column 'x2'"
    assert (row["sample_id"], row["source"]) == ("row-2", f"{path}:2")
    assert _features(tmp_path)[1, 0] == 3.0
    assert np.isnan(_features(tmp_path)[1, 1])


def test_first_non_numeric_column_is_named(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x1,x2,y\nfoo,bar,0\n1,2,1\n"), tmp_path)
    assert _samples(tmp_path)["status"].tolist() == [
        "non-numeric value 'foo' in column 'x1'",
        "ok",
    ]


def test_value_range_is_finite_min_max(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x1,y\n-inf,0\n2.5,0\n,1\n-1,1\ninf,0\n"), tmp_path)
    assert read_schema(tmp_path / "out")["value_range"] == [-1.0, 2.5]


def test_single_class(tmp_path: Path) -> None:
    result = _ingest(_csv(tmp_path, "x,y\n1,0\n2,0\n"), tmp_path)
    assert result.class_names == ("0",)
    assert read_schema(tmp_path / "out")["classes"] == [0]


def test_non_integer_labels_become_minus_one(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x,y\n1,inf\n2,2.5\n3,1\n4,\n"), tmp_path)
    samples = _samples(tmp_path)
    assert samples["label"].tolist() == [-1, -1, 1, -1]
    assert samples["status"].tolist() == [
        "label 'inf' is not an integer class index",
        "label '2.5' is not an integer class index",
        "ok",
        "label missing in column 'y' (data.label_column)",
    ]


def test_integral_float_label_is_a_class(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x,y\n1,2.0\n2,0\n"), tmp_path)
    assert _samples(tmp_path)["label"].tolist() == [2, 0]
    assert read_schema(tmp_path / "out")["classes"] == [0, 1, 2]


def test_label_outside_num_classes_is_kept(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x,y\n1,0\n2,5\n"), tmp_path, num_classes=2)
    assert _samples(tmp_path)["label"].tolist() == [0, 5]
    assert _samples(tmp_path)["status"].tolist() == ["ok", "ok"]
    assert read_schema(tmp_path / "out")["classes"] == [0, 1]


def test_num_classes_declares_classes_without_samples(tmp_path: Path) -> None:
    result = _ingest(_csv(tmp_path, "x,y\n1,0\n"), tmp_path, num_classes=3)
    assert result.class_names == ("0", "1", "2")


def test_feature_problem_wins_over_label_problem(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x,y\nabc,0.5\n1,1\n"), tmp_path, num_classes=2)
    row = _samples(tmp_path).iloc[0]
    assert (row["label"], row["status"]) == (
        -1,
        "non-numeric value 'abc' in column 'x'",
    )


# ---------------------------------------------------------------- bad tables


def test_missing_label_column_raises_listing_columns(tmp_path: Path) -> None:
    path = _write(tmp_path, _frame())
    with pytest.raises(
        IngestError,
        match=r"data\.label_column: column 'label' not found in .*t\.csv; "
        r"columns there: 'x1', 'y', 'x2'",
    ):
        _ingest(path, tmp_path, label_column="label")


@pytest.mark.parametrize(
    ("kwarg", "key"),
    [("id_column", "data.id_column"), ("client_column", "data.client_column")],
)
def test_missing_id_or_client_column_raises(
    tmp_path: Path, kwarg: str, key: str
) -> None:
    with pytest.raises(IngestError, match=rf"{key}: column 'nope' not found"):
        _ingest(_write(tmp_path, _frame()), tmp_path, **{kwarg: "nope"})


def test_missing_feature_column_raises(tmp_path: Path) -> None:
    with pytest.raises(
        IngestError, match=r"data\.feature_columns: 'x9' not found in .*columns there"
    ):
        _ingest(_write(tmp_path, _frame()), tmp_path, feature_columns=["x1", "x9"])


def test_feature_columns_as_a_string_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.feature_columns: expected a list"):
        _ingest(_write(tmp_path, _frame()), tmp_path, feature_columns="x1")


def test_label_listed_as_feature_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.feature_columns: 'y' is the label"):
        _ingest(_write(tmp_path, _frame()), tmp_path, feature_columns=["x1", "y"])


def test_no_feature_columns_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.feature_columns: .* no columns"):
        _ingest(_csv(tmp_path, "y,uid\n0,a\n"), tmp_path, id_column="uid")


def test_duplicate_id_raises_naming_rows(tmp_path: Path) -> None:
    path = _csv(tmp_path, "uid,x,y\na,1,0\nb,2,0\na,3,1\n")
    with pytest.raises(
        IngestError, match=r"data\.id_column: 'uid' .* has 'a' at data rows 1 and 3"
    ):
        _ingest(path, tmp_path, id_column="uid")


def test_empty_id_raises(tmp_path: Path) -> None:
    path = _csv(tmp_path, "uid,x,y\na,1,0\n,2,0\n")
    with pytest.raises(IngestError, match=r"data\.id_column: 'uid' is empty .* row 2"):
        _ingest(path, tmp_path, id_column="uid")


def test_unsupported_suffix_raises(tmp_path: Path) -> None:
    path = _csv(tmp_path, "x,y\n1,0\n", name="t.xlsx")
    with pytest.raises(
        IngestError,
        match=r"data\.path: .*t\.xlsx: unsupported file type; accepted suffixes: "
        r"\.csv, \.csv\.gz, \.parquet, \.pq",
    ):
        _ingest(path, tmp_path)


def test_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.path: .*nope\.csv does not exist"):
        _ingest(tmp_path / "nope.csv", tmp_path)


def test_empty_file_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.path: .*t\.csv: no data rows"):
        _ingest(_csv(tmp_path, ""), tmp_path)


def test_header_only_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.path: .*t\.csv: no data rows"):
        _ingest(_csv(tmp_path, "x,y\n"), tmp_path)


def test_ragged_csv_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.path: .*not a readable CSV file"):
        _ingest(_csv(tmp_path, "x,y\n1,0\n1,0,5\n"), tmp_path)


def test_not_parquet_raises(tmp_path: Path) -> None:
    (tmp_path / "t.parquet").write_text("x,y\n1,0\n")
    with pytest.raises(IngestError, match=r"data\.path: .*not a readable Parquet"):
        _ingest(tmp_path / "t.parquet", tmp_path)


def test_no_integer_labels_without_num_classes_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.label_column: .*data\.num_classes"):
        _ingest(_csv(tmp_path, "x,y\n1,0.5\n2,\n"), tmp_path)


# ---------------------------------------------------------------- class names


def test_text_labels_are_classes_in_sorted_order(tmp_path: Path) -> None:
    text = "x,y\n1,with_mask\n2,cat\n3,dog\n4,cat\n"
    result = _ingest(_csv(tmp_path, text), tmp_path)
    assert result.class_names == ("cat", "dog", "with_mask")
    assert _samples(tmp_path)["label"].tolist() == [2, 0, 1, 0]
    schema = read_schema(tmp_path / "out")
    assert schema["classes"] == [0, 1, 2]
    assert schema["class_names"] == ["cat", "dog", "with_mask"]


def test_one_text_label_makes_every_label_a_name(tmp_path: Path) -> None:
    result = _ingest(_csv(tmp_path, "x,y\n1,10\n2,cat\n3,2\n"), tmp_path)
    assert result.class_names == ("10", "2", "cat")
    assert _samples(tmp_path)["status"].tolist() == ["ok"] * 3


def test_text_label_spaces_are_removed(tmp_path: Path) -> None:
    result = _ingest(_csv(tmp_path, "x,y\n1, cat\n2,cat \n3,dog\n"), tmp_path)
    assert result.class_names == ("cat", "dog")
    assert _samples(tmp_path)["label"].tolist() == [0, 0, 1]


def test_data_classes_gives_the_order(tmp_path: Path) -> None:
    path = _csv(tmp_path, "x,y\n1,cat\n2,dog\n3,cat\n")
    result = _ingest(path, tmp_path, classes=["dog", "cat", "bird"])
    assert result.class_names == ("dog", "cat", "bird")
    assert _samples(tmp_path)["label"].tolist() == [1, 0, 1]


def test_data_classes_names_integer_labels(tmp_path: Path) -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [1, 0, 1]})
    result = _ingest(_write(tmp_path, frame, "t.parquet"), tmp_path, classes=["1", "0"])
    assert result.class_names == ("1", "0")
    assert _samples(tmp_path)["label"].tolist() == [0, 1, 0]


def test_text_label_missing_is_minus_one(tmp_path: Path) -> None:
    _ingest(_csv(tmp_path, "x,y\n1,cat\n2,\n3,dog\n"), tmp_path)
    samples = _samples(tmp_path)
    assert samples["label"].tolist() == [0, -1, 1]
    assert samples["status"].tolist() == [
        "ok",
        "label missing in column 'y' (data.label_column)",
        "ok",
    ]


def test_label_not_in_data_classes_names_value_row_and_allowed(
    tmp_path: Path,
) -> None:
    path = _csv(tmp_path, "x,y\n1,cat\n2,dog\n3,bird\n4,bird\n")
    with pytest.raises(
        IngestError,
        match=r"data\.classes: .*'y' in .*t\.csv holds 'bird' \(at row-3\), not in "
        r"data\.classes; allowed: 'cat', 'dog'",
    ):
        _ingest(path, tmp_path, classes=["cat", "dog"])


def test_label_not_in_data_classes_names_the_id(tmp_path: Path) -> None:
    path = _csv(tmp_path, "id,x,y\na7,1,cat\nb9,2,fish\n")
    with pytest.raises(IngestError, match=r"'fish' \(id b9\)"):
        _ingest(path, tmp_path, classes=["cat", "dog"], id_column="id")


def test_num_classes_must_match_text_labels(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.num_classes: 3 .*2 class names"):
        _ingest(_csv(tmp_path, "x,y\n1,cat\n2,dog\n"), tmp_path, num_classes=3)


@pytest.mark.parametrize(
    ("classes", "said"),
    [
        ("cat", "data.classes: got 'cat'; expected a list of class names"),
        (["cat"], "at least 2 class names"),
        (["cat", "cat"], "'cat' listed more than once"),
        (["a", ""], "names must not be empty"),
    ],
)
def test_bad_data_classes_raises(tmp_path: Path, classes: object, said: str) -> None:
    """The params' rule and message (fedpipe.config.classes), from the library."""
    with pytest.raises(IngestError, match=re.escape(said)):
        _ingest(_csv(tmp_path, "x,y\n1,cat\n"), tmp_path, classes=classes)


@pytest.mark.parametrize("num_classes", [0, -1, 2.5, True])
def test_bad_num_classes_raises(tmp_path: Path, num_classes: object) -> None:
    with pytest.raises(IngestError, match=r"data\.num_classes: .*positive integer"):
        _ingest(_write(tmp_path, _frame()), tmp_path, num_classes=num_classes)


def test_same_column_in_two_roles_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.id_column: 'y' is also"):
        _ingest(_write(tmp_path, _frame()), tmp_path, id_column="y")

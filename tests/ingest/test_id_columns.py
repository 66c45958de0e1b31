"""A column that looks like a row id is never a feature silently (issue 37,
item 2): with ``data.feature_columns`` and ``data.id_column`` unset the ingest
leaves it out and says which key to set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.data.ingest import read_schema
from fedpipe.data.ingest.base import IngestError
from fedpipe.data.ingest.table import ingest_table

SHUFFLED = np.random.default_rng(1).permutation(40)


def _sorted_by_class(n: int = 40) -> pd.DataFrame:
    """A table sorted by class, as the passenger list was: the row number alone
    gives the label away."""
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {"x": rng.normal(size=n).round(3), "label": np.repeat([0, 1], n // 2)}
    )


def _ingest(tmp_path: Path, frame: pd.DataFrame, *, index: bool = False, **kw):
    suffix = kw.pop("suffix", ".csv")
    path = tmp_path / f"t{suffix}"
    if suffix == ".csv":
        frame.to_csv(path, index=index)
    else:
        frame.to_parquet(path, index=index)
    out = tmp_path / "prepared"
    return ingest_table(path, out_dir=out, label_column="label", **kw), out


def test_the_index_pandas_wrote_is_left_out_with_the_key(tmp_path: Path) -> None:
    """``to_csv()`` with its index: ``Unnamed: 0`` became a feature."""
    result, out = _ingest(tmp_path, _sorted_by_class(), index=True)
    assert read_schema(out)["feature_names"] == ["x"]
    assert result.input_shape == (1,)
    (note,) = result.warnings
    assert "'Unnamed: 0'" in note and "data.id_column: 'Unnamed: 0'" in note
    assert read_schema(out)["id_like_columns"] == {
        "Unnamed: 0": "the numbers 0..39, one a row"
    }


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("rownames", list(range(1, 41))),  # R's write.csv
        ("id", list(range(100, 140, 1))),
        ("PassengerId", list(range(3, 123, 3))),  # increasing, not by one
        ("customer_id", [f"C{i:03d}" for i in SHUFFLED]),
        ("row_number", list(range(0, 40))),
    ],
)
def test_id_like_columns_are_left_out(tmp_path: Path, name: str, values) -> None:
    frame = _sorted_by_class()
    frame.insert(0, name, values)
    result, out = _ingest(tmp_path, frame)
    assert read_schema(out)["feature_names"] == ["x"]
    assert any(f"data.id_column: {name!r}" in n for n in result.warnings)


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("id", [1, 2, 3] * 13 + [4]),  # repeats: not an id
        ("id", list(range(40, 0, -1))),  # decreasing
        ("n", list(range(1, 41))),  # the row numbers, but not named an id
        ("code", [f"C{i:03d}" for i in range(40)]),  # text, not named an id
        ("index", [1.5 + i for i in range(40)]),  # not integers
        ("id", list(range(1, 40)) + [None]),  # missing once
    ],
)
def test_other_columns_stay_features(tmp_path: Path, name: str, values) -> None:
    frame = _sorted_by_class()
    frame.insert(0, name, values)
    result, out = _ingest(tmp_path, frame)
    assert read_schema(out)["feature_names"] == [name, "x"]
    assert result.warnings == ()
    assert "id_like_columns" not in read_schema(out)


def test_the_whole_file_is_read_before_a_column_is_called_an_id(
    tmp_path: Path,
) -> None:
    """Row numbers for 1,500 rows, then a repeat: past the first rows read."""
    n = 1600
    frame = pd.DataFrame(
        {"id": list(range(1500)) + list(range(100)), "x": np.arange(n) % 7,
         "label": np.arange(n) % 2}
    )  # fmt: skip
    result, out = _ingest(tmp_path, frame)
    assert read_schema(out)["feature_names"] == ["id", "x"]
    assert not [w for w in result.warnings if "data.id_column" in w]


def test_parquet_integer_id(tmp_path: Path) -> None:
    frame = _sorted_by_class()
    frame.insert(0, "ID", np.arange(1, 41, dtype=np.int64))
    result, out = _ingest(tmp_path, frame, suffix=".parquet")
    assert read_schema(out)["feature_names"] == ["x"]
    assert result.warnings


def test_named_columns_are_used_as_asked(tmp_path: Path) -> None:
    """An id column listed in data.feature_columns, or declared categorical,
    or with data.id_column set elsewhere, is left as the user said."""
    frame = _sorted_by_class()
    frame.insert(0, "id", range(40))
    result, out = _ingest(tmp_path, frame, feature_columns=["id", "x"])
    assert read_schema(out)["feature_names"] == ["id", "x"]
    assert not [w for w in result.warnings if "data.id_column" in w]
    result, out = _ingest(tmp_path, frame, id_column="id")
    assert read_schema(out)["feature_names"] == ["x"]
    assert result.warnings == ()


def test_only_id_columns_is_refused_naming_the_keys(tmp_path: Path) -> None:
    frame = pd.DataFrame({"id": range(30), "label": [0, 1] * 15})
    with pytest.raises(IngestError, match=r"data\.id_column.*data\.feature_columns"):
        _ingest(tmp_path, frame)


def test_stats_names_the_kind(tmp_path: Path) -> None:
    from fedpipe_app.commands.stats import id_like_lines

    _, out = _ingest(tmp_path, _sorted_by_class(), index=True)
    assert id_like_lines(read_schema(out)) == [
        "column 'Unnamed: 0': kind id (the numbers 0..39, one a row), not a "
        "feature; set data.id_column: 'Unnamed: 0' to name the rows by it, or "
        "list it in data.feature_columns"
    ]

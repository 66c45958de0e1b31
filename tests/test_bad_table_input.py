"""Bad table input (issue 24 item 6) stops with a line naming the column and
the key that changes it: a column empty on one client, a column empty (or
absent) everywhere, labels missing in some rows. The category only the
held-out set has and the numeric column with text in a few rows are in
tests/test_categorical.py; the CLI corpus is tests/test_bad_input.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.config.params import ValidationParams
from fedpipe.data.ingest import IngestError, ingest_table
from fedpipe.data.preprocess import fit_transform
from fedpipe.data.validation import validate_prepared_dir


def _frame(n: int = 60, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "site": np.repeat(["a", "b", "c"], n // 3),
            "x": rng.normal(0, 1, n),
            "z": rng.normal(5, 2, n),
            "label": rng.integers(0, 2, n),
        }
    )


def _validate(tmp_path: Path, frame: pd.DataFrame, **ingest: object):
    frame.to_csv(tmp_path / "t.csv", index=False)
    ingest_table(tmp_path / "t.csv", out_dir=tmp_path / "p", label_column="label",
                 **ingest)  # type: ignore[arg-type]  # fmt: skip
    return validate_prepared_dir(tmp_path / "p", ValidationParams(min_rows=10))


def test_a_column_empty_on_one_client_is_named_with_the_client(tmp_path: Path) -> None:
    frame = _frame()
    frame.loc[frame["site"] == "b", "z"] = np.nan
    frame.loc[[2, 50], "x"] = np.nan
    report = _validate(tmp_path, frame, client_column="site")
    (failure,) = [f for f in report.failures if f.column == "feature_nan_count"]
    assert "empty cells per column: 'z' 20 (every row of client 'b'), 'x' 2" in (
        failure.detail
    )
    assert "set preprocess.missing to mean or median" in failure.detail


def test_a_column_empty_on_one_client_is_imputed_from_the_others() -> None:
    rng = np.random.default_rng(1)
    clients = [rng.normal(3.0, 1.0, size=(n, 2)) for n in (30, 20, 25)]
    clients[1][:, 1] = np.nan  # client 1 has no value of column 'z'
    for fit in ("federated", "local"):
        transform = fit_transform(
            clients, columns=["x", "z"], numeric="standard", fit=fit,
            missing="mean", bins=32,
        )  # fmt: skip
        others = np.concatenate([clients[0][:, 1], clients[2][:, 1]])
        scaling = transform.scaling_for(1)
        assert scaling.fill is not None
        np.testing.assert_allclose(scaling.fill[1], others.mean(), rtol=1e-12)
        np.testing.assert_allclose(scaling.center[1], others.mean(), rtol=1e-12)
        assert transform.indicators == (1,)


def test_a_column_empty_in_every_row_stops_the_ingest(tmp_path: Path) -> None:
    frame = _frame()
    frame["z"] = np.nan
    with pytest.raises(
        IngestError,
        match=r"data\.feature_columns: column 'z' of .*t\.csv is empty in every "
        r"row .*list the other columns in data\.feature_columns",
    ):
        _validate(tmp_path, frame)


def test_a_trailing_comma_column_is_named(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("x,z,label,\n1,2,0,\n2,3,1,\n")
    with pytest.raises(IngestError, match=r"column 'Unnamed: 3' of .* empty"):
        ingest_table(tmp_path / "t.csv", out_dir=tmp_path / "p", label_column="label")


def test_a_column_absent_from_the_file_is_named(tmp_path: Path) -> None:
    _frame().to_csv(tmp_path / "t.csv", index=False)
    with pytest.raises(
        IngestError, match=r"data\.feature_columns: 'w' not found in .*t\.csv"
    ):
        ingest_table(tmp_path / "t.csv", out_dir=tmp_path / "p",
                     label_column="label", feature_columns=["x", "w"])  # fmt: skip


@pytest.mark.parametrize("names", [False, True])
def test_labels_missing_in_some_rows_are_named(tmp_path: Path, names: bool) -> None:
    frame = _frame().astype({"label": object})
    if names:
        frame["label"] = np.where(frame["label"] == 1, "yes", "no")
    frame.loc[[4, 17], "label"] = None
    report = _validate(tmp_path, frame)
    (failure,) = [f for f in report.failures if f.column == "status"]
    assert failure.examples == ("row-5", "row-18")
    assert "label missing in column 'label' (data.label_column)" in failure.detail
    assert "fill its label, or remove the row" in failure.detail

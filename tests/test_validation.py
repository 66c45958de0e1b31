"""Tests for fedpipe.data.validation (Great Expectations 1.x data validation)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fedpipe.data.validation import ExpectationFailure, ValidationReport, validate_table

N_ROWS = 40
FEATURES = [f"f{i}" for i in range(6)]
CLASSES = [0, 1, 2]
N_TABLE_EXPECTATIONS = 5
N_ALL_EXPECTATIONS = 14

IN_SET = "expect_column_values_to_be_in_set"
BETWEEN = "expect_column_values_to_be_between"


def make_frame(n_rows: int = N_ROWS) -> pd.DataFrame:
    """Valid frame: ids s000.., labels cycling 0, 1, 2, features in [0, 1]."""
    rng = np.random.default_rng(7)
    frame = pd.DataFrame(rng.uniform(0.0, 1.0, size=(n_rows, len(FEATURES))))
    frame.columns = FEATURES
    frame.insert(0, "label", np.arange(n_rows, dtype=np.int64) % len(CLASSES))
    frame.insert(0, "sample_id", [f"s{i:03d}" for i in range(n_rows)])
    return frame


def run(frame: pd.DataFrame, **overrides: Any) -> ValidationReport:
    """Call validate_table with the test defaults."""
    kwargs: dict[str, Any] = {
        "id_column": "sample_id",
        "label_column": "label",
        "feature_columns": FEATURES,
        "classes": CLASSES,
        "value_range": (0.0, 1.0),
        "min_rows": 10,
    }
    kwargs.update(overrides)
    return validate_table(frame, **kwargs)


def failed(report: ValidationReport) -> set[tuple[str, str | None]]:
    """(expectation, column) pairs of all failures."""
    return {(f.expectation, f.column) for f in report.failures}


def only_failure(report: ValidationReport) -> ExpectationFailure:
    """The single failure of a report (asserts there is exactly one)."""
    assert not report.success
    assert len(report.failures) == 1, report.summary_lines()
    return report.failures[0]


@pytest.fixture(scope="module")
def good_report() -> ValidationReport:
    """Validate the good frame once per module (also pays the GX import once)."""
    return run(make_frame())


@pytest.fixture(scope="module")
def bad_frame() -> pd.DataFrame:
    """A frame with a label outside the classes (row 3) and a NaN feature (row 4)."""
    frame = make_frame()
    frame.loc[3, "label"] = 11
    frame.loc[4, "f2"] = np.nan
    return frame


@pytest.fixture(scope="module")
def report_dirs(
    tmp_path_factory: pytest.TempPathFactory, bad_frame: pd.DataFrame
) -> tuple[Path, Path, ValidationReport]:
    """Validate ``bad_frame`` twice into two report dirs; the first had stale files."""
    first = tmp_path_factory.mktemp("report_a")
    (first / "data_docs").mkdir()
    (first / "data_docs" / "stale.html").write_text("old")
    (first / "summary.json").write_text("{}")
    (first / "keep.txt").write_text("not ours")
    second = tmp_path_factory.mktemp("report_b") / "nested" / "dir"
    report = run(bad_frame, report_dir=first)
    run(bad_frame, report_dir=second)
    return first, second, report


# --------------------------------------------------------------------- passing


def test_good_frame_passes(good_report: ValidationReport) -> None:
    assert good_report.success is True
    assert good_report.failures == ()
    assert good_report.n_rows == N_ROWS
    assert good_report.n_expectations == N_ALL_EXPECTATIONS


def test_good_frame_summary_lines(good_report: ValidationReport) -> None:
    assert good_report.summary_lines() == [
        f"validation passed: {N_ROWS} rows, {N_ALL_EXPECTATIONS} expectations"
    ]


def test_integer_pixels_with_nullable_dtype_pass() -> None:
    frame = make_frame()
    for column in FEATURES:
        frame[column] = (frame[column] * 255).round().astype("Int64")
    assert run(frame, value_range=(0, 255)).success is True


# ------------------------------------------------------------------ row checks


def test_label_outside_classes() -> None:
    frame = make_frame()
    frame.loc[7, "label"] = 11
    frame.loc[9, "label"] = -1
    failure = only_failure(run(frame))
    assert (failure.expectation, failure.column) == (IN_SET, "label")
    assert failure.unexpected_count == 2
    assert failure.examples == ("s007", "s009")
    assert failure.detail == (
        "label must be one of [0..2]; 2 rows have other values (e.g. 11, -1)"
    )


def test_missing_class() -> None:
    frame = make_frame()
    frame["label"] = frame["label"].replace(2, 1)
    failure = only_failure(run(frame))
    assert failure.expectation == "expect_column_distinct_values_to_contain_set"
    assert failure.column == "label"
    assert failure.unexpected_count == 0
    assert failure.examples == ()
    assert "missing classes: [2]" in failure.detail


def test_value_above_range() -> None:
    frame = make_frame()
    frame.loc[12, "f5"] = 1.5
    failure = only_failure(run(frame))
    assert (failure.expectation, failure.column) == (BETWEEN, "feature_max")
    assert failure.unexpected_count == 1
    assert failure.examples == ("s012",)
    assert "must be <= 1" in failure.detail
    assert "highest 1.5" in failure.detail


def test_value_below_range() -> None:
    frame = make_frame()
    frame.loc[13, "f0"] = -0.25
    failure = only_failure(run(frame))
    assert (failure.expectation, failure.column) == (BETWEEN, "feature_min")
    assert failure.examples == ("s013",)
    assert "lowest -0.25" in failure.detail


def test_nan_feature() -> None:
    frame = make_frame()
    frame.loc[20, "f4"] = np.nan
    frame.loc[21, ["f1", "f3"]] = np.nan
    failure = only_failure(run(frame))
    assert (failure.expectation, failure.column) == (IN_SET, "feature_null_count")
    assert failure.unexpected_count == 2
    assert failure.examples == ("s020", "s021")
    assert "up to 2 per row" in failure.detail


def test_duplicate_id() -> None:
    frame = make_frame()
    frame.loc[21, "sample_id"] = "s022"
    failure = only_failure(run(frame))
    assert failure.expectation == "expect_column_values_to_be_unique"
    assert failure.column == "sample_id"
    assert failure.unexpected_count == 2
    assert failure.examples == ("s022",)


def test_null_id_reports_row_position() -> None:
    frame = make_frame()
    frame.loc[5, "sample_id"] = None
    failure = only_failure(run(frame))
    assert failure.expectation == "expect_column_values_to_not_be_null"
    assert failure.column == "sample_id"
    assert failure.examples == ("<null id at row 5>",)


def test_null_label() -> None:
    frame = make_frame()
    frame["label"] = frame["label"].astype("float64")
    frame.loc[30, "label"] = np.nan
    report = run(frame)
    assert failed(report) == {("expect_column_values_to_not_be_null", "label")}
    assert report.failures[0].examples == ("s030",)


def test_string_in_feature_column() -> None:
    frame = make_frame()
    frame["f3"] = frame["f3"].astype(object)
    frame.loc[9, "f3"] = "abc"
    failure = only_failure(run(frame))
    assert failure.expectation == IN_SET
    assert failure.column == "feature_non_numeric_count"
    assert failure.examples == ("s009",)
    assert "non-numeric columns: [f3]" in failure.detail


def test_all_string_feature_column() -> None:
    frame = make_frame()
    frame["f1"] = frame["f1"].astype(str)
    failure = only_failure(run(frame))
    assert failure.column == "feature_non_numeric_count"
    assert failure.unexpected_count == N_ROWS
    assert failure.examples == ("s000", "s001", "s002", "s003", "s004")


# ---------------------------------------------------------------- table checks


def test_too_few_rows() -> None:
    failure = only_failure(run(make_frame(), min_rows=100))
    assert failure.expectation == "expect_table_row_count_to_be_between"
    assert failure.column is None
    assert failure.unexpected_count == 0
    assert failure.examples == ()
    assert failure.detail == "table must have at least 100 rows; observed 40"


def test_extra_column() -> None:
    frame = make_frame().assign(extra=1.0)
    report = run(frame)
    assert failed(report) == {
        ("expect_table_column_count_to_equal", None),
        ("expect_table_columns_to_match_set", None),
    }
    details = {f.expectation: f.detail for f in report.failures}
    assert "observed 9" in details["expect_table_column_count_to_equal"]
    assert "unexpected: [extra]" in details["expect_table_columns_to_match_set"]


def test_renamed_feature_column() -> None:
    frame = make_frame().rename(columns={"f2": "f2_renamed"})
    report = run(frame)
    assert failed(report) == {("expect_table_columns_to_match_set", None)}
    detail = report.failures[0].detail
    assert "missing: [f2]" in detail
    assert "unexpected: [f2_renamed]" in detail


@pytest.mark.parametrize("column", ["label", "sample_id"])
def test_missing_id_or_label_column(column: str) -> None:
    report = run(make_frame().drop(columns=[column]))
    assert report.success is False
    assert report.n_expectations == N_TABLE_EXPECTATIONS
    assert failed(report) == {
        ("expect_column_to_exist", column),
        ("expect_table_column_count_to_equal", None),
        ("expect_table_columns_to_match_set", None),
    }
    exists = next(f for f in report.failures if f.column == column)
    assert repr(column) in exists.detail


def test_empty_frame_does_not_crash() -> None:
    report = run(make_frame().iloc[:0])
    assert report.n_rows == 0
    assert failed(report) == {
        ("expect_table_row_count_to_be_between", None),
        ("expect_column_distinct_values_to_contain_set", "label"),
    }


# ------------------------------------------------------------- report output


def test_summary_lines_name_failure(bad_frame: pd.DataFrame) -> None:
    lines = run(bad_frame).summary_lines()
    assert len(lines) == 2
    assert lines[0].startswith(f"FAILED {IN_SET} [label] | 1 row | e.g. s003: ")
    assert "11" in lines[0]
    assert lines[1].startswith(f"FAILED {IN_SET} [feature_null_count] | 1 row")
    assert "s004" in lines[1]


def test_to_dict_is_json_and_complete(bad_frame: pd.DataFrame) -> None:
    data = json.loads(json.dumps(run(bad_frame).to_dict()))
    assert data["success"] is False
    assert data["n_rows"] == N_ROWS
    assert data["n_expectations"] == N_ALL_EXPECTATIONS
    assert data["failures"][0] == {
        "expectation": IN_SET,
        "column": "label",
        "unexpected_count": 1,
        "examples": ["s003"],
        "detail": "label must be one of [0..2]; 1 row has other values (e.g. 11)",
    }


def test_report_dir_files(report_dirs: tuple[Path, Path, ValidationReport]) -> None:
    first, second, report = report_dirs
    for directory in (first, second):
        summary = json.loads((directory / "summary.json").read_text())
        assert summary == report.to_dict()
        assert (directory / "data_docs" / "index.html").is_file()
        result = json.loads((directory / "result.json").read_text())
        assert result["success"] is False
        assert set(result["checkpoints"]) == {"table", "rows"}
        rows = result["checkpoints"]["rows"]["validation_results"][0]
        assert len(rows["results"]) == N_ALL_EXPECTATIONS - N_TABLE_EXPECTATIONS


def test_report_dir_clears_only_own_stale_files(
    report_dirs: tuple[Path, Path, ValidationReport],
) -> None:
    first, _, _ = report_dirs
    assert not (first / "data_docs" / "stale.html").exists()
    assert (first / "keep.txt").read_text() == "not ours"


def test_summary_json_is_deterministic(
    report_dirs: tuple[Path, Path, ValidationReport],
) -> None:
    first, second, _ = report_dirs
    text = (first / "summary.json").read_text()
    assert text == (second / "summary.json").read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


def test_import_does_not_load_great_expectations() -> None:
    code = (
        "import sys, fedpipe.data.validation; "
        "print('great_expectations' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_invalid_arguments_raise() -> None:
    with pytest.raises(ValueError, match="must differ"):
        run(make_frame(), label_column="sample_id")

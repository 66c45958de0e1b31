"""Tabular client data sets: the table-level and row-level suites.

``fedpipe_table_checks`` on the raw frame: column count, id/label columns exist,
exact column set, minimum row count. ``fedpipe_row_checks`` on the row summary
(:mod:`fedpipe.data.validation.summary`): id not null and unique, label not null, label
in the declared classes, every class present, no null/NaN features, no
non-numeric features, features inside ``value_range``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedpipe.data.validation.describe import (
    describe_column_set,
    describe_missing_classes,
    extreme,
    format_classes,
    have,
    short_list,
    unexpected_values,
)
from fedpipe.data.validation.files import prepare_report_dir, write_reports
from fedpipe.data.validation.gx import GxRunner
from fedpipe.data.validation.ranges import value_range_checks
from fedpipe.data.validation.results import ValidationReport, make_report
from fedpipe.data.validation.spec import (
    FEATURE_NON_NUMERIC_COUNT,
    FEATURE_NULL_COUNT,
    Check,
    Spec,
)
from fedpipe.data.validation.summary import build_row_summary


def validate_table(
    df: pd.DataFrame,
    *,
    id_column: str,
    label_column: str,
    feature_columns: Sequence[str],
    classes: Sequence[int],
    value_range: tuple[float, float],
    min_rows: int,
    report_dir: Path | None = None,
) -> ValidationReport:
    """Validate a labelled feature table with Great Expectations.

    Parameters
    ----------
    df : pandas.DataFrame
        Table with one id column, one label column and the feature columns.
    id_column : str
        Column holding unique sample ids; failing rows are reported by these ids.
    label_column : str
        Column holding integer class labels.
    feature_columns : Sequence of str
        Declared feature columns (expected: exactly these plus id and label).
    classes : Sequence of int
        Allowed labels; every one of them must also occur at least once.
    value_range : tuple of float
        Inclusive ``(low, high)`` bounds for every feature value.
    min_rows : int
        Minimum number of rows.
    report_dir : pathlib.Path, optional
        If given, ``summary.json``, ``result.json`` and Data Docs
        (``data_docs/index.html``) are written there; stale copies are replaced.

    Returns
    -------
    ValidationReport
        Success flag, counts and one :class:`ExpectationFailure` per failed
        expectation.  Missing id/label columns and non-numeric features are
        reported as failures, not raised.

    Raises
    ------
    ValueError
        If the arguments themselves are inconsistent (e.g. id and label column are
        the same, or a column name clashes with a row-summary column name).
    """
    spec = Spec.build(
        id_column=id_column,
        label_column=label_column,
        feature_columns=feature_columns,
        classes=classes,
        value_range=value_range,
        min_rows=min_rows,
    )
    docs_dir = prepare_report_dir(Path(report_dir)) if report_dir is not None else None
    runner = GxRunner(spec, docs_dir)
    table_outcome = runner.run("table", df, _table_checks(runner.gxe, spec))
    outcomes = [table_outcome]
    if spec.id_column in df.columns and spec.label_column in df.columns:
        summary, non_numeric = build_row_summary(df, spec)
        row_checks = _row_checks(runner.gxe, spec, non_numeric)
        outcomes.append(runner.run("rows", summary, row_checks))
    report = make_report(len(df), outcomes, spec)
    if report_dir is not None:
        write_reports(Path(report_dir), report, outcomes)
    return report


def _table_checks(gxe: Any, spec: Spec) -> list[Check]:
    """Table-level expectations on the raw frame."""
    n_cols = len(spec.expected_columns)
    n_feat = len(spec.feature_columns)
    return [
        Check(
            gxe.ExpectColumnToExist(column=spec.id_column),
            lambda r: f"required id column {spec.id_column!r} is missing",
        ),
        Check(
            gxe.ExpectColumnToExist(column=spec.label_column),
            lambda r: f"required label column {spec.label_column!r} is missing",
        ),
        Check(
            gxe.ExpectTableColumnCountToEqual(value=n_cols),
            lambda r: (
                f"table must have {n_cols} columns (id, label and {n_feat} features); "
                f"observed {r.get('observed_value')}"
            ),
        ),
        Check(
            gxe.ExpectTableColumnsToMatchSet(
                column_set=spec.expected_columns, exact_match=True
            ),
            lambda r: describe_column_set(r, spec),
        ),
        Check(
            gxe.ExpectTableRowCountToBeBetween(min_value=spec.min_rows),
            lambda r: (
                f"table must have at least {spec.min_rows} rows; "
                f"observed {r.get('observed_value')}"
            ),
        ),
    ]


def _row_checks(gxe: Any, spec: Spec, non_numeric: Sequence[str]) -> list[Check]:
    """Row-level expectations on the row summary frame."""
    idc, lab = spec.id_column, spec.label_column
    classes = format_classes(spec.classes)
    return [
        Check(
            gxe.ExpectColumnValuesToNotBeNull(column=idc),
            lambda r: f"{idc} must not be null; {have(r, 'a null id')}",
        ),
        Check(
            gxe.ExpectColumnValuesToBeUnique(column=idc),
            lambda r: (
                f"{idc} must be unique; {have(r, 'a duplicated id')} "
                f"(e.g. {unexpected_values(r)})"
            ),
        ),
        Check(
            gxe.ExpectColumnValuesToNotBeNull(column=lab),
            lambda r: f"{lab} must not be null; {have(r, 'a null label')}",
        ),
        Check(
            gxe.ExpectColumnValuesToBeInSet(column=lab, value_set=list(spec.classes)),
            lambda r: (
                f"{lab} must be one of {classes}; {have(r, 'other values')} "
                f"(e.g. {unexpected_values(r)})"
            ),
        ),
        Check(
            gxe.ExpectColumnDistinctValuesToContainSet(
                column=lab, value_set=list(spec.classes)
            ),
            lambda r: describe_missing_classes(r, lab, spec.classes),
        ),
        Check(
            gxe.ExpectColumnValuesToBeInSet(column=FEATURE_NULL_COUNT, value_set=[0]),
            lambda r: (
                "feature values must not be null/NaN; "
                f"{have(r, 'null/NaN features')} (up to {extreme(r, max)} per row)"
            ),
        ),
        Check(
            gxe.ExpectColumnValuesToBeInSet(
                column=FEATURE_NON_NUMERIC_COUNT, value_set=[0]
            ),
            lambda r: (
                "feature values must be numeric; "
                f"{have(r, 'non-numeric features')} "
                f"(non-numeric columns: {short_list(non_numeric)})"
            ),
        ),
    ] + value_range_checks(gxe, spec, name_range=True)

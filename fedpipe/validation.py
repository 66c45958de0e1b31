"""Data validation of tabular client datasets with Great Expectations 1.x.

The table handed to :func:`validate_table` has one id column, one label column and
many feature columns (e.g. 784 pixels).  One GX expectation per feature column is
far too slow (tens of seconds to validate, minutes to render), so the row-level
checks run on a small *row summary* frame derived with pandas::

    <id_column>, <label_column>, row_number, feature_min, feature_max,
    feature_null_count, feature_non_numeric_count

Two GX suites are run, each through its own checkpoint (a checkpoint passes the
same ``batch_parameters`` to every validation definition, so one checkpoint cannot
validate two different frames):

* ``fedpipe_table_checks`` on the raw frame: column count, id/label columns exist,
  exact column set, minimum row count.
* ``fedpipe_row_checks`` on the row summary: id not null and unique, label not null,
  label in the declared classes, every class present, no null/NaN features, no
  non-numeric features, features inside ``value_range``.

``great_expectations`` is imported lazily (it takes several seconds), so importing
this module is cheap.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["ExpectationFailure", "ValidationReport", "validate_table"]

FEATURE_MIN = "feature_min"
FEATURE_MAX = "feature_max"
FEATURE_NULL_COUNT = "feature_null_count"
FEATURE_NON_NUMERIC_COUNT = "feature_non_numeric_count"
ROW_NUMBER = "row_number"
SUMMARY_COLUMNS = (
    ROW_NUMBER,
    FEATURE_MIN,
    FEATURE_MAX,
    FEATURE_NULL_COUNT,
    FEATURE_NON_NUMERIC_COUNT,
)

MAX_EXAMPLES = 5
_MAX_VALUES_IN_DETAIL = 3
_DOCS_SITE = "fedpipe_validation"
_DOCS_DIRNAME = "data_docs"
_SUMMARY_FILE = "summary.json"
_RESULT_FILE = "result.json"


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class ExpectationFailure:
    """One failed expectation, in a form a person can act on.

    Attributes
    ----------
    expectation : str
        GX expectation type, e.g. ``"expect_column_values_to_be_in_set"``.
    column : str or None
        Column the expectation checked (a raw column such as ``"label"`` or a
        row-summary column such as ``"feature_max"``); ``None`` for table-level
        expectations without a column.
    unexpected_count : int
        Number of rows that failed (0 for table-level and aggregate expectations).
    examples : tuple of str
        Up to five sample ids of failing rows, in row order.  A row whose id is
        null is shown as ``"<null id at row N>"`` (N is the 0-based position).
    detail : str
        One sentence: what was expected and what was observed.
    """

    expectation: str
    column: str | None
    unexpected_count: int
    examples: tuple[str, ...]
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of this failure."""
        return {
            "expectation": self.expectation,
            "column": self.column,
            "unexpected_count": self.unexpected_count,
            "examples": list(self.examples),
            "detail": self.detail,
        }

    def summary_line(self) -> str:
        """Return one line: expectation, column, row count, example ids, detail."""
        where = self.column if self.column is not None else "<table>"
        parts = [f"FAILED {self.expectation} [{where}]"]
        if self.unexpected_count:
            parts.append(_plural(self.unexpected_count, "row"))
        if self.examples:
            parts.append("e.g. " + ", ".join(self.examples))
        return " | ".join(parts) + f": {self.detail}"


@dataclass(frozen=True)
class ValidationReport:
    """Outcome of :func:`validate_table`.

    Attributes
    ----------
    success : bool
        True when every expectation passed.
    n_rows : int
        Rows in the validated frame.
    n_expectations : int
        Number of GX expectations evaluated.
    failures : tuple of ExpectationFailure
        Failed expectations, table-level first, in a fixed order.
    """

    success: bool
    n_rows: int
    n_expectations: int
    failures: tuple[ExpectationFailure, ...]
    warnings: tuple[ExpectationFailure, ...] = ()

    def summary_lines(self) -> list[str]:
        """Return short, actionable text lines.

        Returns
        -------
        list of str
            ``["validation passed: N rows, M expectations"]`` on success, otherwise
            one line per failure.
        """
        warned = [
            "WARNING " + w.summary_line().removeprefix("FAILED ") for w in self.warnings
        ]
        if self.success:
            return [
                f"validation passed: {self.n_rows} rows, "
                f"{self.n_expectations} expectations"
            ] + warned
        return [failure.summary_line() for failure in self.failures] + warned

    def to_dict(self) -> dict[str, Any]:
        """Return a deterministic, JSON-serialisable dict (no timestamps or ids)."""
        return {
            "success": self.success,
            "n_rows": self.n_rows,
            "n_expectations": self.n_expectations,
            "failures": [failure.to_dict() for failure in self.failures],
            "warnings": [warning.to_dict() for warning in self.warnings],
        }


# ----------------------------------------------------------------------- public API


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
    spec = _Spec.build(
        id_column=id_column,
        label_column=label_column,
        feature_columns=feature_columns,
        classes=classes,
        value_range=value_range,
        min_rows=min_rows,
    )
    docs_dir = _prepare_report_dir(Path(report_dir)) if report_dir is not None else None
    runner = _GxRunner(spec, docs_dir)
    table_outcome = runner.run("table", df, _table_checks(runner.gxe, spec))
    outcomes = [table_outcome]
    if spec.id_column in df.columns and spec.label_column in df.columns:
        summary, non_numeric = _build_row_summary(df, spec)
        row_checks = _row_checks(runner.gxe, spec, non_numeric)
        outcomes.append(runner.run("rows", summary, row_checks))
    report = _make_report(len(df), outcomes, spec)
    if report_dir is not None:
        _write_reports(Path(report_dir), report, outcomes)
    return report


def _build_row_summary(
    df: pd.DataFrame, spec: _Spec
) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """Derive the row-wise summary frame validated by the row-level suite.

    Parameters
    ----------
    df : pandas.DataFrame
        Raw table; must contain the id and label columns.
    spec : _Spec
        Validation settings.

    Returns
    -------
    summary : pandas.DataFrame
        One row per input row with id, label, ``row_number``, ``feature_min``,
        ``feature_max``, ``feature_null_count`` and ``feature_non_numeric_count``.
        Declared feature columns absent from ``df`` are skipped (the table-level
        column-set expectation reports them).
    non_numeric_columns : tuple of str
        Present feature columns whose dtype is not numeric.
    """
    present = [c for c in spec.feature_columns if c in df.columns]
    numeric = [c for c in present if _is_real_dtype(df[c])]
    non_numeric = tuple(c for c in present if c not in set(numeric))
    values = df[numeric].to_numpy(dtype=np.float64, na_value=np.nan)
    null_count = np.isnan(values).sum(axis=1)
    bad_count = np.zeros(len(df), dtype=np.int64)
    extra = []
    for column in non_numeric:
        col_values, col_nulls, col_bad = _coerce_non_numeric(df[column])
        extra.append(col_values)
        null_count = null_count + col_nulls
        bad_count = bad_count + col_bad
    if extra:
        values = np.column_stack([values, *extra])
    summary = pd.DataFrame(
        {
            spec.id_column: df[spec.id_column].reset_index(drop=True),
            spec.label_column: df[spec.label_column].reset_index(drop=True),
            ROW_NUMBER: np.arange(len(df), dtype=np.int64),
            FEATURE_MIN: _row_reduce(np.fmin, values),
            FEATURE_MAX: _row_reduce(np.fmax, values),
            FEATURE_NULL_COUNT: null_count.astype(np.int64),
            FEATURE_NON_NUMERIC_COUNT: bad_count,
        }
    )
    return summary, non_numeric


# ------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class _Spec:
    """Normalised arguments of :func:`validate_table`."""

    id_column: str
    label_column: str
    feature_columns: tuple[str, ...]
    classes: tuple[int, ...]
    low: float
    high: float
    min_rows: int

    @classmethod
    def build(
        cls,
        *,
        id_column: str,
        label_column: str,
        feature_columns: Sequence[str],
        classes: Sequence[int],
        value_range: tuple[float, float],
        min_rows: int,
    ) -> _Spec:
        """Check and normalise the user-facing arguments."""
        if id_column == label_column:
            raise ValueError("id_column and label_column must differ")
        clashes = {id_column, label_column} & set(SUMMARY_COLUMNS)
        if clashes:
            raise ValueError(f"column names clash with row-summary columns: {clashes}")
        low, high = (float(v) for v in value_range)
        if low > high:
            raise ValueError(f"value_range low > high: {value_range}")
        return cls(
            id_column=id_column,
            label_column=label_column,
            feature_columns=tuple(feature_columns),
            classes=tuple(sorted({int(c) for c in classes})),
            low=low,
            high=high,
            min_rows=int(min_rows),
        )

    @property
    def expected_columns(self) -> list[str]:
        """Return id, label and feature columns in declared order."""
        return [self.id_column, self.label_column, *self.feature_columns]


Describer = Callable[[Mapping[str, Any]], str]


@dataclass(frozen=True)
class _Check:
    """A GX expectation plus a function turning its result into one sentence."""

    expectation: Any
    describe: Describer


@dataclass(frozen=True)
class _Outcome:
    """Result of running one suite: the checks and their GX results, in order."""

    name: str
    checks: tuple[_Check, ...]
    results: tuple[Any, ...]
    checkpoint_result: Any


# ------------------------------------------------------------------- row summaries


def _coerce_non_numeric(
    column: pd.Series,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split a non-numeric-dtype column into numbers, null flags and bad flags."""
    is_number = column.map(_is_real_number).to_numpy(dtype=bool)
    is_null = column.isna().to_numpy(dtype=bool)
    numbers_only = column.where(is_number, other=np.nan)
    col_values = pd.to_numeric(numbers_only, errors="coerce").to_numpy(
        dtype=np.float64, na_value=np.nan
    )
    is_bad = ~is_null & ~is_number
    return col_values, is_null.astype(np.int64), is_bad.astype(np.int64)


def _is_real_dtype(column: pd.Series) -> bool:
    """True for int/uint/float/bool dtypes (incl. nullable), False otherwise."""
    dtype = column.dtype
    return pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_complex_dtype(
        dtype
    )


def _is_real_number(value: Any) -> bool:
    """Return True for real numbers (ints, floats, numpy scalars), False for NaN."""
    if not isinstance(value, numbers.Real):
        return False
    return not (isinstance(value, float) and math.isnan(value))


def _row_reduce(ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
    """NaN-ignoring row-wise reduction; all-NaN or empty rows give NaN."""
    if values.shape[1] == 0:
        return np.full(values.shape[0], np.nan)
    return ufunc.reduce(values, axis=1)


# ----------------------------------------------------------------------- GX checks


def _table_checks(gxe: Any, spec: _Spec) -> list[_Check]:
    """Table-level expectations on the raw frame."""
    n_cols = len(spec.expected_columns)
    n_feat = len(spec.feature_columns)
    return [
        _Check(
            gxe.ExpectColumnToExist(column=spec.id_column),
            lambda r: f"required id column {spec.id_column!r} is missing",
        ),
        _Check(
            gxe.ExpectColumnToExist(column=spec.label_column),
            lambda r: f"required label column {spec.label_column!r} is missing",
        ),
        _Check(
            gxe.ExpectTableColumnCountToEqual(value=n_cols),
            lambda r: (
                f"table must have {n_cols} columns (id, label and {n_feat} features); "
                f"observed {r.get('observed_value')}"
            ),
        ),
        _Check(
            gxe.ExpectTableColumnsToMatchSet(
                column_set=spec.expected_columns, exact_match=True
            ),
            lambda r: _describe_column_set(r, spec),
        ),
        _Check(
            gxe.ExpectTableRowCountToBeBetween(min_value=spec.min_rows),
            lambda r: (
                f"table must have at least {spec.min_rows} rows; "
                f"observed {r.get('observed_value')}"
            ),
        ),
    ]


def _row_checks(gxe: Any, spec: _Spec, non_numeric: Sequence[str]) -> list[_Check]:
    """Row-level expectations on the row summary frame."""
    idc, lab = spec.id_column, spec.label_column
    classes = _format_classes(spec.classes)
    low, high = _num(spec.low), _num(spec.high)
    return [
        _Check(
            gxe.ExpectColumnValuesToNotBeNull(column=idc),
            lambda r: f"{idc} must not be null; {_have(r, 'a null id')}",
        ),
        _Check(
            gxe.ExpectColumnValuesToBeUnique(column=idc),
            lambda r: (
                f"{idc} must be unique; {_have(r, 'a duplicated id')} "
                f"(e.g. {_values(r)})"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToNotBeNull(column=lab),
            lambda r: f"{lab} must not be null; {_have(r, 'a null label')}",
        ),
        _Check(
            gxe.ExpectColumnValuesToBeInSet(column=lab, value_set=list(spec.classes)),
            lambda r: (
                f"{lab} must be one of {classes}; {_have(r, 'other values')} "
                f"(e.g. {_values(r)})"
            ),
        ),
        _Check(
            gxe.ExpectColumnDistinctValuesToContainSet(
                column=lab, value_set=list(spec.classes)
            ),
            lambda r: _describe_missing_classes(r, lab, spec.classes),
        ),
        _Check(
            gxe.ExpectColumnValuesToBeInSet(column=FEATURE_NULL_COUNT, value_set=[0]),
            lambda r: (
                "feature values must not be null/NaN; "
                f"{_have(r, 'null/NaN features')} (up to {_extreme(r, max)} per row)"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToBeInSet(
                column=FEATURE_NON_NUMERIC_COUNT, value_set=[0]
            ),
            lambda r: (
                "feature values must be numeric; "
                f"{_have(r, 'non-numeric features')} "
                f"(non-numeric columns: {_short_list(non_numeric)})"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToBeBetween(column=FEATURE_MIN, min_value=spec.low),
            lambda r: (
                f"feature values must be >= {low} (value_range [{low}, {high}]); "
                f"{_have(r, 'a smaller value')} (lowest {_extreme(r, min)})"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToBeBetween(column=FEATURE_MAX, max_value=spec.high),
            lambda r: (
                f"feature values must be <= {high} (value_range [{low}, {high}]); "
                f"{_have(r, 'a larger value')} (highest {_extreme(r, max)})"
            ),
        ),
    ]


# ----------------------------------------------------------------------- GX runner


def _import_gx() -> Any:
    """Import great_expectations with analytics disabled (slow: several seconds)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    import great_expectations.expectations  # noqa: F401  (makes gx.expectations)

    return gx


class _GxRunner:
    """One ephemeral GX context; runs each suite through its own checkpoint."""

    def __init__(self, spec: _Spec, docs_dir: Path | None) -> None:
        self.gx = _import_gx()
        self.gxe = self.gx.expectations
        self.spec = spec
        self.docs_dir = docs_dir
        self.context = self._make_context()
        self.datasource = self.context.data_sources.add_pandas("fedpipe")

    def _make_context(self) -> Any:
        """Ephemeral context: no temp docs site, no progress bars, no analytics."""
        from great_expectations.data_context.types.base import (
            DataContextConfig,
            InMemoryStoreBackendDefaults,
            ProgressBarsConfig,
        )

        config = DataContextConfig(
            store_backend_defaults=InMemoryStoreBackendDefaults(
                init_temp_docs_sites=False
            ),
            progress_bars=ProgressBarsConfig(globally=False),
            analytics_enabled=False,
        )
        context = self.gx.get_context(mode="ephemeral", project_config=config)
        if self.docs_dir is not None:
            context.add_data_docs_site(
                site_name=_DOCS_SITE,
                site_config={
                    "class_name": "SiteBuilder",
                    "show_how_to_buttons": False,
                    "store_backend": {
                        "class_name": "TupleFilesystemStoreBackend",
                        "base_directory": str(self.docs_dir),
                    },
                    "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
                },
            )
        return context

    def _actions(self) -> list[Any]:
        """Checkpoint actions: update our Data Docs site if a report is wanted."""
        if self.docs_dir is None:
            return []
        from great_expectations.checkpoint import UpdateDataDocsAction

        return [UpdateDataDocsAction(name="update_data_docs", site_names=[_DOCS_SITE])]

    def _result_format(self, frame: pd.DataFrame) -> dict[str, Any]:
        """COMPLETE results, failing rows identified by sample id and position."""
        result_format: dict[str, Any] = {"result_format": "COMPLETE"}
        if ROW_NUMBER in frame.columns:  # the row summary, not the raw table
            result_format["unexpected_index_column_names"] = [
                self.spec.id_column,
                ROW_NUMBER,
            ]
        return result_format

    def run(self, name: str, frame: pd.DataFrame, checks: list[_Check]) -> _Outcome:
        """Validate ``frame`` against ``checks`` via a checkpoint named ``name``."""
        gx = self.gx
        batch = self.datasource.add_dataframe_asset(
            name
        ).add_batch_definition_whole_dataframe(name)
        suite = self.context.suites.add(
            gx.ExpectationSuite(
                name=f"fedpipe_{name}_checks",
                expectations=[check.expectation for check in checks],
            )
        )
        definition = self.context.validation_definitions.add(
            gx.ValidationDefinition(data=batch, suite=suite, name=name)
        )
        checkpoint = self.context.checkpoints.add(
            gx.Checkpoint(
                name=f"fedpipe_{name}",
                validation_definitions=[definition],
                actions=self._actions(),
                result_format=self._result_format(frame),
            )
        )
        checkpoint_result = checkpoint.run(batch_parameters={"dataframe": frame})
        (suite_result,) = checkpoint_result.run_results.values()
        ordered = _align_results(suite, checks, suite_result.results)
        return _Outcome(name, tuple(checks), ordered, checkpoint_result)


def _align_results(suite: Any, checks: list[_Check], results: list[Any]) -> tuple:
    """Order GX results like ``checks`` (GX does not keep suite order)."""
    position = {exp.id: i for i, exp in enumerate(suite.expectations)}
    if len(position) != len(checks) or len(results) != len(checks):
        raise RuntimeError("GX returned an unexpected number of results")
    ordered: list[Any] = [None] * len(checks)
    for result in results:
        ordered[position[result.expectation_config.id]] = result
    return tuple(ordered)


# --------------------------------------------------------------- report building


def _make_report(
    n_rows: int, outcomes: Sequence[_Outcome], spec: _Spec
) -> ValidationReport:
    """Collect failures from all suites into a :class:`ValidationReport`."""
    failures = []
    n_expectations = 0
    for outcome in outcomes:
        n_expectations += len(outcome.checks)
        for check, result in zip(outcome.checks, outcome.results, strict=True):
            if not result.success:
                failures.append(_make_failure(check, result, spec))
    return ValidationReport(
        success=not failures,
        n_rows=int(n_rows),
        n_expectations=n_expectations,
        failures=tuple(failures),
    )


def _make_failure(check: _Check, result: Any, spec: _Spec) -> ExpectationFailure:
    """Turn one failed GX result into an :class:`ExpectationFailure`."""
    config = result.expectation_config
    payload = dict(result.result or {})
    error = _exception_message(result.exception_info)
    if error is not None:
        detail = f"could not be evaluated: {error}"
    else:
        detail = check.describe(payload)
    return ExpectationFailure(
        expectation=str(config.type),
        column=config.kwargs.get("column"),
        unexpected_count=int(payload.get("unexpected_count") or 0),
        examples=_example_ids(payload, spec.id_column),
        detail=detail,
    )


def _exception_message(info: Any) -> str | None:
    """Return the first raised-exception message in GX ``exception_info``."""
    if not isinstance(info, Mapping):
        return None
    if "raised_exception" in info:
        return info.get("exception_message") if info["raised_exception"] else None
    for value in info.values():
        message = _exception_message(value)
        if message is not None:
            return message
    return None


def _example_ids(payload: Mapping[str, Any], id_column: str) -> tuple[str, ...]:
    """Up to five distinct sample ids of failing rows, in row order."""
    examples: list[str] = []
    for entry in payload.get("unexpected_index_list") or []:
        if not isinstance(entry, Mapping):
            continue
        label = _id_label(entry.get(id_column), entry.get(ROW_NUMBER))
        if label not in examples:
            examples.append(label)
        if len(examples) == MAX_EXAMPLES:
            break
    return tuple(examples)


def _id_label(sample_id: Any, row: Any) -> str:
    """Render a sample id; a null id is shown with its row position."""
    if _is_missing(sample_id):
        return f"<null id at row {row}>"
    return str(sample_id)


def _is_missing(value: Any) -> bool:
    """True for None, NaN, NaT and pd.NA."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


# ------------------------------------------------------------------ describers


def _plural(count: int, noun: str) -> str:
    """``1 row`` / ``3 rows``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _have(payload: Mapping[str, Any], what: str) -> str:
    """``1 row has <what>`` / ``3 rows have <what>``."""
    count = int(payload.get("unexpected_count") or 0)
    verb = "has" if count == 1 else "have"
    return f"{_plural(count, 'row')} {verb} {what}"


def _num(value: Any) -> str:
    """Compact number formatting: 255.0 -> '255', 0.5 -> '0.5'."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return f"{float(value):g}"
    return repr(value) if isinstance(value, str) else str(value)


def _values(payload: Mapping[str, Any]) -> str:
    """Up to three distinct unexpected values, in row order."""
    shown: list[str] = []
    for value in payload.get("unexpected_list") or []:
        text = "null" if _is_missing(value) else _num(value)
        if text not in shown:
            shown.append(text)
        if len(shown) == _MAX_VALUES_IN_DETAIL:
            break
    return ", ".join(shown) if shown else "n/a"


def _extreme(payload: Mapping[str, Any], pick: Callable[..., Any]) -> str:
    """Min or max of the numeric unexpected values."""
    values = [
        float(v)
        for v in payload.get("unexpected_list") or []
        if isinstance(v, numbers.Real) and not _is_missing(v)
    ]
    return _num(pick(values)) if values else "n/a"


def _short_list(items: Sequence[Any], limit: int = 5) -> str:
    """``[a, b, c]`` or ``[a, b, c, ... (+7 more)]``."""
    shown = ", ".join(str(item) for item in list(items)[:limit])
    more = len(items) - limit
    return f"[{shown}, ... (+{more} more)]" if more > 0 else f"[{shown}]"


def _format_classes(classes: Sequence[int]) -> str:
    """``[0..9]`` for a contiguous range of 3+ ints, else ``[0, 2, 5]``."""
    values = sorted(classes)
    contiguous = values == list(range(values[0], values[-1] + 1)) if values else False
    if contiguous and len(values) >= 3:
        return f"[{values[0]}..{values[-1]}]"
    return "[" + ", ".join(str(v) for v in values) + "]"


def _describe_missing_classes(
    payload: Mapping[str, Any], column: str, classes: Sequence[int]
) -> str:
    """Sentence for expect_column_distinct_values_to_contain_set."""
    missing = payload.get("partial_missing_list") or []
    shown = sorted(int(v) for v in missing if isinstance(v, numbers.Real))
    return (
        f"{column} must contain every class in {_format_classes(classes)}; "
        f"missing classes: {_short_list(shown, limit=10)}"
    )


def _describe_column_set(payload: Mapping[str, Any], spec: _Spec) -> str:
    """Sentence for expect_table_columns_to_match_set."""
    observed = list(payload.get("observed_value") or [])
    expected = spec.expected_columns
    missing = [c for c in expected if c not in set(observed)]
    unexpected = sorted(str(c) for c in set(observed) - set(expected))
    return (
        "columns must be exactly the id, label and "
        f"{len(spec.feature_columns)} declared feature columns; "
        f"missing: {_short_list(missing)}; unexpected: {_short_list(unexpected)}"
    )


# ------------------------------------------------------------------ report files


def _prepare_report_dir(report_dir: Path) -> Path:
    """Create ``report_dir``, remove files this module wrote there before.

    Returns
    -------
    pathlib.Path
        The Data Docs directory (``report_dir / "data_docs"``), not yet created.
    """
    report_dir.mkdir(parents=True, exist_ok=True)
    for name in (_SUMMARY_FILE, _RESULT_FILE):
        (report_dir / name).unlink(missing_ok=True)
    docs_dir = report_dir / _DOCS_DIRNAME
    if docs_dir.is_dir():
        shutil.rmtree(docs_dir)
    return docs_dir.resolve()


def _write_reports(
    report_dir: Path, report: ValidationReport, outcomes: Sequence[_Outcome]
) -> None:
    """Write ``summary.json`` (deterministic) and ``result.json`` (full GX)."""
    summary = json.dumps(report.to_dict(), sort_keys=True, indent=2) + "\n"
    (report_dir / _SUMMARY_FILE).write_text(summary, encoding="utf-8")
    full = {
        "success": report.success,
        "checkpoints": {o.name: _checkpoint_json(o) for o in outcomes},
    }
    text = json.dumps(_json_safe(full), sort_keys=True, indent=2, allow_nan=False)
    (report_dir / _RESULT_FILE).write_text(text + "\n", encoding="utf-8")


def _checkpoint_json(outcome: _Outcome) -> dict[str, Any]:
    """Checkpoint name, success, run id and each suite result's to_json_dict()."""
    result = outcome.checkpoint_result
    return {
        "name": result.name,
        "success": bool(result.success),
        "run_id": str(result.run_id),
        "validation_results": [r.to_json_dict() for r in result.run_results.values()],
    }


def _json_safe(value: Any) -> Any:
    """Replace NaN/inf (which GX leaves in results) with None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


# ------------------------------------------------------------ prepared data sets


def validate_prepared(
    summary: pd.DataFrame,
    *,
    classes: Sequence[int],
    class_names: Sequence[str],
    value_range: tuple[float, float],
    min_rows: int,
    imbalance_ratio: float = 10.0,
    imbalance: str = "warn",
    duplicates: str = "warn",
    mixed_sizes: str = "warn",
    report_dir: Path | None = None,
) -> ValidationReport:
    """Validate a prepared data set from its per-sample summary.

    ``summary`` is :func:`fedpipe.ingest.row_summaries` (one row per sample with
    ``sample_id``, ``label``, ``status``, ``content_hash``, feature min/max/NaN
    count and, for images, the original height/width/channels).

    Always fatal: fewer than ``min_rows`` samples, null or repeated ids, samples
    that could not be read (listed by id: the file path for images, the row for
    tables), labels outside ``classes``, a declared class without samples, NaN
    features, values outside ``value_range``. Fatal or a warning, as the
    ``imbalance``, ``duplicates`` and ``mixed_sizes`` arguments say ("fail" or
    "warn"): the largest class above ``imbalance_ratio`` times the smallest;
    repeated content (same pixels or feature values); images of different sizes or
    channel counts before resizing.
    """
    spec = _Spec.build(
        id_column="sample_id",
        label_column="label",
        feature_columns=(),
        classes=classes,
        value_range=value_range,
        min_rows=min_rows,
    )
    frame = _prepared_frame(summary)
    docs_dir = _prepare_report_dir(Path(report_dir)) if report_dir is not None else None
    runner = _GxRunner(spec, docs_dir)
    gxe = runner.gxe
    names = {int(c): str(n) for c, n in zip(classes, class_names, strict=False)}
    strict = _prepared_checks(gxe, spec, names)
    soft: list[tuple[str, _Check]] = [(duplicates, _duplicate_check(gxe))]
    if "orig_size" in frame:
        soft.append((mixed_sizes, _size_check(gxe)))
    strict += [check for action, check in soft if action == "fail"]
    warn = [check for action, check in soft if action != "fail"]
    outcomes = [runner.run("data", frame, strict)]
    if warn:
        outcomes.append(runner.run("warnings", frame, warn))
    failures = list(_make_report(len(frame), outcomes[:1], spec).failures)
    warnings = list(_make_report(len(frame), outcomes[1:], spec).failures)
    skew = _imbalance_finding(frame, names, imbalance_ratio)
    if skew is not None:
        (failures if imbalance == "fail" else warnings).append(skew)
    report = ValidationReport(
        success=not failures,
        n_rows=len(frame),
        n_expectations=len(strict) + len(warn) + 1,
        failures=tuple(failures),
        warnings=tuple(warnings),
    )
    if report_dir is not None:
        _write_reports(Path(report_dir), report, outcomes)
    return report


def _prepared_frame(summary: pd.DataFrame) -> pd.DataFrame:
    """Add the derived columns the prepared checks run on."""
    frame = summary.reset_index(drop=True).copy()
    frame[ROW_NUMBER] = np.arange(len(frame), dtype=np.int64)
    ok = frame["status"] == "ok"
    # unreadable samples all have zero features: do not count them as duplicates
    frame["content_key"] = frame["content_hash"].where(
        ok, "unreadable:" + frame["sample_id"]
    )
    if {"orig_height", "orig_width", "orig_channels"} <= set(frame.columns):
        size = (
            frame["orig_height"].astype(str)
            + "x"
            + frame["orig_width"].astype(str)
            + "x"
            + frame["orig_channels"].astype(str)
        )
        frame["orig_size"] = size.where(ok, None)
    return frame


def _prepared_checks(gxe: Any, spec: _Spec, names: Mapping[int, str]) -> list[_Check]:
    """The always-fatal expectations on a prepared data set."""
    classes = _format_classes(spec.classes)
    binary = (
        " (exactly 0/1 for a two-class sigmoid model)" if len(spec.classes) == 2 else ""
    )
    low, high = _num(spec.low), _num(spec.high)
    return [
        _Check(
            gxe.ExpectTableRowCountToBeBetween(min_value=spec.min_rows),
            lambda r: (
                f"need at least {spec.min_rows} samples (validation.min_rows); "
                f"observed {r.get('observed_value')}"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToNotBeNull(column="sample_id"),
            lambda r: f"sample ids must not be null; {_have(r, 'a null id')}",
        ),
        _Check(
            gxe.ExpectColumnValuesToBeUnique(column="sample_id"),
            lambda r: f"sample ids must be unique; {_have(r, 'a repeated id')}",
        ),
        _Check(
            gxe.ExpectColumnValuesToBeInSet(column="status", value_set=["ok"]),
            lambda r: (
                f"every sample must be readable; {_have(r, 'a problem')} "
                f"(e.g. {_values(r)})"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToBeInSet(
                column="label", value_set=list(spec.classes)
            ),
            lambda r: (
                f"labels must be class indices in {classes}{binary}; "
                f"{_have(r, 'other values')} (e.g. {_values(r)})"
            ),
        ),
        _Check(
            gxe.ExpectColumnDistinctValuesToContainSet(
                column="label", value_set=list(spec.classes)
            ),
            lambda r: _describe_missing_named(r, names),
        ),
        _Check(
            gxe.ExpectColumnUniqueValueCountToBeBetween(column="label", min_value=2),
            lambda r: (
                "a classifier needs samples of at least 2 classes; found "
                f"{r.get('observed_value')}"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToBeInSet(column="feature_nan_count", value_set=[0]),
            lambda r: (
                "feature values must not be NaN or empty; "
                f"{_have(r, 'NaN features')} (up to {_extreme(r, max)} per row)"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToBeBetween(column=FEATURE_MIN, min_value=spec.low),
            lambda r: (
                f"feature values must be >= {low}; {_have(r, 'a smaller value')} "
                f"(lowest {_extreme(r, min)})"
            ),
        ),
        _Check(
            gxe.ExpectColumnValuesToBeBetween(column=FEATURE_MAX, max_value=spec.high),
            lambda r: (
                f"feature values must be <= {high}; {_have(r, 'a larger value')} "
                f"(highest {_extreme(r, max)})"
            ),
        ),
    ]


def _duplicate_check(gxe: Any) -> _Check:
    return _Check(
        gxe.ExpectColumnValuesToBeUnique(column="content_key"),
        lambda r: (
            f"samples should not repeat another sample's content; "
            f"{_have(r, 'repeated content')} (validation.duplicates; data.dedupe "
            "drops repeats before the held-out split)"
        ),
    )


def _size_check(gxe: Any) -> _Check:
    return _Check(
        gxe.ExpectColumnUniqueValueCountToBeBetween(column="orig_size", max_value=1),
        lambda r: (
            "images differ in size or channel count before resizing (height x width "
            f"x channels): {r.get('observed_value')} distinct shapes; they are "
            "resized to data.image_size (validation.mixed_sizes)"
        ),
    )


def _imbalance_finding(
    frame: pd.DataFrame, names: Mapping[int, str], ratio: float
) -> ExpectationFailure | None:
    """Largest class more than ``ratio`` times the smallest (present) class."""
    labels = frame.loc[frame["status"] == "ok", "label"]
    counts = labels[labels.isin(list(names))].value_counts()
    if len(counts) < 2:
        return None
    big, small = counts.idxmax(), counts.idxmin()
    observed = counts[big] / counts[small]
    if observed <= ratio:
        return None
    return ExpectationFailure(
        expectation="fedpipe_class_imbalance",
        column="label",
        unexpected_count=0,
        examples=(),
        detail=(
            f"class {names.get(int(big), big)!s} has {int(counts[big])} samples, "
            f"{observed:.1f}x class {names.get(int(small), small)!s} "
            f"({int(counts[small])}); validation.imbalance_ratio={ratio:g}"
        ),
    )


def _describe_missing_named(
    payload: Mapping[str, Any], names: Mapping[int, str]
) -> str:
    """Missing classes, by name (a class folder without images, for instance)."""
    missing = payload.get("partial_missing_list") or []
    shown = [names.get(int(v), str(v)) for v in missing if isinstance(v, numbers.Real)]
    return (
        "every declared class needs samples; none for "
        f"{_short_list(sorted(shown), limit=10)}"
    )

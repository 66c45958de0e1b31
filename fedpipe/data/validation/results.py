"""What a validation found: :class:`ValidationReport` and its failures, from GX;
:class:`ValidationFailed`, raised when data fails it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedpipe.core.errors import FedpipeError
from fedpipe.data.validation.describe import is_missing, plural
from fedpipe.data.validation.spec import MAX_EXAMPLES, ROW_NUMBER, Check, Outcome, Spec


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
            parts.append(plural(self.unexpected_count, "row"))
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
    warnings : tuple of ExpectationFailure
        Failed expectations that do not fail the validation.
    skipped : tuple of str
        Operating-system files the ingest left out of the data (``Thumbs.db``,
        ``.DS_Store``, ...), relative to ``data.path``; not samples.
    """

    success: bool
    n_rows: int
    n_expectations: int
    failures: tuple[ExpectationFailure, ...]
    warnings: tuple[ExpectationFailure, ...] = ()
    skipped: tuple[str, ...] = ()

    def summary_lines(self) -> list[str]:
        """Return short, actionable text lines.

        Returns
        -------
        list of str
            ``["validation passed: N rows, M expectations"]`` on success, otherwise
            one line per failure; then one per warning and, if the ingest skipped
            operating-system files, a line counting them.
        """
        warned = [
            "WARNING " + w.summary_line().removeprefix("FAILED ") for w in self.warnings
        ] + self._skipped_lines()
        if self.success:
            return [
                f"validation passed: {self.n_rows} rows, "
                f"{self.n_expectations} expectations"
            ] + warned
        return [failure.summary_line() for failure in self.failures] + warned

    def _skipped_lines(self) -> list[str]:
        if not self.skipped:
            return []
        shown = ", ".join(self.skipped[:MAX_EXAMPLES])
        more = len(self.skipped) - MAX_EXAMPLES
        return [
            f"skipped {len(self.skipped)} operating-system files, not samples: "
            f"{shown}{f', ... ({more} more)' if more > 0 else ''}"
        ]

    def to_dict(self) -> dict[str, Any]:
        """Return a deterministic, JSON-serialisable dict (no timestamps or ids)."""
        return {
            "success": self.success,
            "n_rows": self.n_rows,
            "n_expectations": self.n_expectations,
            "failures": [failure.to_dict() for failure in self.failures],
            "warnings": [warning.to_dict() for warning in self.warnings],
        } | ({"skipped": list(self.skipped)} if self.skipped else {})


def make_report(
    n_rows: int, outcomes: Sequence[Outcome], spec: Spec
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


def _make_failure(check: Check, result: Any, spec: Spec) -> ExpectationFailure:
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
    if is_missing(sample_id):
        return f"<null id at row {row}>"
    return str(sample_id)


class ValidationFailed(FedpipeError, RuntimeError):
    """The data failed validation; the message is the summary a person acts on."""

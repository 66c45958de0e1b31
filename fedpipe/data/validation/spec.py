"""The settings of one validation, the row-summary columns, and what a check is."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedpipe.core.errors import SettingError

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


@dataclass(frozen=True)
class Spec:
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
    ) -> Spec:
        """Check and normalise the user-facing arguments."""
        if id_column == label_column:
            raise SettingError("id_column and label_column must differ")
        clashes = {id_column, label_column} & set(SUMMARY_COLUMNS)
        if clashes:
            raise SettingError(
                f"column names clash with row-summary columns: {clashes}"
            )
        low, high = (float(v) for v in value_range)
        if low > high:
            raise SettingError(f"value_range low > high: {value_range}")
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
class Check:
    """A GX expectation plus a function turning its result into one sentence."""

    expectation: Any
    describe: Describer


@dataclass(frozen=True)
class Outcome:
    """Result of running one suite: the checks and their GX results, in order."""

    name: str
    checks: tuple[Check, ...]
    results: tuple[Any, ...]
    checkpoint_result: Any

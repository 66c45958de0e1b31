"""Sentences for failed expectations: what was expected and what was observed."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from fedpipe.data.validation.spec import Spec


_MAX_VALUES_IN_DETAIL = 3


def is_missing(value: Any) -> bool:
    """True for None, NaN, NaT and pd.NA."""
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def plural(count: int, noun: str) -> str:
    """``1 row`` / ``3 rows``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def have(payload: Mapping[str, Any], what: str) -> str:
    """``1 row has <what>`` / ``3 rows have <what>``."""
    count = int(payload.get("unexpected_count") or 0)
    verb = "has" if count == 1 else "have"
    return f"{plural(count, 'row')} {verb} {what}"


def num(value: Any) -> str:
    """Compact number formatting: 255.0 -> '255', 0.5 -> '0.5'."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return f"{float(value):g}"
    return repr(value) if isinstance(value, str) else str(value)


def unexpected_values(payload: Mapping[str, Any]) -> str:
    """Up to three distinct unexpected values, in row order."""
    shown: list[str] = []
    for value in payload.get("unexpected_list") or []:
        text = "null" if is_missing(value) else num(value)
        if text not in shown:
            shown.append(text)
        if len(shown) == _MAX_VALUES_IN_DETAIL:
            break
    return ", ".join(shown) if shown else "n/a"


def extreme(payload: Mapping[str, Any], pick: Callable[..., Any]) -> str:
    """Min or max of the numeric unexpected values."""
    values = [
        float(v)
        for v in payload.get("unexpected_list") or []
        if isinstance(v, numbers.Real) and not is_missing(v)
    ]
    return num(pick(values)) if values else "n/a"


def short_list(items: Sequence[Any], limit: int = 5) -> str:
    """``[a, b, c]`` or ``[a, b, c, ... (+7 more)]``."""
    shown = ", ".join(str(item) for item in list(items)[:limit])
    more = len(items) - limit
    return f"[{shown}, ... (+{more} more)]" if more > 0 else f"[{shown}]"


def format_classes(classes: Sequence[int]) -> str:
    """``[0..9]`` for a contiguous range of 3+ ints, else ``[0, 2, 5]``."""
    values = sorted(classes)
    contiguous = values == list(range(values[0], values[-1] + 1)) if values else False
    if contiguous and len(values) >= 3:
        return f"[{values[0]}..{values[-1]}]"
    return "[" + ", ".join(str(v) for v in values) + "]"


def describe_missing_classes(
    payload: Mapping[str, Any], column: str, classes: Sequence[int]
) -> str:
    """Sentence for expect_column_distinct_values_to_contain_set."""
    missing = payload.get("partial_missing_list") or []
    shown = sorted(int(v) for v in missing if isinstance(v, numbers.Real))
    return (
        f"{column} must contain every class in {format_classes(classes)}; "
        f"missing classes: {short_list(shown, limit=10)}"
    )


def describe_column_set(payload: Mapping[str, Any], spec: Spec) -> str:
    """Sentence for expect_table_columns_to_match_set."""
    observed = list(payload.get("observed_value") or [])
    expected = spec.expected_columns
    missing = [c for c in expected if c not in set(observed)]
    unexpected = sorted(str(c) for c in set(observed) - set(expected))
    return (
        "columns must be exactly the id, label and "
        f"{len(spec.feature_columns)} declared feature columns; "
        f"missing: {short_list(missing)}; unexpected: {short_list(unexpected)}"
    )


def describe_missing_named(payload: Mapping[str, Any], names: Mapping[int, str]) -> str:
    """Missing classes, by name (a class folder without images, for instance)."""
    missing = payload.get("partial_missing_list") or []
    shown = [names.get(int(v), str(v)) for v in missing if isinstance(v, numbers.Real)]
    return (
        "every declared class needs samples; none for "
        f"{short_list(sorted(shown), limit=10)}"
    )

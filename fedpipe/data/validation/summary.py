"""The row summary: one row per sample with its features' min, max and bad counts.

One GX expectation per feature column is far too slow (tens of seconds to
validate, minutes to render), so the row-level checks run on this small frame.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.data.validation.spec import (
    FEATURE_MAX,
    FEATURE_MIN,
    FEATURE_NON_NUMERIC_COUNT,
    FEATURE_NULL_COUNT,
    ROW_NUMBER,
    Spec,
)


def build_row_summary(
    df: pd.DataFrame, spec: Spec
) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """Derive the row-wise summary frame validated by the row-level suite.

    Parameters
    ----------
    df : pandas.DataFrame
        Raw table; must contain the id and label columns.
    spec : Spec
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

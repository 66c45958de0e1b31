"""The feature value-range expectations both check families end with."""

from __future__ import annotations

from typing import Any

from fedpipe.data.validation.describe import extreme, have, num
from fedpipe.data.validation.spec import FEATURE_MAX, FEATURE_MIN, Check, Spec


def value_range_checks(gxe: Any, spec: Spec, *, name_range: bool) -> list[Check]:
    """Every row's smallest feature ``>= spec.low`` and largest ``<= spec.high``.

    ``name_range`` adds ``(value_range [low, high])`` to each sentence, for
    tables whose settings are called that.
    """
    low, high = num(spec.low), num(spec.high)
    named = f" (value_range [{low}, {high}])" if name_range else ""
    return [
        Check(
            gxe.ExpectColumnValuesToBeBetween(column=FEATURE_MIN, min_value=spec.low),
            lambda r: (
                f"feature values must be >= {low}{named}; "
                f"{have(r, 'a smaller value')} (lowest {extreme(r, min)})"
            ),
        ),
        Check(
            gxe.ExpectColumnValuesToBeBetween(column=FEATURE_MAX, max_value=spec.high),
            lambda r: (
                f"feature values must be <= {high}{named}; "
                f"{have(r, 'a larger value')} (highest {extreme(r, max)})"
            ),
        ),
    ]

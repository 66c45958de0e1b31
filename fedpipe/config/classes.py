"""The one rule for ``data.classes``, for the params and for a library caller of
the table ingest alike (each raises its own error with this message)."""

from __future__ import annotations

from collections.abc import Sequence


def class_names_problem(classes: Sequence[str], num_classes: int | None) -> str | None:
    """What is wrong with ``data.classes`` (at least two distinct, non-empty
    names; ``data.num_classes`` of them if it is given), or None."""
    names = list(classes)
    if len(names) < 2:
        return f"data.classes must list at least 2 class names, got {names}"
    if any(not name.strip() for name in names):
        return f"data.classes: names must not be empty, got {names}"
    repeated = sorted({c for c in names if names.count(c) > 1})
    if repeated:
        return (
            f"data.classes: {', '.join(map(repr, repeated))} listed more than once; "
            "each class needs one name"
        )
    if num_classes is not None and num_classes != len(names):
        return (
            f"data.num_classes={num_classes} but data.classes lists {len(names)} "
            "names; set data.num_classes to null (or to the number of names)"
        )
    return None

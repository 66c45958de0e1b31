"""The kinds a table's feature column can have, in one place.

The ingest decides each feature column's kind once (declared by
``preprocess.categorical`` / ``preprocess.text``, else from its values) and
records every column that is not plain ``numeric`` in ``schema.json``
``column_types``; everything downstream (the preprocess fit, feature skew, the
partition report, ``fedpipe stats``) reads the kind from there:

- ``numeric``: numbers, as read (the default; not listed in ``column_types``);
- ``boolean``: yes/no, true/false (any case) stored as 1/0;
- ``date``: ISO 8601 dates and timestamps (``2024-03-05``, ``2024-03-05
  14:30:00``, ``2024-03-05T14:30:00Z``; a Parquet date or timestamp column)
  stored as days since 1970-01-01 (UTC; a time of day is the fraction);
- ``categorical``: a string column's values, stored as codes into
  ``schema.json`` ``strings``;
- ``text``: free text, stored as codes like ``categorical``.

Plain tuples, so importing it costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

COLUMN_KINDS = ("numeric", "boolean", "date", "categorical", "text")
"""Every kind, in the order ``fedpipe stats`` lists them."""

STRING_KINDS = ("categorical", "text")
"""Stored as codes into the column's table of values (``strings``)."""

MEASURED_KINDS = ("numeric", "date")
"""Quantities on a scale: what a shift, rescale or noise (feature skew) means
something for. A boolean's 0/1 and a code are not."""

TRUE_WORDS = ("yes", "true")
FALSE_WORDS = ("no", "false")
"""A boolean column's present values, compared in lower case, spaces removed."""


def column_kind(name: str, column_types: Mapping[str, str] | None) -> str:
    """``name``'s kind (``numeric`` unless ``column_types`` says otherwise)."""
    return str((column_types or {}).get(name, "numeric"))


def measured_columns(
    feature_names: Sequence[str], column_types: Mapping[str, str] | None
) -> list[int]:
    """The positions of the columns of a :data:`MEASURED_KINDS` kind."""
    return [
        j
        for j, name in enumerate(feature_names)
        if column_kind(str(name), column_types) in MEASURED_KINDS
    ]

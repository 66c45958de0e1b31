"""A raw table to score (``fedpipe predict``): its row ids and feature rows.

The rows come out as the ingest converts a table's features (float32, NaN for
an empty cell; a categorical or text column's cells as the ingest keys them,
surrounding spaces removed, ``""`` for an empty cell), in the fitted
transform's column order; what cannot be scored stops with one line naming
the column, the rows and what would be accepted.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from fedpipe.core.errors import FedpipeError

if TYPE_CHECKING:
    from fedpipe.data.preprocess import Transform

__all__ = [
    "RowNotes", "ScoringError", "read_scoring_columns", "read_scoring_table",
    "row_notes",
]  # fmt: skip

_SHOWN_ROWS = 5


class ScoringError(FedpipeError, ValueError):
    """The table cannot be scored as it is."""


def _rows(index: np.ndarray) -> str:
    """Data rows as 1-based numbers (the header is not a row)."""
    shown = ", ".join(str(int(i) + 1) for i in index[:_SHOWN_ROWS])
    more = f" and {len(index) - _SHOWN_ROWS} more" if len(index) > _SHOWN_ROWS else ""
    return f"row{'s' if len(index) > 1 else ''} {shown}{more}"


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise ScoringError(f"{path}: no such file; give a CSV or Parquet table")
    name = path.name.lower()
    try:
        if name.endswith((".parquet", ".pq")):
            return pd.read_parquet(path).astype(object)
        return pd.read_csv(path, dtype=str)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError,
            OSError, ValueError) as exc:  # fmt: skip
        raise ScoringError(
            f"{path}: not a readable table ({exc}); expected a CSV with a header "
            "line, or a Parquet file"
        ) from None


def read_scoring_table(
    path: Path,
    *,
    columns: Sequence[str],
    id_column: str | None,
    allow_missing: bool,
) -> tuple[list[str], np.ndarray]:
    """The ids and ``(n, len(columns))`` float32 rows of the table at ``path``
    (every column numeric; :func:`read_scoring_columns` with no string
    column, stacked)."""
    ids, values = read_scoring_columns(
        path, columns=columns, id_column=id_column, allow_missing=allow_missing
    )
    return ids, np.stack([values[name] for name in columns], axis=1)


def read_scoring_columns(
    path: Path,
    *,
    columns: Sequence[str],
    id_column: str | None,
    allow_missing: bool,
    strings: Collection[str] = (),
    kinds: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, np.ndarray]]:
    """The ids and, per column, the ``(n,)`` values of the table at ``path``.

    Parameters
    ----------
    columns : sequence of str
        The feature columns the model takes (``transform.json``'s), in order;
        other columns (the label, anything else) are ignored.
    id_column : str or None
        ``data.id_column``: its values are the ids; None: ``row-1``,
        ``row-2``, ... (the ingest's ids of a table without one).
    allow_missing : bool
        Empty cells are scored (the transform imputes them); else refused.
    strings : collection of str
        The categorical and text columns: their cells as str (the ingest's
        key of the value, surrounding spaces removed; ``""`` when empty);
        every other column float32 (NaN when empty).
    kinds : mapping, optional
        ``schema.json`` ``column_types``: a ``date`` column's cells become days
        since 1970-01-01, a ``boolean`` one's 1/0, as the ingest stored them.

    Raises
    ------
    ScoringError
        A column missing, a non-numeric value in a numeric column, an empty
        cell the transform cannot fill, or no rows.
    """
    path = Path(path)
    table = _read(path)
    have = [str(c) for c in table.columns]
    absent = [c for c in columns if c not in have]
    if absent:
        raise ScoringError(
            f"{path}: column {absent[0]!r} is missing"
            + (f" (and {len(absent) - 1} more)" if len(absent) > 1 else "")
            + f"; the model takes the columns {', '.join(map(repr, columns))}"
        )
    if id_column is not None and id_column not in have:
        raise ScoringError(
            f"{path}: no column {id_column!r} (data.id_column names it as the row "
            "ids); add it, or score a table that has it"
        )
    if len(table) == 0:
        raise ScoringError(f"{path}: no data rows; expected one line per row")
    out: dict[str, np.ndarray] = {}
    kinds = dict(kinds or {})
    for name in columns:
        raw = table[name]
        if name in strings:
            out[name] = _texts(raw)
            empty = np.flatnonzero(out[name] == "")
        elif kinds.get(name) in ("date", "boolean"):
            out[name] = _as_kind(raw, name, kinds[name], path)
            empty = np.flatnonzero(np.isnan(out[name]))
        else:
            out[name] = _numbers(raw, name, path)
            empty = np.flatnonzero(np.isnan(out[name]))
        if empty.size and not allow_missing:
            raise ScoringError(
                f"{path}: column {name!r} has empty cells ({_rows(empty)}); the "
                "model was trained with preprocess.missing: refuse, so it cannot "
                "fill them: fill them, or retrain with preprocess.missing: mean "
                "or median"
            )
    if id_column is None:
        ids = [f"row-{r}" for r in range(1, len(table) + 1)]
    else:
        ids = [str(v) for v in table[id_column].tolist()]
    return ids, out


def _numbers(raw: pd.Series, name: str, path: Path) -> np.ndarray:
    values = pd.to_numeric(raw, errors="coerce").to_numpy(
        dtype=np.float64, na_value=np.nan
    )
    bad = np.flatnonzero(raw.notna().to_numpy() & np.isnan(values))
    if bad.size:
        first = raw.iloc[int(bad[0])]
        raise ScoringError(
            f"{path}: column {name!r} has non-numeric values ({_rows(bad)}, "
            f"e.g. {str(first)[:40]!r}); the model was trained on numbers in "
            "this column"
        )
    return values.astype(np.float32)


def _as_kind(raw: pd.Series, name: str, kind: str, path: Path) -> np.ndarray:
    """A date or boolean column's cells as the ingest stores them."""
    from fedpipe.data.ingest.table_rows import boolean_values, date_days

    values = date_days(raw) if kind == "date" else boolean_values(raw)
    bad = np.flatnonzero(raw.notna().to_numpy() & np.isnan(values))
    if bad.size:
        first = raw.iloc[int(bad[0])]
        what = "ISO dates" if kind == "date" else "yes/no or true/false"
        raise ScoringError(
            f"{path}: column {name!r} has values that are not {what} "
            f"({_rows(bad)}, e.g. {str(first)[:40]!r}); the model was trained "
            f"on {what} in this column"
        )
    return values.astype(np.float32)


def _texts(raw: pd.Series) -> np.ndarray:
    """A string column's cells as the ingest keys them; ``""`` when empty."""
    from fedpipe.data.ingest.table_rows import text_key

    return np.array(
        ["" if pd.isna(v) else text_key(v) for v in raw.tolist()], dtype=object
    )


@dataclass(frozen=True)
class RowNotes:
    """What the model does to rows it cannot read as they are
    (:func:`row_notes`).

    Attributes
    ----------
    notes : list of str
        Per row, ``"; "``-joined: each blank cell filled (with what) and each
        categorical value outside the model's vocabulary (read as "other");
        ``""`` for a row read as it is.
    filled, other : dict
        Column name -> blank cells / values read as "other".
    """

    notes: list[str]
    filled: dict[str, int] = field(default_factory=dict)
    other: dict[str, int] = field(default_factory=dict)

    def summary(self, column: str = "notes") -> str | None:
        """One line for the console (None when no row is flagged)."""
        flagged = sum(1 for n in self.notes if n)
        if not flagged:
            return None

        def each(counts: dict[str, int]) -> str:
            return ", ".join(f"{name} {n}" for name, n in counts.items())

        parts = []
        if self.filled:
            blank = sum(self.filled.values())
            parts.append(f"{blank} blank cell(s) ({each(self.filled)})")
        if self.other:
            parts.append(
                f"{sum(self.other.values())} value(s) not in the model's vocabulary, "
                f'read as "other" ({each(self.other)})'
            )
        return (
            f"{flagged} of {len(self.notes)} row(s) flagged in the {column} column: "
            + "; ".join(parts)
        )


def row_notes(transform: Transform, columns: Mapping[str, np.ndarray]) -> RowNotes:
    """Per row of ``columns`` (:func:`read_scoring_columns`' arrays), what the
    model of ``transform`` reads differently from the cell: a blank numeric
    cell filled with the fitted mean or median, a blank categorical cell filled
    with the most frequent value (or read as "other" without one), a value
    outside a categorical column's vocabulary (unseen in training, or too rare
    to be kept) read as "other", a blank text read as no words. Words a text
    column's vocabulary lacks are left unflagged (a text is read word by word)."""
    n = len(next(iter(columns.values()))) if columns else 0
    notes: list[list[str]] = [[] for _ in range(n)]
    filled: dict[str, int] = {}
    other: dict[str, int] = {}
    fill = transform.scaling_for(None).fill
    encodings = {e.column: e for e in transform.encodings}
    for j, name in enumerate(transform.columns):
        values = np.asarray(columns[name])
        enc = encodings.get(j)
        if enc is None:
            blank = np.flatnonzero(np.isnan(values.astype(np.float64)))
            text = (
                f"{name} blank: filled {_number(fill[j])}" if fill is not None else ""
            )
            for i in blank:
                notes[i].append(text or f"{name} blank")
            if blank.size:
                filled[name] = int(blank.size)
            continue
        strings = values.astype(str)
        blank = np.flatnonzero(strings == "")
        if enc.kind in ("onehot", "index"):
            kept = set(enc.vocabulary)
            if fill is not None and enc.vocabulary:
                text = f"{name} blank: filled {str(enc.vocabulary[0])!r}"
            else:
                text = f'{name} blank: read as "other"'
            unknown = [i for i, v in enumerate(strings) if v and v not in kept]
            for i in unknown:
                notes[i].append(
                    f'{name} {str(strings[i])!r} not in the vocabulary: "other"'
                )
            if unknown:
                other[name] = len(unknown)
        else:
            text = f"{name} blank: no words"
        for i in blank:
            notes[i].append(text)
        if blank.size:
            filled[name] = int(blank.size)
    return RowNotes(["; ".join(row) for row in notes], filled, other)


def _number(value: float) -> str:
    return f"{float(value):.6g}"

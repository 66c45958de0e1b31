"""What a table's feature columns hold: their kinds, and which look like row ids."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from fedpipe.data.ingest.table_read import TableFile
from fedpipe.data.ingest.table_rows import ISO_DATE, numeric_values, text_key
from fedpipe.data.kinds import FALSE_WORDS, TRUE_WORDS

PROBE_ROWS = 1024  # rows read first to rule out columns of numbers


def inferred_kinds(
    reader: TableFile,
    features: list[str],
    declared: dict[str, str],
    chunk_rows: int,
) -> dict[str, tuple[str, str]]:
    """Column -> (kind, why) of the undeclared feature columns that are not
    plain numbers (:mod:`fedpipe.data.kinds`): a Parquet date or timestamp
    type is a date, a Parquet bool a boolean; a column none of whose present
    values is a number is a boolean when every one is yes/no/true/false, a
    date when every one is an ISO 8601 date, else categorical. The first
    rows, then the whole file only while some candidate column has shown no
    number yet (a numeric table: its first rows)."""
    out = {
        c: kind
        for c, kind in reader.stored_kinds(features).items()
        if c not in declared
    }
    open_ = [
        c
        for c in reader.text_candidates(features)
        if c not in declared and c not in out
    ]
    shapes: dict[str, set[str]] = {}
    if open_:
        _drop_numbers(reader, reader.head(open_, PROBE_ROWS), open_, shapes)
    for chunk in reader.chunks(list(open_), chunk_rows) if open_ else ():
        _drop_numbers(reader, chunk, open_, shapes)
        if not open_:
            break
    for column in open_:
        shape = shapes.get(column)
        if shape is None:
            continue  # no present value (the ingest names an empty column)
        if "boolean" in shape:
            out[column] = ("boolean", "every value yes/no or true/false: 1/0")
        elif "date" in shape:
            out[column] = ("date", "every value an ISO date: days since 1970-01-01")
        else:
            out[column] = ("categorical", "text values, none a number")
    return {c: out[c] for c in features if c in out}


def _drop_numbers(
    reader: TableFile,
    chunk: pd.DataFrame,
    open_: list[str],
    shapes: dict[str, set[str]],
) -> None:
    """Remove from ``open_`` the columns with a number in ``chunk``; narrow in
    ``shapes`` what the others' present values may all be (``boolean``,
    ``date``; an empty set: text)."""
    for column in list(open_):
        raw = chunk[column]
        values = numeric_values(raw, key="data.feature_columns", path=reader.path)
        present = raw.notna().to_numpy()
        if (present & ~np.isnan(values)).any():
            open_.remove(column)  # has a number: not a text column
            shapes.pop(column, None)
            continue
        if not present.any():
            continue
        shape = shapes.setdefault(column, {"boolean", "date"})
        if not shape:
            continue
        keys = pd.Series([text_key(v) for v in raw[present].tolist()], dtype=object)
        if "boolean" in shape and not keys.str.lower().isin(_BOOL_WORDS).all():
            shape.discard("boolean")
        if "date" in shape and not keys.str.fullmatch(ISO_DATE).all():
            shape.discard("date")


_BOOL_WORDS = (*TRUE_WORDS, *FALSE_WORDS)


# ---------------------------------------------------------------- id-like columns

_ID_NAMES = {"id", "index", "row", "rownames", "rowid", "row_id", "row_number"}
_UNNAMED = re.compile(r"Unnamed: \d+")  # pandas' name for a written index
_ID_SUFFIX = re.compile(r"(?:[_ .\-][iI][dD]|[a-z]I[dD])")  # user_id, PassengerId


def _id_like_name(column: str) -> bool:
    """``id``, ``rownames``, ``Unnamed: 0``, ``index``, ``*_id``, ``PassengerId``."""
    name = column.strip()
    return (
        name.lower() in _ID_NAMES
        or _UNNAMED.fullmatch(name) is not None
        or _ID_SUFFIX.fullmatch(name[-3:]) is not None
    )


def id_like_note(column: str, why: str) -> str:
    """The warning for a column left out of the features as an id."""
    return (
        f"data.feature_columns: column {column!r} looks like a row id ({why}) and "
        f"is not used as a feature; set data.id_column: {column!r} to name the "
        "rows by it, or list the columns to use in data.feature_columns to keep "
        "it as a feature"
    )


@dataclass
class _IdScan:
    """One candidate column read in order: still id-like, and why."""

    ints: bool = True  # every value so far an integer, each one more than the last
    text: bool = True  # every value so far a non-numeric string
    by_one: bool = False  # ... and they count the rows: 0.. or 1.., by one
    start: int | None = None
    last: int | None = None
    seen: set[str] = field(default_factory=set)

    def read(self, raw: pd.Series, path: Path) -> bool:
        """Take the next values; whether the column may still be an id."""
        if raw.isna().any():
            return False
        values = numeric_values(raw, key="data.feature_columns", path=path)
        if self.ints:
            integral = np.isfinite(values).all() and (np.floor(values) == values).all()
            if not integral or len(values) == 0:
                self.ints = False
            else:
                ints = values.astype(np.int64)
                previous = ints[0] - 1 if self.last is None else self.last
                steps = np.diff(np.concatenate([[previous], ints]))
                if self.start is None:
                    self.start = int(ints[0])
                    self.by_one = self.start in (0, 1)
                self.by_one = self.by_one and bool((steps == 1).all())
                self.ints = bool((steps > 0).all())
                self.last = int(ints[-1])
        if self.text:
            keys = [text_key(v) for v in raw.tolist()]
            numeric = ~np.isnan(values)
            if numeric.any() or len(set(keys)) < len(keys):
                self.text = False
            else:
                before = len(self.seen)
                self.seen.update(keys)
                self.text = len(self.seen) == before + len(keys)
            if not self.text:
                self.seen = set()
        return self.ints or self.text

    def why(self, n_rows: int) -> str:
        if self.ints and self.by_one:
            return f"the numbers {self.start}..{self.start + n_rows - 1}, one a row"
        if self.ints:
            return "increasing integers, a different one in every row"
        return "a different text in every row"


def id_like_columns(
    reader: TableFile,
    features: list[str],
    declared: dict[str, str],
    chunk_rows: int,
    n_rows: int,
) -> dict[str, str]:
    """The feature columns (none declared categorical or text) that look like
    row ids, with why: a name such as ``id``, ``rownames``, ``Unnamed: 0`` or
    ``*_id`` and a value in every row, distinct, either increasing integers or
    text. Only columns so named are read; the first rows rule most out, the
    file is read on only for the rest."""
    if n_rows < 2:
        return {}
    scans = {c: _IdScan() for c in features if c not in declared and _id_like_name(c)}
    if not scans:
        return {}
    head = reader.head(list(scans), PROBE_ROWS)
    for column in list(scans):
        if not scans[column].read(head[column], reader.path):
            del scans[column]
    if scans and len(head) < n_rows:
        open_ = {c: _IdScan() for c in scans}
        for chunk in reader.chunks(list(open_), chunk_rows):
            for column in list(open_):
                if not open_[column].read(chunk[column], reader.path):
                    del open_[column]
            if not open_:
                break
        scans = open_
    return {c: scan.why(n_rows) for c, scan in scans.items()}

"""Ingest a CSV or Parquet table (one row per sample) into the prepared format."""

from __future__ import annotations

import dataclasses
import numbers
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fedpipe.data.ingest.base import IngestError, IngestResult
from fedpipe.data.ingest.prepared import STATUS_OK, _PreparedWriter
from fedpipe.data.kinds import FALSE_WORDS, STRING_KINDS, TRUE_WORDS

__all__ = [
    "CSV_SUFFIXES",
    "PARQUET_SUFFIXES",
    "boolean_values",
    "date_days",
    "ingest_table",
    "text_key",
]

CSV_SUFFIXES = (".csv", ".csv.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")

_CHUNK_CELLS = 2**20  # cells per chunk read from the file (bounds memory)
_MAX_SHOWN_COLUMNS = 20
_MAX_SHOWN_VALUE = 40
_EXACT_INT = 2**53  # labels beyond this are not exact in float64
_PROBE_ROWS = 1024  # rows read first to rule out columns of numbers
# an ISO 8601 date, optionally with a time of day and a UTC offset
_ISO_DATE = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
    r"(?:Z|[+-]\d{2}(?::?\d{2})?)?)?"
)
_EPOCH = pd.Timestamp("1970-01-01", tz="UTC")
_CODE_LEVELS = (3, 10)  # a numeric column of this many whole-number levels ...
_CODE_MIN_ROWS = 50  # ... in at least this many rows: maybe codes of categories


def ingest_table(
    path: Path,
    *,
    out_dir: Path,
    label_column: str,
    feature_columns: Sequence[str] | None = None,
    id_column: str | None = None,
    client_column: str | None = None,
    num_classes: int | None = None,
    classes: Sequence[str] | None = None,
    categorical: Sequence[str] = (),
    text: Sequence[str] = (),
) -> IngestResult:
    """Convert a table with one sample per row into ``out_dir``.

    The file is read twice in chunks (once to count rows, once to convert), so
    memory stays bounded however long the table. CSV cells are read as text: empty
    cells and pandas' default NA markers (``NA``, ``NaN``, ``null``, ...) are
    missing values; Parquet cells keep their stored types.

    Features are converted per column with ``pd.to_numeric(errors="coerce")`` and
    stored as float32. A value that is present but not numeric becomes NaN and sets
    the row's status to ``"non-numeric value '<v>' in column '<c>'"`` (first such
    column); a value missing in the file is NaN with status ``"ok"`` (validation
    counts NaN separately).

    String columns are stored as codes: a column listed in ``categorical`` or
    ``text``, and any other column none of whose present values is a number
    (its first 1,024 rows rule a column of numbers out; a column still without
    a number is read to the end first), holds per row the code of its value
    (its text, surrounding spaces removed), numbered in order of first
    appearance, as float32 (NaN when missing). ``schema.json`` then has
    ``column_types`` (column -> ``"categorical"`` or ``"text"``) and ``strings``
    (column -> its values in code order); a table without string columns has
    neither, and its files are as before.

    Other kinds (:mod:`fedpipe.data.kinds`), decided here once per column: a
    column none of whose present values is a number is ``boolean`` (stored
    1.0 / 0.0) when every one is yes/no/true/false (any case), ``date`` (stored
    as days since 1970-01-01 UTC, a time of day as the fraction, no offset
    taken as UTC) when every one is an ISO 8601 date or timestamp; a Parquet
    date/timestamp or bool column is one by its type. They are listed in
    ``column_types`` too (without ``strings``). A numeric column of 3 to 10
    whole-number levels (in 50 rows or more) stays numeric, with a warning
    (``IngestResult.warnings``) naming ``preprocess.categorical``. With any
    of these, ``schema.json`` ``column_kinds`` holds every feature column's
    kind and why (``fedpipe stats`` shows it).

    Labels are class indices or class names. With ``classes`` given, every
    present label must be one of those names (its text, surrounding spaces
    removed; ``3.0`` in a Parquet float column reads as ``3``) and becomes its
    position in the list. Without, a column whose present labels are all numbers
    holds class indices: an integral number (``3`` or ``3.0``) is kept as is, even
    outside ``0 .. K-1`` (validation reports it), a fractional or infinite one
    becomes ``-1`` with status ``"label '<v>' is not an integer class index"``;
    a column with any non-numeric label (``cat``) holds class names, numbered in
    sorted order (Unicode code points, as image sub-folder names are). A missing
    label is ``-1`` with status ``"label missing in column '<c>'
    (data.label_column)"``. A row keeps its first
    problem in this order: features, label, client key (a bad label stays
    visible as ``-1`` anyway).

    Parameters
    ----------
    path : Path
        ``data.path``: a ``.csv``, ``.csv.gz``, ``.parquet`` or ``.pq`` file.
    out_dir : Path
        Prepared directory to write (replaced atomically).
    label_column : str
        ``data.label_column``: column of class indices or class names.
    feature_columns : sequence of str, optional
        ``data.feature_columns``, in the order to store them. Default: every
        column except the label, id and client columns (and a Parquet file's
        stored pandas index), in file order; with ``id_column`` unset too, a
        column that looks like a row id is left out (named ``id``,
        ``rownames``, ``Unnamed: 0``, ``*_id``, ... and distinct increasing
        integers or distinct text in every row): ``notes`` of the result and
        ``id_like_columns`` of ``schema.json`` name it.
    id_column : str, optional
        ``data.id_column``: values become ``sample_id`` and must be present and
        unique. Default: ``"row-<n>"`` with ``n`` the 1-based data row number.
    client_column : str, optional
        ``data.client_column``: values are kept as ``client_key`` (str; ``""`` with
        a non-ok status when missing). Default: no client column.
    num_classes : int, optional
        ``data.num_classes`` (K). Default: largest integer label + 1, or the
        number of class names.
    classes : sequence of str, optional
        ``data.classes``: the class names in index order. Default: see above.
    categorical, text : sequence of str, optional
        ``preprocess.categorical``, ``preprocess.text``: feature columns stored as
        codes of their values (numbers included) and their kind.

    Returns
    -------
    IngestResult
        ``input_shape`` is ``(n_features,)``; ``class_names`` are the names
        (``"0" .. "K-1"`` for integer labels).

    Raises
    ------
    IngestError
        If the suffix is not accepted or the file cannot be parsed; if a named
        column does not exist; if there are no feature columns or no data rows; if
        ids are missing or duplicated; if ``num_classes`` is not a positive integer,
        or it is unset and no row has an integer label >= 0; if ``classes`` is not
        a list of distinct names, a label is not one of them, or ``num_classes``
        differs from the number of names.

    Notes
    -----
    ``schema.json`` has ``source`` ``"table"``, dtype float32, ``value_range`` the
    observed finite minimum and maximum of the stored features (``[0.0, 0.0]`` if
    there are none), ``scale`` 1.0 and ``feature_names``. ``samples.parquet``
    ``source`` is ``"<file>:<n>"``, with ``n`` the 1-based data row number (the
    header is not counted).
    """
    started = time.perf_counter()
    path, out_dir = Path(path), Path(out_dir)
    reader = _open_table(path)
    columns = reader.columns()
    roles = _check_roles(label_column, id_column, client_column)
    for key, column in roles.items():
        _require_column(column, key=key, columns=columns, path=path)
    features = _feature_columns(feature_columns, columns, roles, path)
    declared = _declared_kinds(categorical, text, features, path)
    _check_num_classes(num_classes)
    names = _check_classes(classes, num_classes)
    n_rows = reader.count_rows()
    if n_rows == 0:
        raise IngestError(
            f"data.path: {path}: no data rows (only a header); expected one row per "
            "sample"
        )

    chunk_rows = max(1, _CHUNK_CELLS // len(columns))
    left_out: dict[str, str] = {}
    if feature_columns is None and id_column is None:
        left_out = _id_like_columns(reader, features, declared, chunk_rows, n_rows)
        features = [c for c in features if c not in left_out]
        if not features:
            raise IngestError(
                f"data.feature_columns: {path} has no feature columns besides "
                f"{_shown(list(left_out))}, which look like row ids; set "
                "data.id_column to one of them, or list the columns to use as "
                "features in data.feature_columns"
            )
    inferred = _inferred_kinds(reader, features, declared, chunk_rows)
    why = {c: f"declared in preprocess.{k}" for c, k in declared.items()}
    why.update({c: w for c, (_, w) in inferred.items() if c not in declared})
    kinds = {**{c: k for c, (k, _) in inferred.items()}, **declared}
    kinds = {c: kinds[c] for c in features if c in kinds}
    rows = _Rows(path=path, features=features, roles=roles, kinds=kinds, why=why)
    with _PreparedWriter(
        out_dir, n_samples=n_rows, input_shape=(len(features),), dtype=np.float32
    ) as writer:
        for chunk in reader.chunks([*roles.values(), *features], chunk_rows):
            writer.append(rows.convert(chunk))
        if rows.n_rows != n_rows:
            raise IngestError(f"data.path: {path} changed while it was being read")
        rows.check_filled()
        labels, class_names = rows.finish_labels(names, num_classes)
        samples: dict[str, Any] = {
            "sample_id": rows.sample_ids,
            "label": labels,
            "status": rows.statuses(),
            "source": [f"{path}:{n}" for n in range(1, n_rows + 1)],
        }
        if client_column is not None:
            samples["client_key"] = rows.client_keys
        extra = rows.string_schema()
        if left_out:
            extra = {**(extra or {}), "id_like_columns": left_out}
        result = writer.commit(
            samples=samples,
            source="table",
            class_names=class_names,
            value_range=rows.value_range(),
            scale=1.0,
            started=started,
            feature_names=features,
            extra=extra,
        )
    notes = tuple(_id_like_note(c, why) for c, why in left_out.items())
    return dataclasses.replace(result, warnings=(*notes, *rows.warnings()))


# ---------------------------------------------------------------- parameters


def _check_roles(
    label_column: str, id_column: str | None, client_column: str | None
) -> dict[str, str]:
    """The special columns by parameter key; they must be distinct."""
    roles = {"data.label_column": label_column}
    if id_column is not None:
        roles["data.id_column"] = id_column
    if client_column is not None:
        roles["data.client_column"] = client_column
    seen: dict[str, str] = {}
    for key, column in roles.items():
        if not isinstance(column, str):
            raise IngestError(f"{key}: expected a column name, got {column!r}")
        if column in seen:
            raise IngestError(
                f"{key}: {column!r} is also {seen[column]}; each role needs its own "
                "column"
            )
        seen[column] = key
    return roles


def _shown(columns: Sequence[str]) -> str:
    shown = ", ".join(repr(c) for c in columns[:_MAX_SHOWN_COLUMNS])
    more = len(columns) - _MAX_SHOWN_COLUMNS
    return shown + (f", ... ({more} more)" if more > 0 else "")


def _require_column(column: str, *, key: str, columns: list[str], path: Path) -> None:
    if column not in columns:
        raise IngestError(
            f"{key}: column {column!r} not found in {path}; columns there: "
            f"{_shown(columns)}"
        )


def _feature_columns(
    feature_columns: Sequence[str] | None,
    columns: list[str],
    roles: dict[str, str],
    path: Path,
) -> list[str]:
    key = "data.feature_columns"
    reserved = set(roles.values())
    if feature_columns is None:
        chosen = [c for c in columns if c not in reserved]
        if not chosen:
            raise IngestError(
                f"{key}: {path} has no columns besides {_shown(sorted(reserved))}; "
                "a table needs at least one feature column"
            )
        return chosen
    if isinstance(feature_columns, str):
        raise IngestError(
            f"{key}: expected a list of column names, got the string "
            f"{feature_columns!r} (write [{feature_columns!r}] for one column)"
        )
    chosen = list(feature_columns)
    if not chosen:
        raise IngestError(f"{key}: empty; list at least one column of {path}")
    missing = [c for c in chosen if c not in columns]
    if missing:
        raise IngestError(
            f"{key}: {_shown(missing)} not found in {path}; columns there: "
            f"{_shown(columns)}"
        )
    clash = [c for c in chosen if c in reserved]
    if clash:
        raise IngestError(
            f"{key}: {_shown(clash)} is the label, id or client column; list only "
            "feature columns"
        )
    repeated = sorted({c for c in chosen if chosen.count(c) > 1})
    if repeated:
        raise IngestError(f"{key}: {_shown(repeated)} listed more than once")
    return chosen


def _declared_kinds(
    categorical: Sequence[str],
    text: Sequence[str],
    features: list[str],
    path: Path,
) -> dict[str, str]:
    """Column -> ``"categorical"`` / ``"text"`` for the declared columns."""
    out: dict[str, str] = {}
    for key, kind, listed in (
        ("preprocess.categorical", "categorical", categorical),
        ("preprocess.text", "text", text),
    ):
        if isinstance(listed, str):
            raise IngestError(
                f"{key}: expected a list of column names, got the string "
                f"{listed!r} (write [{listed!r}] for one column)"
            )
        unknown = [c for c in listed if c not in features]
        if unknown:
            raise IngestError(
                f"{key}: {_shown(unknown)} is not a feature column of {path}; "
                f"feature columns: {_shown(features)}"
            )
        out.update({c: kind for c in listed})
    return out


def _inferred_kinds(
    reader: _CsvTable | _ParquetTable,
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
        _drop_numbers(reader, reader.head(open_, _PROBE_ROWS), open_, shapes)
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
    reader: _CsvTable | _ParquetTable,
    chunk: pd.DataFrame,
    open_: list[str],
    shapes: dict[str, set[str]],
) -> None:
    """Remove from ``open_`` the columns with a number in ``chunk``; narrow in
    ``shapes`` what the others' present values may all be (``boolean``,
    ``date``; an empty set: text)."""
    for column in list(open_):
        raw = chunk[column]
        values = _numeric(raw, key="data.feature_columns", path=reader.path)
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
        if "date" in shape and not keys.str.fullmatch(_ISO_DATE).all():
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


def _id_like_note(column: str, why: str) -> str:
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
        values = _numeric(raw, key="data.feature_columns", path=path)
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


def _id_like_columns(
    reader: _CsvTable | _ParquetTable,
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
    head = reader.head(list(scans), _PROBE_ROWS)
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


def _check_num_classes(num_classes: object) -> None:
    if num_classes is None:
        return
    if (
        isinstance(num_classes, bool)
        or not isinstance(num_classes, numbers.Integral)
        or num_classes < 1
    ):
        raise IngestError(
            f"data.num_classes: got {num_classes!r}; expected a positive integer "
            "(or unset to use the largest label + 1)"
        )


def _check_classes(
    classes: Sequence[str] | None, num_classes: int | None
) -> list[str] | None:
    key = "data.classes"
    if classes is None:
        return None
    if isinstance(classes, str) or not all(isinstance(c, str) for c in classes):
        raise IngestError(
            f"{key}: got {classes!r}; expected a list of class names, e.g. "
            "[cat, dog] (or null to take the labels' names in sorted order)"
        )
    names = [c.strip() for c in classes]
    if len(names) < 2 or not all(names) or len(set(names)) < len(names):
        raise IngestError(
            f"{key}: got {list(classes)!r}; expected at least 2 distinct, non-empty "
            "names"
        )
    if num_classes is not None and num_classes != len(names):
        raise IngestError(
            f"data.num_classes: {num_classes} but {key} lists {len(names)} names; "
            "set data.num_classes to null"
        )
    return names


# ---------------------------------------------------------------- reading


class _CsvTable:
    """A CSV file read as text in chunks."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self, **kwargs: Any) -> Any:
        try:
            return pd.read_csv(self.path, dtype=str, **kwargs)
        except pd.errors.EmptyDataError:
            raise IngestError(
                f"data.path: {self.path}: no data rows (the file is empty); expected "
                "a header line and one line per sample"
            ) from None
        except (pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise IngestError(
                f"data.path: {self.path}: not a readable CSV file ({exc}); expected "
                "UTF-8 text with a header line and the same number of fields per line"
            ) from None

    def columns(self) -> list[str]:
        return [str(c) for c in self._read(nrows=0).columns]

    def text_candidates(self, columns: list[str]) -> list[str]:
        """Columns that may hold text (in a CSV, any)."""
        return list(columns)

    def stored_kinds(self, columns: list[str]) -> dict[str, tuple[str, str]]:
        """Column -> (kind, why) of the columns whose stored type says (a CSV
        stores none)."""
        return {}

    def head(self, columns: list[str], rows: int) -> pd.DataFrame:
        """The first ``rows`` rows of ``columns``."""
        return self._read(nrows=rows)[columns]

    def count_rows(self) -> int:
        first = self.columns()[:1]
        return sum(len(c) for c in self._read(usecols=first, chunksize=2**16))

    def chunks(self, columns: list[str], chunk_rows: int) -> Iterator[pd.DataFrame]:
        # every column is parsed (no usecols): with usecols pandas silently accepts
        # lines with extra fields, i.e. shifted columns
        reader = self._read(chunksize=chunk_rows)
        with reader:
            while True:
                try:
                    chunk = next(reader)
                except StopIteration:
                    return
                except (pd.errors.ParserError, UnicodeDecodeError) as exc:
                    raise IngestError(
                        f"data.path: {self.path}: not a readable CSV file ({exc})"
                    ) from None
                yield chunk[columns]


class _ParquetTable:
    """A Parquet file read in record batches."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as exc:
            raise IngestError(
                f"data.path: {path}: not a readable Parquet file ({exc})"
            ) from None

    def columns(self) -> list[str]:
        schema = self._file.schema_arrow
        stored = (schema.pandas_metadata or {}).get("index_columns", [])
        # a RangeIndex is described by a dict, not stored as a column
        index = {c for c in stored if isinstance(c, str)}
        return [c for c in schema.names if c not in index]

    def count_rows(self) -> int:
        return int(self._file.metadata.num_rows)

    def text_candidates(self, columns: list[str]) -> list[str]:
        """Columns whose stored type is not a number or a boolean."""
        schema = self._file.schema_arrow
        return [
            c
            for c in columns
            if not (
                pa.types.is_integer(schema.field(c).type)
                or pa.types.is_floating(schema.field(c).type)
                or pa.types.is_boolean(schema.field(c).type)
                or pa.types.is_decimal(schema.field(c).type)
            )
        ]

    def stored_kinds(self, columns: list[str]) -> dict[str, tuple[str, str]]:
        """Column -> (kind, why): a stored date or timestamp type is a date, a
        stored boolean a boolean."""
        out = {}
        for column in columns:
            stored = self._file.schema_arrow.field(column).type
            if pa.types.is_date(stored) or pa.types.is_timestamp(stored):
                out[column] = ("date", f"a Parquet {stored} column: days since 1970")
            elif pa.types.is_boolean(stored):
                out[column] = ("boolean", "a Parquet bool column: 1/0")
        return out

    def chunks(self, columns: list[str], chunk_rows: int) -> Iterator[pd.DataFrame]:
        for batch in self._file.iter_batches(batch_size=chunk_rows, columns=columns):
            yield batch.to_pandas()[columns]

    def head(self, columns: list[str], rows: int) -> pd.DataFrame:
        """The first ``rows`` rows of ``columns``."""
        return next(iter(self.chunks(columns, rows)), pd.DataFrame(columns=columns))


def _open_table(path: Path) -> _CsvTable | _ParquetTable:
    name = path.name.lower()
    if not name.endswith(CSV_SUFFIXES + PARQUET_SUFFIXES):
        accepted = ", ".join(CSV_SUFFIXES + PARQUET_SUFFIXES)
        raise IngestError(
            f"data.path: {path}: unsupported file type; accepted suffixes: {accepted}"
        )
    if not path.exists():
        raise IngestError(f"data.path: {path} does not exist")
    if not path.is_file():
        raise IngestError(f"data.path: {path} is not a file")
    if name.endswith(CSV_SUFFIXES):
        return _CsvTable(path)
    return _ParquetTable(path)


# ---------------------------------------------------------------- converting


def _show(value: object) -> str:
    text = str(value)
    if len(text) > _MAX_SHOWN_VALUE:
        text = text[: _MAX_SHOWN_VALUE - 3] + "..."
    return repr(text)


def _key(value: object) -> str:
    """A cell as a text key: integral numbers without a trailing ``.0``."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real) and float(value).is_integer():
        return str(int(value))
    return str(value)


def text_key(value: object) -> str:
    """A string column's present cell as stored: its key, surrounding spaces
    removed (``""``: missing)."""
    return _key(value).strip()


def date_days(raw: pd.Series) -> np.ndarray:
    """A date column as days since 1970-01-01 UTC (a time of day: the
    fraction; no UTC offset: taken as UTC); NaN where missing or not a date."""
    present = raw.notna()
    if pd.api.types.is_datetime64_any_dtype(raw):
        stamps = pd.to_datetime(raw, utc=True)
    else:
        cells = raw.where(~present, raw[present].map(text_key)) if len(raw) else raw
        is_text = cells.map(lambda v: isinstance(v, str)).to_numpy(dtype=bool)
        stamps = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns, UTC]")
        if is_text.any():
            text = cells[is_text]
            ok = text.str.fullmatch(_ISO_DATE).fillna(False).to_numpy(dtype=bool)
            stamps[text.index[ok]] = pd.to_datetime(
                text[ok], utc=True, format="ISO8601", errors="coerce"
            )
        other = present.to_numpy() & ~is_text  # a Parquet date: datetime.date
        if other.any():
            stamps[raw.index[other]] = pd.to_datetime(
                raw[other].astype(str), utc=True, errors="coerce"
            )
    days = (stamps - _EPOCH) / pd.Timedelta(days=1)
    return days.to_numpy(dtype=np.float64, na_value=np.nan)


def boolean_values(raw: pd.Series) -> np.ndarray:
    """A yes/no column as 1.0 (yes, true) / 0.0 (no, false), any case; NaN
    where missing or neither."""
    out = np.full(len(raw), np.nan)
    for i, value in enumerate(raw.tolist()):
        if isinstance(value, bool | np.bool_):
            out[i] = float(value)
        elif not pd.isna(value):
            word = text_key(value).lower()
            if word in TRUE_WORDS:
                out[i] = 1.0
            elif word in FALSE_WORDS:
                out[i] = 0.0
    return out


def _numeric(raw: pd.Series, *, key: str, path: Path) -> np.ndarray:
    """A column as float64, non-numeric values as NaN."""
    try:
        converted = pd.to_numeric(raw, errors="coerce")
    except (TypeError, ValueError) as exc:
        raise IngestError(
            f"{key}: column {raw.name!r} in {path} does not hold single values "
            f"({exc}); use a column of numbers"
        ) from None
    return converted.to_numpy(dtype=np.float64, na_value=np.nan)


@dataclass
class _Rows:
    """Converts chunks in order and accumulates the per-sample columns."""

    path: Path
    features: list[str]
    roles: dict[str, str]
    kinds: dict[str, str] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    n_rows: int = field(default=0, init=False)
    # per numeric column: its whole-number values while there are few (None:
    # a fraction, or more than _CODE_LEVELS[1] of them)
    _levels: dict[str, set[float] | None] = field(default_factory=dict, init=False)
    # per string column: value -> code, in order of first appearance
    _codes: dict[str, dict[str, int]] = field(default_factory=dict, init=False)
    sample_ids: list[str] = field(default_factory=list, init=False)
    client_keys: list[str] = field(default_factory=list, init=False)
    # per row: the first problem of each kind (None when there is none)
    _feature_problems: list[str | None] = field(default_factory=list, init=False)
    _index_problems: list[str | None] = field(default_factory=list, init=False)
    _client_problems: list[str | None] = field(default_factory=list, init=False)
    # per row: the label as a class index (-1 if not one) and as a name (None: missing)
    _indices: list[int] = field(default_factory=list, init=False)
    _names: list[str | None] = field(default_factory=list, init=False)
    _any_text_label: bool = field(default=False, init=False)
    _label_problems: list[str | None] = field(default_factory=list, init=False)
    _first_row_of_id: dict[str, int] = field(default_factory=dict, init=False)
    _max_label: int = field(default=-1, init=False)
    _low: float = field(default=np.inf, init=False)
    # per feature column: rows with a value (not NaN)
    _filled: np.ndarray | None = field(default=None, init=False)
    _high: float = field(default=-np.inf, init=False)

    def convert(self, chunk: pd.DataFrame) -> np.ndarray:
        """Features of one chunk as float32; records its sample columns."""
        first = self.n_rows + 1
        n = len(chunk)
        status = np.full(n, None, dtype=object)
        x = self._features(chunk, status)
        self._feature_problems.extend(status.tolist())
        self._labels(chunk[self.roles["data.label_column"]])
        client = np.full(n, None, dtype=object)
        if "data.client_column" in self.roles:
            self._clients(chunk[self.roles["data.client_column"]], client)
        self._client_problems.extend(client.tolist())
        if "data.id_column" in self.roles:
            self._ids(chunk[self.roles["data.id_column"]], first)
        else:
            self.sample_ids.extend(f"row-{r}" for r in range(first, first + n))
        self.n_rows += n
        return x

    def statuses(self) -> list[str]:
        """Each row's first problem (features, label, client key) or ``"ok"``."""
        out = []
        for problems in zip(
            self._feature_problems,
            self._label_problems,
            self._client_problems,
            strict=True,
        ):
            out.append(next((p for p in problems if p is not None), STATUS_OK))
        return out

    def _features(self, chunk: pd.DataFrame, status: np.ndarray) -> np.ndarray:
        x = np.empty((len(chunk), len(self.features)), np.float32)
        for j, column in enumerate(self.features):
            raw = chunk[column]
            kind = self.kinds.get(column, "numeric")
            if kind in STRING_KINDS:
                x[:, j] = self._encode(column, raw)
                continue
            if kind == "date":
                values, what = date_days(raw), "date"
            elif kind == "boolean":
                values, what = boolean_values(raw), "yes/no"
            else:
                values = _numeric(raw, key="data.feature_columns", path=self.path)
                what = "numeric"
                self._count_levels(column, values)
            x[:, j] = values
            bad = raw.notna().to_numpy() & np.isnan(values) & pd.isna(status)
            for i in np.flatnonzero(bad):
                status[i] = (
                    f"non-{what} value {_show(raw.iloc[i])} in column {column!r}"
                )
        filled = (~np.isnan(x)).sum(axis=0)
        self._filled = filled if self._filled is None else self._filled + filled
        finite = x[np.isfinite(x)]
        if finite.size:
            self._low = min(self._low, float(finite.min()))
            self._high = max(self._high, float(finite.max()))
        return x

    def check_filled(self) -> None:
        """Every feature column has a value in some row (a column that is
        empty throughout, such as the one a trailing comma makes, is named)."""
        if self._filled is None:
            return
        empty = [c for c, n in zip(self.features, self._filled, strict=True) if not n]
        if empty:
            raise IngestError(
                f"data.feature_columns: column {_shown(empty)} of {self.path} is "
                "empty in every row (nothing to learn or fit a scaling from); "
                "fill it, or list the other columns in data.feature_columns"
            )

    def _encode(self, column: str, raw: pd.Series) -> np.ndarray:
        """A string column's codes (NaN: missing), new values numbered on."""
        codes = self._codes.setdefault(column, {})
        out = np.full(len(raw), np.nan)
        for i, value in enumerate(raw.tolist()):
            if pd.isna(value):
                continue
            key = text_key(value)
            if key:
                out[i] = codes.setdefault(key, len(codes))
        return out

    def _count_levels(self, column: str, values: np.ndarray) -> None:
        """Note ``column``'s whole-number levels while they are few."""
        levels = self._levels.setdefault(column, set())
        if levels is None:
            return
        finite = values[np.isfinite(values)]
        if (finite != np.round(finite)).any():
            self._levels[column] = None
            return
        levels.update(np.unique(finite).tolist())
        if len(levels) > _CODE_LEVELS[1]:
            self._levels[column] = None

    def code_columns(self) -> dict[str, list[float]]:
        """The numeric columns that may be codes of categories: a few
        whole-number levels (:data:`_CODE_LEVELS`) in enough rows."""
        if self.n_rows < _CODE_MIN_ROWS:
            return {}
        low, high = _CODE_LEVELS
        return {
            c: sorted(levels)
            for c, levels in self._levels.items()
            if levels is not None and low <= len(levels) <= high
        }

    def warnings(self) -> list[str]:
        """What the ingest took one way and the user may mean another."""
        out = []
        for column, levels in self.code_columns().items():
            shown = ", ".join(_key(v) for v in levels)
            out.append(
                f"column {column!r} holds only {len(levels)} whole-number levels "
                f"({shown}): taken as a number; if they are codes of categories, "
                "list it in preprocess.categorical"
            )
        return out

    def string_schema(self) -> dict[str, Any] | None:
        """``column_types``, ``strings`` and ``column_kinds`` for
        ``schema.json`` (None: every column numeric, none that may be codes)."""
        codes = self.code_columns()
        if not self.kinds and not codes:
            return None
        kinds: dict[str, dict[str, str]] = {}
        for column in self.features:
            kind = self.kinds.get(column, "numeric")
            why = self.why.get(column, "numbers")
            if column in codes:
                why = (
                    f"numbers, only {len(codes[column])} whole-number levels: "
                    "codes of categories? (preprocess.categorical)"
                )
            kinds[column] = {"kind": kind, "why": why}
        out: dict[str, Any] = {"column_kinds": kinds}
        if self.kinds:
            out["column_types"] = dict(self.kinds)
            out["strings"] = {
                c: list(self._codes.get(c, {}))
                for c, k in self.kinds.items()
                if k in STRING_KINDS
            }
        return out

    def _labels(self, raw: pd.Series) -> None:
        """Record each label both as a class index and as a class name."""
        values = _numeric(raw, key="data.label_column", path=self.path)
        present = raw.notna().to_numpy()
        self._any_text_label |= bool((present & np.isnan(values)).any())
        self._names.extend(
            _key(v).strip() if p else None
            for v, p in zip(raw.tolist(), present, strict=True)
        )
        status = np.full(len(raw), None, dtype=object)
        with np.errstate(invalid="ignore"):
            integral = (
                np.isfinite(values)
                & (np.floor(values) == values)
                & (np.abs(values) <= _EXACT_INT)
            )
        labels = np.where(integral, values, -1).astype(np.int64)
        for i in np.flatnonzero(~integral & pd.isna(status)):
            status[i] = (
                f"label {_show(raw.iloc[i])} is not an integer class index"
                if present[i]
                else self._label_missing()
            )
        if integral.any():
            self._max_label = max(self._max_label, int(labels[integral].max()))
        self._indices.extend(labels.tolist())
        self._index_problems.extend(status.tolist())

    def _clients(self, raw: pd.Series, status: np.ndarray) -> None:
        column = self.roles["data.client_column"]
        for i, value in enumerate(raw.tolist()):
            if pd.isna(value):
                self.client_keys.append("")
                if status[i] is None:
                    status[i] = f"client key missing in column {column!r}"
            else:
                self.client_keys.append(_key(value))

    def _ids(self, raw: pd.Series, first: int) -> None:
        column = self.roles["data.id_column"]
        hint = "or leave data.id_column unset to number the rows"
        for offset, value in enumerate(raw.tolist()):
            row = first + offset
            if pd.isna(value):
                raise IngestError(
                    f"data.id_column: {column!r} is empty in {self.path} at data row "
                    f"{row}; every row needs an id ({hint})"
                )
            sample_id = _key(value)
            earlier = self._first_row_of_id.setdefault(sample_id, row)
            if earlier != row:
                raise IngestError(
                    f"data.id_column: {column!r} in {self.path} has {sample_id!r} at "
                    f"data rows {earlier} and {row}; ids must be unique ({hint})"
                )
            self.sample_ids.append(sample_id)

    def finish_labels(
        self, classes: list[str] | None, num_classes: int | None
    ) -> tuple[list[int], list[str]]:
        """The class index of every row and the class names, once all rows are read.

        Names are used when ``classes`` is given or any label is not a number;
        otherwise the labels are class indices.
        """
        if classes is None and not self._any_text_label:
            self._label_problems = self._index_problems
            k = num_classes if num_classes is not None else self._inferred_classes()
            return self._indices, [str(c) for c in range(k)]
        if classes is None:
            classes = sorted({n for n in self._names if n is not None})
            if num_classes is not None and num_classes != len(classes):
                raise IngestError(
                    f"data.num_classes: {num_classes} but data.label_column "
                    f"{self.roles['data.label_column']!r} in {self.path} holds "
                    f"{len(classes)} class names ({_shown(classes)}); set "
                    "data.num_classes to null"
                )
        index = {name: i for i, name in enumerate(classes)}
        self._check_names(index)
        labels = [-1 if n is None else index[n] for n in self._names]
        self._label_problems = [
            self._label_missing() if n is None else None for n in self._names
        ]
        return labels, list(classes)

    def _label_missing(self) -> str:
        """The status of a row without a label: names its column and key."""
        column = self.roles["data.label_column"]
        return f"label missing in column {column!r} (data.label_column)"

    def _check_names(self, index: dict[str, int]) -> None:
        """Every present label is a declared class name."""
        unknown: dict[str, str] = {}
        for name, sample_id in zip(self._names, self.sample_ids, strict=True):
            if name is not None and name not in index:
                unknown.setdefault(name, sample_id)
        if not unknown:
            return
        where = "id" if "data.id_column" in self.roles else "at"
        shown = ", ".join(
            f"{_show(name)} ({where} {sample_id})"
            for name, sample_id in list(unknown.items())[:_MAX_SHOWN_COLUMNS]
        )
        more = len(unknown) - _MAX_SHOWN_COLUMNS
        raise IngestError(
            f"data.classes: data.label_column {self.roles['data.label_column']!r} "
            f"in {self.path} holds {shown}{f' and {more} more' if more > 0 else ''}"
            f", not in data.classes; allowed: {_shown(list(index))} (add the name "
            "to data.classes, fix the rows, or set data.classes to null to take "
            "every name)"
        )

    def _inferred_classes(self) -> int:
        """K from the labels: largest integer label + 1."""
        if self._max_label < 0:
            raise IngestError(
                f"data.label_column: {self.roles['data.label_column']!r} in "
                f"{self.path} has no integer label >= 0, so the classes cannot be "
                "inferred; fix the labels or set data.num_classes"
            )
        return self._max_label + 1

    def value_range(self) -> tuple[float, float]:
        """Observed finite (min, max) of the stored features; (0, 0) if none."""
        if self._low > self._high:
            return (0.0, 0.0)
        return (self._low, self._high)

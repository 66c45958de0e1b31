"""Ingest a CSV or Parquet table (one row per sample) into the prepared format."""

from __future__ import annotations

import dataclasses
import numbers
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedpipe.config.classes import class_names_problem
from fedpipe.data.ingest.base import IngestError, IngestResult
from fedpipe.data.ingest.prepared import _PreparedWriter
from fedpipe.data.ingest.table_kinds import (
    id_like_columns,
    id_like_note,
    inferred_kinds,
)
from fedpipe.data.ingest.table_read import TableFile, open_table
from fedpipe.data.ingest.table_rows import Rows, quoted

__all__ = ["ingest_table"]

_CHUNK_CELLS = 2**20  # cells per chunk read from the file (bounds memory)


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
    reader = open_table(path)
    columns = reader.columns()
    roles = _check_roles(label_column, id_column, client_column)
    features, declared = _checked_columns(
        columns,
        path,
        roles=roles,
        feature_columns=feature_columns,
        categorical=categorical,
        text=text,
    )
    _check_num_classes(num_classes)
    names = _check_classes(classes, num_classes)
    n_rows = _count_rows(reader)
    chunk_rows = max(1, _CHUNK_CELLS // len(columns))
    left_out: dict[str, str] = {}
    if feature_columns is None and id_column is None:
        features, left_out = _without_id_like(
            reader, features, declared, chunk_rows=chunk_rows, n_rows=n_rows
        )
    kinds, why = _column_kinds(reader, features, declared, chunk_rows)
    rows = Rows(path=path, features=features, roles=roles, kinds=kinds, why=why)
    result = _write_prepared(
        reader,
        rows,
        out_dir,
        n_rows=n_rows,
        chunk_rows=chunk_rows,
        classes=names,
        num_classes=num_classes,
        left_out=left_out,
        started=started,
    )
    notes = tuple(id_like_note(c, reason) for c, reason in left_out.items())
    return dataclasses.replace(result, warnings=(*notes, *rows.warnings()))


# ---------------------------------------------------------------- the steps


def _checked_columns(
    columns: list[str],
    path: Path,
    *,
    roles: dict[str, str],
    feature_columns: Sequence[str] | None,
    categorical: Sequence[str],
    text: Sequence[str],
) -> tuple[list[str], dict[str, str]]:
    """The feature columns and the declared kinds (column -> ``"categorical"``
    / ``"text"``), once every named column is found in ``columns``."""
    for key, column in roles.items():
        _require_column(column, key=key, columns=columns, path=path)
    features = _feature_columns(feature_columns, columns, roles, path)
    declared = _declared_kinds(categorical, text, features, path)
    return features, declared


def _count_rows(reader: TableFile) -> int:
    """The number of data rows; a table without any is refused."""
    n_rows = reader.count_rows()
    if n_rows == 0:
        raise IngestError(
            f"data.path: {reader.path}: no data rows (only a header); expected one "
            "row per sample"
        )
    return n_rows


def _without_id_like(
    reader: TableFile,
    features: list[str],
    declared: dict[str, str],
    *,
    chunk_rows: int,
    n_rows: int,
) -> tuple[list[str], dict[str, str]]:
    """``features`` without the columns that look like row ids, and those
    columns with why (:func:`~fedpipe.data.ingest.table_kinds.id_like_columns`);
    refused when no feature column is left."""
    left_out = id_like_columns(reader, features, declared, chunk_rows, n_rows)
    kept = [c for c in features if c not in left_out]
    if not kept:
        raise IngestError(
            f"data.feature_columns: {reader.path} has no feature columns besides "
            f"{quoted(list(left_out))}, which look like row ids; set "
            "data.id_column to one of them, or list the columns to use as "
            "features in data.feature_columns"
        )
    return kept, left_out


def _column_kinds(
    reader: TableFile,
    features: list[str],
    declared: dict[str, str],
    chunk_rows: int,
) -> tuple[dict[str, str], dict[str, str]]:
    """Each feature column's kind when it is not numeric, and why every
    column has its kind: declared, else inferred
    (:func:`~fedpipe.data.ingest.table_kinds.inferred_kinds`)."""
    inferred = inferred_kinds(reader, features, declared, chunk_rows)
    why = {c: f"declared in preprocess.{k}" for c, k in declared.items()}
    why.update({c: w for c, (_, w) in inferred.items() if c not in declared})
    kinds = {**{c: k for c, (k, _) in inferred.items()}, **declared}
    return {c: kinds[c] for c in features if c in kinds}, why


def _write_prepared(
    reader: TableFile,
    rows: Rows,
    out_dir: Path,
    *,
    n_rows: int,
    chunk_rows: int,
    classes: list[str] | None,
    num_classes: int | None,
    left_out: dict[str, str],
    started: float,
) -> IngestResult:
    """Convert the table chunk by chunk into ``out_dir`` (``features.npy`` as
    it goes, then ``samples.parquet`` and ``schema.json``)."""
    with _PreparedWriter(
        out_dir, n_samples=n_rows, input_shape=(len(rows.features),), dtype=np.float32
    ) as writer:
        for chunk in reader.chunks([*rows.roles.values(), *rows.features], chunk_rows):
            writer.append(rows.convert(chunk))
        if rows.n_rows != n_rows:
            raise IngestError(f"data.path: {rows.path} changed while it was being read")
        rows.check_filled()
        labels, class_names = rows.finish_labels(classes, num_classes)
        samples: dict[str, Any] = {
            "sample_id": rows.sample_ids,
            "label": labels,
            "status": rows.statuses(),
            "source": [f"{rows.path}:{n}" for n in range(1, n_rows + 1)],
        }
        if "data.client_column" in rows.roles:
            samples["client_key"] = rows.client_keys
        extra = rows.string_schema()
        if left_out:
            extra = {**(extra or {}), "id_like_columns": left_out}
        return writer.commit(
            samples=samples,
            source="table",
            class_names=class_names,
            value_range=rows.value_range(),
            scale=1.0,
            started=started,
            feature_names=rows.features,
            extra=extra,
        )


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


def _require_column(column: str, *, key: str, columns: list[str], path: Path) -> None:
    if column not in columns:
        raise IngestError(
            f"{key}: column {column!r} not found in {path}; columns there: "
            f"{quoted(columns)}"
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
                f"{key}: {path} has no columns besides {quoted(sorted(reserved))}; "
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
            f"{key}: {quoted(missing)} not found in {path}; columns there: "
            f"{quoted(columns)}"
        )
    clash = [c for c in chosen if c in reserved]
    if clash:
        raise IngestError(
            f"{key}: {quoted(clash)} is the label, id or client column; list only "
            "feature columns"
        )
    repeated = sorted({c for c in chosen if chosen.count(c) > 1})
    if repeated:
        raise IngestError(f"{key}: {quoted(repeated)} listed more than once")
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
                f"{key}: {quoted(unknown)} is not a feature column of {path}; "
                f"feature columns: {quoted(features)}"
            )
        out.update({c: kind for c in listed})
    return out


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
    problem = class_names_problem(names, num_classes)
    if problem is not None:
        raise IngestError(problem)
    return names

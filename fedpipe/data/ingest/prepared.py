"""The prepared format every ingest writes, and the functions that read it.

A prepared directory (``out_dir``) holds exactly three files::

    features.npy     (N, *input_shape) array; uint8 for images, float32 for tables
    samples.parquet  one row per sample, in the order of features.npy
    schema.json      what the data promises: shape, dtype, range, scale, classes

``samples.parquet`` has the columns ``sample_id`` (unique str), ``label`` (int64,
-1 when the sample has no valid label), ``content_hash`` (sha1 hex of the row's
bytes in ``features.npy``), ``status`` (``"ok"`` or a short reason) and ``source``
(where the sample came from), followed by source-specific columns (``orig_height``,
``orig_width``, ``orig_channels`` for images; ``client_key`` for tables with a
client column).

All three ingest functions write through :class:`_PreparedWriter`, so the format,
the hashing and the atomic replacement of ``out_dir`` live in one place. Features
are written block by block through :func:`numpy.lib.format.open_memmap`; a block is
mapped only while it is written, so memory stays bounded by one block however large
the data set.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from fedpipe.data.ingest.base import IngestError, IngestResult

__all__ = [
    "FEATURES_FILE",
    "SAMPLES_FILE",
    "SCHEMA_FILE",
    "STATUS_OK",
    "open_features",
    "read_samples",
    "read_schema",
    "row_summaries",
]

FEATURES_FILE = "features.npy"
SAMPLES_FILE = "samples.parquet"
SCHEMA_FILE = "schema.json"
STATUS_OK = "ok"

FEATURE_MIN = "feature_min"
FEATURE_MAX = "feature_max"
FEATURE_NAN_COUNT = "feature_nan_count"

_INT_COLUMNS = frozenset({"label", "orig_height", "orig_width", "orig_channels"})
_LEADING_COLUMNS = ("sample_id", "label", "content_hash", "status", "source")
_BLOCK_BYTES = 32 * 2**20


# ---------------------------------------------------------------- writer


class _PreparedWriter:
    """Write one prepared directory atomically.

    Use as a context manager: entering creates a hidden sibling temporary directory
    (``.<out_dir name>.<random>.partial``) and an all-zero ``features.npy`` of the
    final shape in it; :meth:`append` fills it in order; :meth:`commit` writes
    ``samples.parquet`` and ``schema.json`` and swaps the directory into place.
    Leaving the block without :meth:`commit` (an exception) deletes the temporary
    directory and leaves any existing ``out_dir`` untouched.

    Parameters
    ----------
    out_dir : Path
        The prepared directory to create or replace.
    n_samples : int
        Number of rows that will be appended (N), at least 1.
    input_shape : tuple of int
        Shape of one sample.
    dtype : numpy dtype
        ``uint8`` or ``float32``.
    block_bytes : int, optional
        Rows are buffered and written (and hashed) in blocks of about this many
        bytes. Default 32 MiB.
    """

    def __init__(
        self,
        out_dir: Path,
        *,
        n_samples: int,
        input_shape: tuple[int, ...],
        dtype: np.dtype | type,
        block_bytes: int = _BLOCK_BYTES,
    ) -> None:
        out_dir = Path(out_dir)
        if out_dir.exists() and not out_dir.is_dir():
            raise IngestError(
                f"out_dir: {out_dir} exists and is not a directory; give a directory "
                "path (an existing directory is replaced as a whole)"
            )
        if n_samples < 1:
            raise ValueError(f"n_samples must be at least 1, got {n_samples}")
        self.out_dir = out_dir
        self.n_samples = int(n_samples)
        self.input_shape = tuple(int(d) for d in input_shape)
        self.dtype = np.dtype(dtype)
        row_bytes = max(1, int(np.prod(self.input_shape)) * self.dtype.itemsize)
        self._block_rows = max(1, min(self.n_samples, block_bytes // row_bytes))
        self._buffer = np.zeros((self._block_rows, *self.input_shape), self.dtype)
        self._filled = 0
        self._written = 0
        self._hashes: list[str] = []
        self._tmp: Path | None = None

    # -- context

    def __enter__(self) -> _PreparedWriter:
        parent = self.out_dir.parent
        parent.mkdir(parents=True, exist_ok=True)
        # what a killed writer left (its temporary directory, or the old one set
        # aside mid-swap): one stage writes here at a time (the repository lock)
        for stale in parent.glob(f".{self.out_dir.name}.*.partial*"):
            shutil.rmtree(stale, ignore_errors=True)
        while True:
            tmp = parent / f".{self.out_dir.name}.{secrets.token_hex(4)}.partial"
            try:
                tmp.mkdir()
                break
            except FileExistsError:  # pragma: no cover - 32 random bits collided
                continue
        self._tmp = tmp
        features = np.lib.format.open_memmap(
            tmp / FEATURES_FILE,
            mode="w+",
            dtype=self.dtype,
            shape=(self.n_samples, *self.input_shape),
        )
        features.flush()
        del features
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # -- rows

    @property
    def block_rows(self) -> int:
        """Rows per write block (callers may size their own chunks with it)."""
        return self._block_rows

    def append(self, rows: np.ndarray) -> None:
        """Append ``rows`` (shape ``(k, *input_shape)``), cast to the dtype."""
        rows = np.asarray(rows)
        if rows.shape[1:] != self.input_shape:
            raise ValueError(
                f"rows of shape {rows.shape[1:]} appended to a writer of input shape "
                f"{self.input_shape}"
            )
        start = 0
        while start < len(rows):
            at = self._filled
            take = min(len(rows) - start, self._block_rows - at)
            self._buffer[at : at + take] = rows[start : start + take]
            self._filled += take
            start += take
            if self._filled == self._block_rows:
                self._flush()

    def append_row(self, row: np.ndarray | None) -> None:
        """Append one sample; ``None`` appends an all-zero row (a failed sample)."""
        if row is None:
            self._buffer[self._filled] = 0
        else:
            self._buffer[self._filled] = row
        self._filled += 1
        if self._filled == self._block_rows:
            self._flush()

    def _flush(self) -> None:
        if self._filled == 0:
            return
        if self._tmp is None:
            raise RuntimeError("_PreparedWriter used outside its `with` block")
        end = self._written + self._filled
        if end > self.n_samples:
            raise RuntimeError(
                f"{end} rows appended to a writer declared for {self.n_samples}"
            )
        block = self._buffer[: self._filled]
        self._hashes.extend(
            hashlib.sha1(row, usedforsecurity=False).hexdigest() for row in block
        )
        # Map the file only for this block: unmapping returns the pages to the page
        # cache, so the process never holds more than one block of features.
        features = np.lib.format.open_memmap(self._tmp / FEATURES_FILE, mode="r+")
        features[self._written : end] = block
        features.flush()
        del features
        self._written = end
        self._filled = 0

    # -- commit

    def commit(
        self,
        *,
        samples: Mapping[str, Sequence[Any]],
        source: str,
        class_names: Sequence[str],
        value_range: tuple[float, float],
        scale: float,
        started: float,
        feature_names: Sequence[str] | None = None,
        skipped: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> IngestResult:
        """Write the tables and move the directory into place.

        Parameters
        ----------
        samples : mapping of str to sequence
            Columns of ``samples.parquet`` except ``content_hash`` (the writer adds
            it): ``sample_id``, ``label``, ``status``, ``source`` and any extra
            columns, each of length N. ``label`` and ``orig_*`` are stored as
            int64, everything else as str.
        source : str
            ``schema.json`` ``source`` (``"images"``, ``"table"``, ``"mnist5k"``).
        class_names : sequence of str
            Names of classes ``0 .. K-1``.
        value_range : tuple of float
            Inclusive range of raw feature values.
        scale : float
            Features are divided by this before training.
        started : float
            :func:`time.perf_counter` at the start of the ingest, for the result.
        feature_names : sequence of str, optional
            Names of the features (tables only). Default: omitted from the schema.
        skipped : sequence of str, optional
            Operating-system files the source left out: in the result and, when
            there are any, in ``schema.json`` ``skipped``.
        extra : mapping, optional
            More ``schema.json`` entries (a table's ``column_types`` and
            ``strings``).

        Returns
        -------
        IngestResult
        """
        self._flush()
        if self._tmp is None:
            raise RuntimeError("_PreparedWriter.commit called outside its `with` block")
        if self._written != self.n_samples:
            raise RuntimeError(
                f"{self._written} rows appended to a writer declared for "
                f"{self.n_samples}"
            )
        table = self._samples_table(samples)
        pq.write_table(table, self._tmp / SAMPLES_FILE)
        schema: dict[str, Any] = {
            "source": source,
            "input_shape": list(self.input_shape),
            "dtype": self.dtype.name,
            "value_range": [float(value_range[0]), float(value_range[1])],
            "scale": float(scale),
            "classes": list(range(len(class_names))),
            "class_names": [str(c) for c in class_names],
            "n_samples": self.n_samples,
        }
        if feature_names is not None:
            schema["feature_names"] = [str(c) for c in feature_names]
        if skipped:
            schema["skipped"] = [str(s) for s in skipped]
        if extra:
            schema.update(extra)
        (self._tmp / SCHEMA_FILE).write_text(
            json.dumps(schema, sort_keys=True, indent=2) + "\n", encoding="utf-8"
        )
        _replace_dir(self._tmp, self.out_dir)
        self._tmp = None
        statuses = table.column("status").to_pylist()
        return IngestResult(
            out_dir=self.out_dir,
            n_samples=self.n_samples,
            n_problems=sum(s != STATUS_OK for s in statuses),
            input_shape=self.input_shape,
            class_names=tuple(schema["class_names"]),
            seconds=time.perf_counter() - started,
            skipped=tuple(skipped),
        )

    def _samples_table(self, samples: Mapping[str, Sequence[Any]]) -> pa.Table:
        columns = {"content_hash": self._hashes, **samples}
        missing = [c for c in _LEADING_COLUMNS if c not in columns]
        if missing:
            raise ValueError(f"samples is missing columns {missing}")
        order = [*_LEADING_COLUMNS, *(c for c in samples if c not in _LEADING_COLUMNS)]
        arrays = []
        for name in order:
            values = columns[name]
            if len(values) != self.n_samples:
                raise ValueError(
                    f"samples column {name!r} has {len(values)} values, "
                    f"expected {self.n_samples}"
                )
            kind = pa.int64() if name in _INT_COLUMNS else pa.string()
            data = values if isinstance(values, np.ndarray) else list(values)
            arrays.append(pa.array(data, type=kind))
        return pa.Table.from_arrays(arrays, names=order)


def _replace_dir(new: Path, target: Path) -> None:
    """Move the complete directory ``new`` to ``target``, replacing it if present.

    A non-empty directory cannot be renamed over, so an existing ``target`` is first
    renamed aside, then ``new`` is renamed into place and the old one deleted; if the
    second rename fails the old directory is put back. Either way ``target`` is never
    a mix of old and new files.
    """
    if not (target.exists() or target.is_symlink()):
        os.replace(new, target)
        return
    old = new.with_name(new.name + ".old")
    os.replace(target, old)
    try:
        os.replace(new, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


# ---------------------------------------------------------------- readers


def _file(out_dir: Path, name: str) -> Path:
    path = Path(out_dir) / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: not found; {out_dir} is not a prepared data directory "
            "(run the ingest stage first)"
        )
    return path


def read_schema(out_dir: Path) -> dict[str, Any]:
    """The ``schema.json`` of a prepared directory, as a dict.

    Raises
    ------
    FileNotFoundError
        If ``out_dir`` holds no ``schema.json``.
    """
    return json.loads(_file(out_dir, SCHEMA_FILE).read_text(encoding="utf-8"))


def read_samples(out_dir: Path) -> pd.DataFrame:
    """The ``samples.parquet`` of a prepared directory (one row per sample)."""
    return pq.read_table(_file(out_dir, SAMPLES_FILE)).to_pandas()


def open_features(out_dir: Path) -> np.ndarray:
    """The features of a prepared directory, memory-mapped read-only.

    Returns
    -------
    numpy.ndarray
        ``(N, *input_shape)`` memmap (``np.load(..., mmap_mode="r")``); nothing is
        read until it is indexed.
    """
    return np.load(_file(out_dir, FEATURES_FILE), mmap_mode="r")


def row_summaries(out_dir: Path, chunk_rows: int = 2048) -> pd.DataFrame:
    """Per-sample feature statistics joined to ``samples.parquet``.

    Features are read ``chunk_rows`` rows at a time (each chunk is mapped, copied
    and unmapped), so memory stays bounded by one chunk.

    Parameters
    ----------
    out_dir : Path
        A prepared directory.
    chunk_rows : int, optional
        Rows per chunk. Default 2048.

    Returns
    -------
    pandas.DataFrame
        One row per sample, in ``features.npy`` order: ``sample_id``,
        ``feature_min`` and ``feature_max`` (float64; NaN values ignored, NaN when
        every feature of the row is NaN), ``feature_nan_count`` (int64; always 0 for
        uint8 features), then the other columns of ``samples.parquet``.
    """
    if isinstance(chunk_rows, bool) or int(chunk_rows) < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    samples = read_samples(out_dir)
    path = _file(out_dir, FEATURES_FILE)
    n = len(np.load(path, mmap_mode="r"))
    if n != len(samples):
        raise ValueError(
            f"{out_dir}: {FEATURES_FILE} has {n} rows but {SAMPLES_FILE} has "
            f"{len(samples)}; the directory is not a consistent prepared data set"
        )
    lows = np.zeros(n, np.float64)
    highs = np.zeros(n, np.float64)
    nans = np.zeros(n, np.int64)
    for start in range(0, n, int(chunk_rows)):
        stop = min(n, start + int(chunk_rows))
        features = np.load(path, mmap_mode="r")
        chunk = np.array(features[start:stop]).reshape(stop - start, -1)
        del features
        if chunk.dtype.kind == "f":
            lows[start:stop] = np.fmin.reduce(chunk, axis=1)
            highs[start:stop] = np.fmax.reduce(chunk, axis=1)
            nans[start:stop] = np.isnan(chunk).sum(axis=1)
        else:
            lows[start:stop] = chunk.min(axis=1)
            highs[start:stop] = chunk.max(axis=1)
    summary = pd.DataFrame(
        {
            "sample_id": samples["sample_id"],
            FEATURE_MIN: lows,
            FEATURE_MAX: highs,
            FEATURE_NAN_COUNT: nans,
        }
    )
    rest = samples.drop(columns=["sample_id"])
    return pd.concat([summary, rest], axis=1)

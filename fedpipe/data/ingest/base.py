"""The ingest contract: the error every source raises and the result it returns."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedpipe.core.errors import FedpipeError


class IngestError(FedpipeError, ValueError):
    """A data source that cannot be ingested as configured.

    The message names the file (and row, where there is one), the parameter key at
    fault (``data.path``, ``data.label_column``, ...) and what would be accepted.
    Problems with single samples (an unreadable image, a non-numeric value) are
    *not* errors: they are recorded in the ``status`` column of ``samples.parquet``
    so that data validation can report them all at once.
    """


@dataclass(frozen=True)
class IngestResult:
    """What one ingest wrote.

    Attributes
    ----------
    out_dir : Path
        The prepared directory (``features.npy``, ``samples.parquet``,
        ``schema.json``).
    n_samples : int
        Number of rows written (every sample found, including problem rows).
    n_problems : int
        Number of rows whose ``status`` is not ``"ok"``.
    input_shape : tuple of int
        Shape of one sample, e.g. ``(100, 100, 3)`` or ``(12,)``.
    class_names : tuple of str
        Name of each class index ``0 .. K-1``.
    seconds : float
        Wall-clock time of the ingest, in seconds.
    skipped : tuple of str
        Files and folders left out because an operating system wrote them
        (``Thumbs.db``, ``.DS_Store``, ``__MACOSX/``, ...), relative to
        ``data.path``; empty for tables and arrays.
    warnings : tuple of str
        What the ingest took one way and the user may mean another, each naming
        the key to set: a table's numeric column of a few whole-number levels
        (codes of categories?), a column that looks like a row id left out of
        the features; empty when there are none.
    """

    out_dir: Path
    n_samples: int
    n_problems: int
    input_shape: tuple[int, ...]
    class_names: tuple[str, ...]
    seconds: float
    skipped: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

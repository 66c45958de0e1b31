"""Ingest an in-memory data set (e.g. the built-in MNIST digits) into the prepared
format."""

from __future__ import annotations

import math
import numbers
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedpipe.data.ingest.base import IngestError, IngestResult
from fedpipe.data.ingest.prepared import STATUS_OK, _PreparedWriter

__all__ = ["ingest_arrays"]

_DTYPES = (np.dtype(np.uint8), np.dtype(np.float32))


def ingest_arrays(
    x: np.ndarray,
    y: np.ndarray,
    *,
    out_dir: Path,
    source: str,
    class_names: Sequence[str],
    value_range: tuple[float, float],
    scale: float,
    sample_ids: Sequence[str] | None = None,
) -> IngestResult:
    """Write arrays already in memory (or memory-mapped) to ``out_dir``.

    Parameters
    ----------
    x : numpy.ndarray
        Features ``(N, *input_shape)``, uint8 (images, 0..255) or float32 (tables),
        stored unchanged; e.g. MNIST as uint8 ``(5000, 28, 28, 1)``. Copied in
        blocks, so a memmap is never read whole.
    y : numpy.ndarray
        Integer labels ``(N,)``, stored as int64 (values outside ``0 .. K-1`` are
        kept for validation to report).
    out_dir : Path
        Prepared directory to write (replaced atomically).
    source : str
        Name of the source (``data.source``, e.g. ``"mnist5k"``); the ``source``
        of ``schema.json`` and, as ``"<source>:<n>"`` (1-based), of every sample.
    class_names : sequence of str
        Names of classes ``0 .. K-1``.
    value_range : tuple of float
        Inclusive range of raw feature values, e.g. ``(0.0, 255.0)``.
    scale : float
        Features are divided by this before training, e.g. 255.0.
    sample_ids : sequence of str, optional
        Unique ids in row order. Default ``"row-<n>"`` with ``n`` 1-based.

    Returns
    -------
    IngestResult
        Every status is ``"ok"`` (``n_problems`` is 0).

    Raises
    ------
    IngestError
        If an argument has the wrong shape, dtype or value; the message names it.
    """
    started = time.perf_counter()
    x = np.asarray(x)
    y = np.asarray(y)
    n = _check_xy(x, y)
    names = _check_names(class_names)
    low, high = _check_range(value_range)
    scale = _check_scale(scale)
    if not isinstance(source, str) or not source:
        raise IngestError(f"source: expected a non-empty name, got {source!r}")
    ids = _check_ids(sample_ids, n)
    with _PreparedWriter(
        out_dir, n_samples=n, input_shape=x.shape[1:], dtype=x.dtype
    ) as writer:
        writer.append(x)
        return writer.commit(
            samples={
                "sample_id": ids,
                "label": y.astype(np.int64),
                "status": [STATUS_OK] * n,
                "source": [f"{source}:{i}" for i in range(1, n + 1)],
            },
            source=source,
            class_names=names,
            value_range=(low, high),
            scale=scale,
            started=started,
        )


def _check_xy(x: np.ndarray, y: np.ndarray) -> int:
    if x.dtype not in _DTYPES:
        raise IngestError(
            f"x: dtype {x.dtype} not supported; pass uint8 (images, 0..255) or "
            "float32 (tables)"
        )
    if x.ndim < 2 or x.shape[0] == 0 or 0 in x.shape[1:]:
        raise IngestError(
            f"x: shape {x.shape}; expected (N, *input_shape) with N >= 1 and no "
            "empty dimension"
        )
    n = x.shape[0]
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer):
        raise IngestError(
            f"y: shape {y.shape} dtype {y.dtype}; expected {n} integer labels (N,)"
        )
    return n


def _check_names(class_names: Sequence[str]) -> list[str]:
    if isinstance(class_names, str) or not all(isinstance(c, str) for c in class_names):
        raise IngestError(
            f"class_names: got {class_names!r}; expected a list of str, one per class"
        )
    names = list(class_names)
    if not names:
        raise IngestError("class_names: empty; expected one name per class")
    if len(set(names)) != len(names):
        raise IngestError(f"class_names: {names!r} has repeated names")
    return names


def _check_range(value_range: tuple[float, float]) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value_range)
    except (TypeError, ValueError):
        raise IngestError(
            f"value_range: got {value_range!r}; expected (low, high) numbers"
        ) from None
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise IngestError(
            f"value_range: got {value_range!r}; expected finite low <= high"
        )
    return low, high


def _check_scale(scale: float) -> float:
    if (
        isinstance(scale, bool)
        or not isinstance(scale, numbers.Real)
        or not math.isfinite(scale)
        or scale <= 0
    ):
        raise IngestError(f"scale: got {scale!r}; expected a positive number")
    return float(scale)


def _check_ids(sample_ids: Sequence[str] | None, n: int) -> list[str]:
    if sample_ids is None:
        return [f"row-{i}" for i in range(1, n + 1)]
    ids = list(sample_ids)
    if len(ids) != n or not all(isinstance(i, str) for i in ids):
        raise IngestError(f"sample_ids: expected {n} str ids, got {len(ids)} values")
    repeated = [i for i, count in Counter(ids).items() if count > 1]
    if repeated:
        raise IngestError(f"sample_ids: {repeated[0]!r} appears more than once")
    return ids

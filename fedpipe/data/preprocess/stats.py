"""What a client sends for the fit: sufficient statistics of its own rows.

Two passes, as a federation would run them: each client sends its
:class:`Moments` (per column: rows with a value, missing values, sum and sum of
squares in float64, min and max, whether every value is a whole number), the
server merges them and fixes the
histogram's edges from the global min and max, then each client sends a
histogram of its values on those edges (:func:`histogram`), which the server
adds up. Nothing else about a client's rows leaves it; :mod:`.fit` sees only
the merged results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["Moments", "edges_for", "histogram", "merge", "moments", "quantiles"]


@dataclass(frozen=True)
class Moments:
    """Per-column sufficient statistics of some rows (float64 unless noted).

    Attributes
    ----------
    rows : int
        Rows summarized.
    count : numpy.ndarray
        Values present per column (int64).
    missing : numpy.ndarray
        Missing (NaN) values per column (int64).
    total, squares : numpy.ndarray
        Sum and sum of squares of the present values.
    low, high : numpy.ndarray
        Smallest and largest present value (NaN for a column without one).
    whole : numpy.ndarray or None
        Per column: every present value is a whole number (bool; 0/1 flags,
        counts, codes). None: not known (every column treated as continuous).
    """

    rows: int
    count: np.ndarray
    missing: np.ndarray
    total: np.ndarray
    squares: np.ndarray
    low: np.ndarray
    high: np.ndarray
    whole: np.ndarray | None = None

    @property
    def mean(self) -> np.ndarray:
        """Mean of the present values (NaN where there are none)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.total / self.count

    @property
    def std(self) -> np.ndarray:
        """Population standard deviation (ddof 0, as sklearn's StandardScaler)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            var = self.squares / self.count - self.mean**2
        return np.sqrt(np.maximum(var, 0.0))


def moments(x: np.ndarray) -> Moments:
    """A client's :class:`Moments` of its rows ``x`` (``(n, d)``, NaN = missing)."""
    x = np.asarray(x, dtype=np.float64)
    present = ~np.isnan(x)
    values = np.where(present, x, 0.0)
    any_value = present.any(axis=0)
    low = np.where(present, x, np.inf).min(axis=0, initial=np.inf)
    high = np.where(present, x, -np.inf).max(axis=0, initial=-np.inf)
    return Moments(
        rows=int(x.shape[0]),
        count=present.sum(axis=0, dtype=np.int64),
        missing=(~present).sum(axis=0, dtype=np.int64),
        total=values.sum(axis=0),
        squares=(values * values).sum(axis=0),
        low=np.where(any_value, low, np.nan),
        high=np.where(any_value, high, np.nan),
        whole=np.where(present, x == np.round(x), True).all(axis=0),
    )


def merge(parts: Sequence[Moments]) -> Moments:
    """The :class:`Moments` of the union of the parts' rows (in the given order,
    so the same parts always give the same bits)."""
    if not parts:
        raise ValueError("merge needs at least one client's statistics")
    out = parts[0]
    for p in parts[1:]:
        out = Moments(
            rows=out.rows + p.rows,
            count=out.count + p.count,
            missing=out.missing + p.missing,
            total=out.total + p.total,
            squares=out.squares + p.squares,
            low=np.fmin(out.low, p.low),
            high=np.fmax(out.high, p.high),
            whole=None if out.whole is None or p.whole is None else out.whole & p.whole,
        )
    return out


def edges_for(merged: Moments, bins: int) -> np.ndarray:
    """``(d, bins + 1)`` histogram edges spanning each column's global min..max
    (a column without values, or a constant one, gets a unit-wide range)."""
    low = np.nan_to_num(merged.low, nan=0.0)
    high = np.nan_to_num(merged.high, nan=0.0)
    high = np.where(high > low, high, low + 1.0)
    steps = np.linspace(0.0, 1.0, bins + 1)
    return low[:, None] + (high - low)[:, None] * steps[None, :]


def histogram(x: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """A client's ``(d, bins)`` counts of its present values on ``edges``
    (values beyond the edges, which a client's rows cannot have on edges from
    the merged min/max, go to the end bins)."""
    x = np.asarray(x, dtype=np.float64)
    d, bins = edges.shape[0], edges.shape[1] - 1
    low, high = edges[:, 0], edges[:, -1]
    with np.errstate(invalid="ignore"):
        position = (x - low) / (high - low) * bins
    index = np.clip(np.floor(np.nan_to_num(position, nan=-1.0)), 0, bins - 1)
    index = index.astype(np.int64) + np.arange(d, dtype=np.int64) * bins
    present = ~np.isnan(x)
    counts = np.bincount(index[present], minlength=d * bins)
    return counts.reshape(d, bins).astype(np.int64)


def quantiles(
    counts: np.ndarray,
    edges: np.ndarray,
    q: float,
    whole: np.ndarray | None = None,
) -> np.ndarray:
    """The ``q`` quantile of each column from its histogram, interpolated
    linearly within the bin where the cumulative count reaches ``q`` of the
    values: within one bin width of the pooled rows' quantile. NaN for a
    column without values.

    A column of whole numbers (``whole``, from :attr:`Moments.whole`) whose bin
    holds a single whole number gets that number exactly, the value at which the
    cumulative count reaches ``q`` (numpy's ``inverted_cdf``): a 0/1 column's
    quartiles are 0 or 1, not a point inside the bin (0.001, 0.002, ...)."""
    total = counts.sum(axis=1)
    cumulative = np.cumsum(counts, axis=1)
    target = q * total
    out = np.full(counts.shape[0], np.nan)
    for j in np.flatnonzero(total > 0):
        b = int(np.searchsorted(cumulative[j], target[j], side="left"))
        b = min(b, counts.shape[1] - 1)
        if whole is not None and whole[j]:
            single = _single_whole(edges[j], b)
            if single is not None:
                out[j] = single
                continue
        before = cumulative[j, b - 1] if b > 0 else 0
        inside = counts[j, b]
        share = (target[j] - before) / inside if inside else 0.0
        width = edges[j, b + 1] - edges[j, b]
        out[j] = edges[j, b] + float(np.clip(share, 0.0, 1.0)) * width
    return out


def _single_whole(edges: np.ndarray, b: int) -> float | None:
    """The one whole number bin ``b`` of ``edges`` can hold (as
    :func:`histogram` bins: ``[edge, next edge)``, the last bin closed), or None
    when it can hold none or more than one. An edge within rounding of a whole
    number is taken as that number."""
    low, high = _snapped(float(edges[b])), _snapped(float(edges[b + 1]))
    first = float(np.ceil(low))
    if b == edges.shape[0] - 2:  # the last bin: [low, high]
        return first if first <= high < first + 1 else None
    return first if first < high <= first + 1 else None


def _snapped(edge: float) -> float:
    whole = float(np.round(edge))
    return whole if abs(edge - whole) <= 1e-9 * max(1.0, abs(edge)) else edge

"""The fitted transform, from the clients' merged statistics only.

:func:`fit_transform` runs the two passes of :mod:`.stats` over the clients'
training rows (each client summarizes its own rows; the fit sees the merged
summaries) and returns a :class:`Transform`: per column a center, a scale and,
with imputation, a fill value, plus the columns that get a missing-value
indicator. ``fit: local`` fits one set per client from that client's summaries
alone (as Flower's examples scale each partition); the held-out set, which no
client owns, is transformed by the federated fit of the same summaries.

A :class:`Transform` is written as readable JSON (:meth:`Transform.to_json`):
the settings, the per-column parameters and the global statistics they came
from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedpipe.core.errors import FedpipeError
from fedpipe.data.preprocess.stats import (
    Moments,
    edges_for,
    histogram,
    merge,
    moments,
    quantiles,
)

__all__ = [
    "FORMAT",
    "PreprocessError",
    "Scaling",
    "Transform",
    "fit_scaling",
    "fit_transform",
    "identity_transform",
]

FORMAT = 1  # of transform.json; a reader refuses another


class PreprocessError(FedpipeError, ValueError):
    """The preprocessing cannot be fitted as ``preprocess.*`` asks."""


@dataclass(frozen=True)
class Scaling:
    """Per-column parameters: a missing value becomes ``fill`` (None: no
    imputation), then every value ``(x - center) / scale``."""

    center: np.ndarray
    scale: np.ndarray
    fill: np.ndarray | None = None

    def to_json(self) -> dict[str, Any]:
        """Lists of floats (exact: JSON keeps a float64's shortest repr)."""
        out = {"center": _floats(self.center), "scale": _floats(self.scale)}
        if self.fill is not None:
            out["fill"] = _floats(self.fill)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Scaling:
        """The inverse of :meth:`to_json`."""
        fill = raw.get("fill")
        return cls(
            center=np.asarray(raw["center"], dtype=np.float64),
            scale=np.asarray(raw["scale"], dtype=np.float64),
            fill=None if fill is None else np.asarray(fill, dtype=np.float64),
        )


@dataclass(frozen=True)
class Transform:
    """What the ``preprocess`` stage fitted (``data/preprocess/transform.json``).

    Attributes
    ----------
    kind : str
        ``"table"``, or ``"identity"`` for data the stage leaves as it is
        (images: pixels / 255).
    columns : tuple of str
        The table's feature columns, in stored order.
    settings : dict
        ``preprocess.*`` as fitted (numeric, fit, missing, bins).
    federated : Scaling or None
        The fit of every client's merged statistics (the held-out set's, and
        every client's with ``fit: federated``).
    local : tuple of Scaling
        With ``fit: local``: client ``i``'s own fit at position ``i``.
    indicators : tuple of int
        Columns with missing values in some client's training split: each adds
        an indicator column (1.0 = was missing) after the features.
    statistics : dict
        Per column, the merged statistics the fit used (readable only).
    """

    kind: str
    columns: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    federated: Scaling | None = None
    local: tuple[Scaling, ...] = ()
    indicators: tuple[int, ...] = ()
    statistics: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    @property
    def is_identity(self) -> bool:
        """True when the stage leaves the data as the ingest stored it."""
        return self.kind == "identity"

    @property
    def n_outputs(self) -> int:
        """Columns after the transform: the features, then the indicators."""
        return len(self.columns) + len(self.indicators)

    def scaling_for(self, client: int | None) -> Scaling:
        """Client ``client``'s parameters (None: the held-out set's)."""
        if self.federated is None:
            raise ValueError("an identity transform has no scaling")
        if client is None or not self.local:
            return self.federated
        return self.local[client]

    def to_json(self) -> dict[str, Any]:
        """The readable JSON form (``transform.json``)."""
        out: dict[str, Any] = {"format": FORMAT, "kind": self.kind}
        if self.note:
            out["note"] = self.note
        if self.is_identity:
            return out
        assert self.federated is not None
        out.update(
            columns=list(self.columns),
            settings=dict(self.settings),
            federated=self.federated.to_json(),
            indicators=[self.columns[j] for j in self.indicators],
            statistics=self.statistics,
        )
        if self.local:
            out["local"] = {str(i): s.to_json() for i, s in enumerate(self.local)}
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Transform:
        """The inverse of :meth:`to_json`."""
        if raw.get("format") != FORMAT:
            raise PreprocessError(
                f"transform.json: format {raw.get('format')!r}, this fedpipe reads "
                f"format {FORMAT}; run the preprocess stage again"
            )
        if raw["kind"] == "identity":
            return cls(kind="identity", note=str(raw.get("note", "")))
        columns = tuple(str(c) for c in raw["columns"])
        local = raw.get("local") or {}
        return cls(
            kind=str(raw["kind"]),
            columns=columns,
            settings=dict(raw["settings"]),
            federated=Scaling.from_json(raw["federated"]),
            local=tuple(Scaling.from_json(local[str(i)]) for i in range(len(local))),
            indicators=tuple(columns.index(c) for c in raw["indicators"]),
            statistics=dict(raw.get("statistics") or {}),
            note=str(raw.get("note", "")),
        )


def identity_transform(note: str) -> Transform:
    """The transform of data the stage leaves alone (images), saying why."""
    return Transform(kind="identity", note=note)


def fit_transform(
    client_rows: Sequence[np.ndarray],
    *,
    columns: Sequence[str],
    numeric: str,
    fit: str,
    missing: str,
    bins: int,
) -> Transform:
    """Fit the table transform from the clients' training rows.

    Each client's rows are summarized on their own (:func:`moments`, then
    :func:`histogram` on the edges the merged moments fix); only the merged
    summaries reach :func:`fit_scaling`.

    Parameters
    ----------
    client_rows : sequence of numpy.ndarray
        Client ``i``'s training features, ``(n_i, d)`` float, NaN = missing.
    columns : sequence of str
        The ``d`` feature column names (for messages and the JSON).
    numeric, fit, missing, bins
        ``preprocess.numeric``, ``.fit``, ``.missing``, ``.bins``.

    Raises
    ------
    PreprocessError
        Missing values with ``missing: refuse``, or a column with no value in
        any client's training split when imputing.
    """
    per_client = [moments(x) for x in client_rows]
    merged = merge(per_client)
    _check_missing(merged, columns, missing)
    edges = edges_for(merged, bins)
    counts = sum(histogram(x, edges) for x in client_rows)
    federated = fit_scaling(
        merged, np.asarray(counts), edges, numeric=numeric, missing=missing
    )
    local: tuple[Scaling, ...] = ()
    if fit == "local":
        local = tuple(
            _local_scaling(
                x, m, bins, numeric=numeric, missing=missing, fallback=federated
            )
            for x, m in zip(client_rows, per_client, strict=True)
        )
    return Transform(
        kind="table",
        columns=tuple(columns),
        settings={"numeric": numeric, "fit": fit, "missing": missing, "bins": bins},
        federated=federated,
        local=local,
        indicators=tuple(int(j) for j in np.flatnonzero(merged.missing > 0))
        if missing != "refuse"
        else (),
        statistics=_statistics(
            merged, np.asarray(counts), edges, columns, len(client_rows)
        ),
    )


def fit_scaling(
    merged: Moments,
    counts: np.ndarray,
    edges: np.ndarray,
    *,
    numeric: str,
    missing: str,
) -> Scaling:
    """Per-column parameters from merged statistics alone.

    ``standard``: mean and population std; ``robust``: median and
    interquartile range from the histogram; ``minmax``: min and max - min;
    ``none``: 0 and 1. A scale of 0 (a constant column) becomes 1, so the
    column is centered and left at 0. ``mean`` / ``median`` fill missing
    values with the column's mean or histogram median.
    """
    d = merged.count.shape[0]
    if numeric == "standard":
        center, scale = merged.mean, merged.std
    elif numeric == "robust":
        center = quantiles(counts, edges, 0.5)
        scale = quantiles(counts, edges, 0.75) - quantiles(counts, edges, 0.25)
    elif numeric == "minmax":
        center, scale = merged.low, merged.high - merged.low
    elif numeric == "none":
        center, scale = np.zeros(d), np.ones(d)
    else:
        raise ValueError(f"preprocess.numeric: unknown {numeric!r}")
    center = np.nan_to_num(np.asarray(center, dtype=np.float64), nan=0.0)
    scale = np.asarray(scale, dtype=np.float64)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    fill = None
    if missing == "mean":
        fill = np.nan_to_num(merged.mean, nan=0.0)
    elif missing == "median":
        fill = np.nan_to_num(quantiles(counts, edges, 0.5), nan=0.0)
    return Scaling(center=center, scale=scale, fill=fill)


def _local_scaling(
    x: np.ndarray,
    own: Moments,
    bins: int,
    *,
    numeric: str,
    missing: str,
    fallback: Scaling,
) -> Scaling:
    """One client's parameters from its own statistics only; a column the
    client has no value of keeps the federated parameters."""
    edges = edges_for(own, bins)
    scaling = fit_scaling(
        own, histogram(x, edges), edges, numeric=numeric, missing=missing
    )
    empty = own.count == 0
    if not empty.any():
        return scaling
    return Scaling(
        center=np.where(empty, fallback.center, scaling.center),
        scale=np.where(empty, fallback.scale, scaling.scale),
        fill=None
        if scaling.fill is None or fallback.fill is None
        else np.where(empty, fallback.fill, scaling.fill),
    )


def _check_missing(merged: Moments, columns: Sequence[str], missing: str) -> None:
    if missing == "refuse" and merged.missing.sum() > 0:
        with_missing = [columns[j] for j in np.flatnonzero(merged.missing > 0)]
        raise PreprocessError(
            f"preprocess.missing: refuse, but the clients' training splits have "
            f"{int(merged.missing.sum())} missing values (columns "
            f"{', '.join(repr(c) for c in with_missing[:10])}); set "
            "preprocess.missing to mean or median to impute them"
        )
    empty = [columns[j] for j in np.flatnonzero(merged.count == 0)]
    if empty:
        raise PreprocessError(
            f"data.feature_columns: column(s) {', '.join(repr(c) for c in empty[:10])} "
            "have no value in any client's training split; drop them from "
            "data.feature_columns"
        )


def _statistics(
    merged: Moments,
    counts: np.ndarray,
    edges: np.ndarray,
    columns: Sequence[str],
    n_clients: int,
) -> dict[str, Any]:
    """The merged statistics per column, for a person reading the JSON."""
    q = {p: quantiles(counts, edges, p / 100) for p in (25, 50, 75)}
    per_column = {
        name: {
            "count": int(merged.count[j]),
            "missing": int(merged.missing[j]),
            "mean": _float(merged.mean[j]),
            "std": _float(merged.std[j]),
            "min": _float(merged.low[j]),
            "max": _float(merged.high[j]),
            **{f"q{p}": _float(v[j]) for p, v in q.items()},
        }
        for j, name in enumerate(columns)
    }
    return {"clients": n_clients, "rows": merged.rows, "columns": per_column}


def _float(value: Any) -> float | None:
    v = float(value)
    return v if np.isfinite(v) else None


def _floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64)]

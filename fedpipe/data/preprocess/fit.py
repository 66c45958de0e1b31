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

from fedpipe.core.errors import FedpipeError, SettingError
from fedpipe.data.kinds import STRING_KINDS
from fedpipe.data.preprocess.encode import (
    OTHER,
    Encoding,
    merge_counts,
    token_counts,
    value_counts,
    vocabulary,
)
from fedpipe.data.preprocess.encode import categorical_encoding as encode_categorical
from fedpipe.data.preprocess.encode import text_encoding as encode_text
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
    encodings : tuple of Encoding
        The categorical and text columns' encodings (their output columns come
        after the numeric columns, in this order, before the indicators).
    heldout : dict
        Counted after the fit, for reading only (never an input of the fit):
        per categorical column, the held-out rows whose value went to "other"
        because no client's training rows had it (``unseen``) or too few did
        (``rare``).
    """

    kind: str
    columns: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    federated: Scaling | None = None
    local: tuple[Scaling, ...] = ()
    indicators: tuple[int, ...] = ()
    statistics: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    encodings: tuple[Encoding, ...] = ()
    heldout: dict[str, Any] = field(default_factory=dict)

    @property
    def is_identity(self) -> bool:
        """True when the stage leaves the data as the ingest stored it."""
        return self.kind == "identity"

    @property
    def numeric_columns(self) -> tuple[int, ...]:
        """The stored columns that are scaled (not encoded), in order."""
        encoded = {e.column for e in self.encodings}
        return tuple(j for j in range(len(self.columns)) if j not in encoded)

    @property
    def n_outputs(self) -> int:
        """Columns after the transform: the numeric columns, each encoded
        column's, then the indicators."""
        widths = sum(e.width for e in self.encodings)
        return len(self.numeric_columns) + widths + len(self.indicators)

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
        if self.encodings:
            out["encodings"] = [e.to_json() for e in self.encodings]
        if self.heldout:
            out["heldout"] = self.heldout
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
            encodings=tuple(
                Encoding.from_json(e, columns) for e in raw.get("encodings") or ()
            ),
            heldout=dict(raw.get("heldout") or {}),
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
    column_types: Mapping[str, str] | None = None,
    strings: Mapping[str, Sequence[str]] | None = None,
    categorical_encoding: str = "onehot",
    min_category_count: int = 5,
    text_encoding: str = "multihot",
    min_token_count: int = 2,
    max_tokens: int = 1000,
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
    column_types : mapping, optional
        The columns that are not plain numbers (``schema.json``
        ``column_types``, :mod:`fedpipe.data.kinds`): a ``"categorical"`` or
        ``"text"`` column's stored values are codes into ``strings`` (name ->
        values in code order), each client counts its own rows' values
        (tokens) and the merged counts fix the vocabulary; a ``"boolean"``
        column is left as stored (0/1, not scaled); a ``"date"`` column (days
        since 1970-01-01) is scaled as a number.
    categorical_encoding, min_category_count, text_encoding, min_token_count, \
max_tokens
        The ``preprocess.*`` keys of the same names.

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
    settings: dict[str, Any] = {
        "numeric": numeric,
        "fit": fit,
        "missing": missing,
        "bins": bins,
    }
    statistics = _statistics(
        merged, np.asarray(counts), edges, columns, len(client_rows)
    )
    encodings: tuple[Encoding, ...] = ()
    if column_types:
        knobs = {
            "categorical_encoding": categorical_encoding,
            "min_category_count": min_category_count,
            "text_encoding": text_encoding,
            "min_token_count": min_token_count,
            "max_tokens": max_tokens,
        }
        settings.update(knobs)
        encodings, fills = _fit_encodings(
            client_rows, columns, column_types, strings or {}, statistics, **knobs
        )
        federated = _codes_as_stored(federated, fills)
        local = tuple(_codes_as_stored(s, fills) for s in local)
        flags = [j for j, c in enumerate(columns) if column_types.get(c) == "boolean"]
        if flags:  # 0/1 as stored (a missing one imputed as any number)
            federated = _unscaled(federated, flags)
            local = tuple(_unscaled(s, flags) for s in local)
    return Transform(
        kind="table",
        columns=tuple(columns),
        settings=settings,
        federated=federated,
        local=local,
        indicators=tuple(int(j) for j in np.flatnonzero(merged.missing > 0))
        if missing != "refuse"
        else (),
        statistics=statistics,
        encodings=encodings,
    )


def _fit_encodings(
    client_rows: Sequence[np.ndarray],
    columns: Sequence[str],
    column_types: Mapping[str, str],
    strings: Mapping[str, Sequence[str]],
    statistics: dict[str, Any],
    *,
    categorical_encoding: str,
    min_category_count: int,
    text_encoding: str,
    min_token_count: int,
    max_tokens: int,
) -> tuple[tuple[Encoding, ...], dict[int, float]]:
    """Each string column's encoding from the clients' merged counts, and the
    code a missing value becomes when imputing (a categorical column's most
    frequent value; -1, no token, for a text). Writes the counts into
    ``statistics``."""
    encodings = []
    fills: dict[int, float] = {}
    for j, name in enumerate(columns):
        kind = column_types.get(name)
        if kind not in STRING_KINDS:
            continue  # numbers: numeric, date, boolean
        values = list(strings.get(name, ()))
        entry = statistics["columns"][name]
        present = {"count": entry["count"], "missing": entry["missing"]}
        if kind == "categorical":
            merged = merge_counts(value_counts(x[:, j], values) for x in client_rows)
            kept = vocabulary(merged, min_category_count)
            encodings.append(
                encode_categorical(j, name, categorical_encoding, kept, values)
            )
            known = set(kept)
            rare = sum(c for v, c in merged.items() if v not in known)
            fills[j] = float(values.index(kept[0])) if kept else -1.0
            statistics["columns"][name] = {
                "type": "categorical",
                **present,
                "categories": {v: int(merged[v]) for v in kept},
                OTHER: {"rows": int(rare), "values": len(merged) - len(kept)},
            }
        else:
            parts = [token_counts(x[:, j], values) for x in client_rows]
            occurrences = merge_counts(p[0] for p in parts)
            documents = merge_counts(p[1] for p in parts)
            texts = sum(p[2] for p in parts)
            kept = vocabulary(occurrences, min_token_count, max_tokens)
            encodings.append(
                encode_text(
                    j,
                    name,
                    text_encoding,
                    kept,
                    values,
                    documents=documents,
                    rows=texts,
                )  # fmt: skip
            )
            fills[j] = -1.0  # no code: no token
            statistics["columns"][name] = {
                "type": "text",
                **present,
                "tokens": len(occurrences),
                "kept": len(kept),
                "top": {t: int(occurrences[t]) for t in kept[:20]},
            }
    return tuple(encodings), fills


def _unscaled(scaling: Scaling, columns: Sequence[int]) -> Scaling:
    """``scaling`` with ``columns`` left as stored (centre 0, scale 1)."""
    center, scale = scaling.center.copy(), scaling.scale.copy()
    center[list(columns)], scale[list(columns)] = 0.0, 1.0
    return Scaling(center=center, scale=scale, fill=scaling.fill)


def _codes_as_stored(scaling: Scaling, fills: Mapping[int, float]) -> Scaling:
    """``scaling`` with the encoded columns left as codes (centre 0, scale 1),
    a missing one filled with ``fills[j]`` when imputing."""
    at = np.array(sorted(fills), dtype=np.int64)
    center, scale = scaling.center.copy(), scaling.scale.copy()
    center[at], scale[at] = 0.0, 1.0
    fill = None
    if scaling.fill is not None:
        fill = scaling.fill.copy()
        fill[at] = [fills[j] for j in sorted(fills)]
    return Scaling(center=center, scale=scale, fill=fill)


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
        center = quantiles(counts, edges, 0.5, merged.whole)
        scale = quantiles(counts, edges, 0.75, merged.whole) - quantiles(
            counts, edges, 0.25, merged.whole
        )
    elif numeric == "minmax":
        center, scale = merged.low, merged.high - merged.low
    elif numeric == "none":
        center, scale = np.zeros(d), np.ones(d)
    else:
        raise SettingError(f"preprocess.numeric: unknown {numeric!r}")
    center = np.nan_to_num(np.asarray(center, dtype=np.float64), nan=0.0)
    scale = np.asarray(scale, dtype=np.float64)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    fill = None
    if missing == "mean":
        fill = np.nan_to_num(merged.mean, nan=0.0)
    elif missing == "median":
        fill = np.nan_to_num(quantiles(counts, edges, 0.5, merged.whole), nan=0.0)
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
    q = {p: quantiles(counts, edges, p / 100, merged.whole) for p in (25, 50, 75)}
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

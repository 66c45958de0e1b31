"""Federated statistics a person can read (``data/preprocess/stats.json``).

Built from the same per-client summaries the fit uses (:mod:`.stats`: each
client's :class:`~.stats.Moments` and its histogram on edges fixed by the
merged min/max), kept per client instead of only merged: per column, globally
and per client, the count, missing values, mean, std and quartiles (from the
histogram), a coarse histogram, each client's label counts, and the feature
skew (each client's column mean in global standard deviations).

The minimum-count rule (NVIDIA FLARE's filter): no count of fewer than
``min_count`` rows (a histogram bin, a label, a missing count, a client's
column) is written; it reads ``"<k"``, and a client's mean, std, quartiles and
skew of a column it holds fewer than ``k`` values of read ``"<k"`` too. Nor can
it be read by difference: where one part of a total is hidden (a client's
``missing`` beside its ``count`` and ``rows``, a histogram bin beside the
column's count, a categorical ``other`` beside the ``top`` values, a client's
cell beside the global one), one more part is hidden as ``">=k"``
(:func:`fedpipe.core.smallcells.suppress`). The rule is applied as the file is
written, so the versioned file never holds a small cell. Global minimum and
maximum are written (the fit uses them); they are single values, as in
``transform.json``.

A categorical column (stored as codes) has no mean, quartiles, histogram or
skew (``None``: codes are not quantities); it has ``top``, its most frequent
values with their rows, globally and per client, a value of fewer than ``k``
rows never named, and ``other``, the rows of the values not listed. A text
column's ``top`` are tokens with the rows holding them. With the held-out set's
codes (:func:`summarize_prepared`), ``heldout_other`` counts per categorical
column the held-out rows whose value goes to the encoding's "other" slot:
``unseen`` (no client's training rows have it) and ``rare`` (fewer than
``preprocess.min_category_count`` do).

Images are summarized as one column, ``mean_intensity`` (each image's mean
pixel value after the /255 scaling).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedpipe.core.smallcells import Relation, shown, suppress
from fedpipe.data.preprocess.encode import (
    merge_counts,
    token_counts,
    value_counts,
    vocabulary,
)
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
    "IMAGE_COLUMN",
    "count_cells",
    "count_relations",
    "shown",
    "skew_matrix",
    "summarize",
]

FORMAT = 1  # of stats.json
IMAGE_COLUMN = "mean_intensity"
QUARTILES = (25, 50, 75)
TOP = 10  # values (tokens) listed per string column
_NOT_NUMBERS = ("mean", "std", *(f"q{p}" for p in QUARTILES), "min", "max")


def summarize(
    client_rows: Sequence[np.ndarray],
    client_labels: Sequence[np.ndarray],
    *,
    columns: Sequence[str],
    class_names: Sequence[str],
    kind: str,
    min_count: int,
    bins: int,
    shown_bins: int = 10,
    column_types: Mapping[str, str] | None = None,
    strings: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """The readable statistics of the clients' training rows (``stats.json``).

    Parameters
    ----------
    client_rows : sequence of numpy.ndarray
        Client ``i``'s training features ``(n_i, d)``, NaN = missing.
    client_labels : sequence of numpy.ndarray
        Client ``i``'s training labels (class indices).
    columns, class_names
        Names of the ``d`` columns and of the classes.
    kind : str
        ``"table"`` or ``"image"`` (written, for the reader).
    min_count : int
        ``preprocess.min_count_shown``: the smallest count written.
    bins : int
        ``preprocess.bins``: the histogram the quartiles are read from.
    shown_bins : int
        Bins of the histogram written per column (default 10).
    column_types, strings : mapping, optional
        The string columns (``schema.json``'s): name -> ``"categorical"`` or
        ``"text"``, and name -> its values in code order.
    """
    per_client = [moments(x) for x in client_rows]
    merged = merge(per_client)
    fine = edges_for(merged, bins)
    coarse = edges_for(merged, shown_bins)
    fine_counts = [histogram(x, fine) for x in client_rows]
    coarse_counts = [histogram(x, coarse) for x in client_rows]
    k = int(min_count)
    glob = _column_block(merged, sum(fine_counts), fine, sum(coarse_counts), k)
    for j, block in enumerate(glob):  # the fit's min and max (transform.json's)
        block["min"], block["max"] = _float(merged.low[j]), _float(merged.high[j])
    clients = []
    for i, (m, f, c, y) in enumerate(
        zip(per_client, fine_counts, coarse_counts, client_labels, strict=True)
    ):
        labels = np.bincount(np.asarray(y, dtype=np.int64), minlength=len(class_names))
        clients.append(
            {
                "client": i,
                "rows": int(m.rows),
                "labels": {
                    str(name): int(n)
                    for name, n in zip(class_names, labels, strict=True)
                },
                "columns": dict(
                    zip(columns, _column_block(m, f, fine, c, k), strict=True)
                ),
            }
        )
    skew = _skew(per_client, merged, k)
    for j, name in enumerate(columns):
        kind_j = (column_types or {}).get(name)
        if kind_j not in ("categorical", "text"):
            continue  # numbers (numeric, date, boolean)
        values = list((strings or {}).get(name, ()))
        counts = [_value_counts(x[:, j], values, kind_j) for x in client_rows]
        _as_strings(glob[j], kind_j, merge_counts(counts), k)
        for client, own in zip(clients, counts, strict=True):
            _as_strings(client["columns"][name], kind_j, own, k)
        for row in skew:
            row[j] = None
    doc = {
        "format": FORMAT,
        "kind": kind,
        "min_count": k,
        "clients": len(client_rows),
        "rows": int(merged.rows),
        "columns": list(columns),
        "histogram_edges": {name: _floats(coarse[j]) for j, name in enumerate(columns)},
        "global": dict(zip(columns, glob, strict=True)),
        "per_client": clients,
        "skew": skew,
    }
    cells = count_cells(doc)
    relations = count_relations(doc)
    for path, value in suppress(cells, relations, k).items():
        _put(doc, path, value)
    return doc


def count_cells(stats: Mapping[str, Any]) -> dict[tuple, Any]:
    """Every count of a ``stats.json`` document, by its path of keys (a
    histogram bin's index last)."""
    cells: dict[tuple, Any] = {("rows",): stats["rows"]}
    blocks = [(("global",), stats["global"])] + [
        (("per_client", i, "columns"), c["columns"])
        for i, c in enumerate(stats["per_client"])
    ]
    for i, client in enumerate(stats["per_client"]):
        cells[("per_client", i, "rows")] = client["rows"]
        for name, n in client["labels"].items():
            cells[("per_client", i, "labels", name)] = n
    for prefix, columns in blocks:
        for name, block in columns.items():
            at = (*prefix, name)
            cells[(*at, "count")] = block["count"]
            cells[(*at, "missing")] = block["missing"]
            for b, n in enumerate(block["histogram"]):
                cells[(*at, "histogram", b)] = n
            if "other" in block:
                cells[(*at, "other")] = block["other"]
                for value, n in block["top"].items():
                    cells[(*at, "top", value)] = n
    return cells


def count_relations(stats: Mapping[str, Any]) -> list[Relation]:
    """The totals a reader of a ``stats.json`` can add up: each client's
    rows (its labels; each column's count and missing), a column's count
    (its histogram; a categorical column's top values and other), and the
    global rows, count, missing and histogram bins (the clients')."""
    rels = []
    n = len(stats["per_client"])
    clients = [("per_client", i) for i in range(n)]
    rels.append(Relation(("rows",), tuple((*c, "rows") for c in clients), "rows"))
    for c, client in zip(clients, stats["per_client"], strict=True):
        rows = (*c, "rows")
        labels = tuple((*c, "labels", name) for name in client["labels"])
        rels.append(Relation(rows, labels, f"client {c[1]}'s labels"))
    for name, block in stats["global"].items():
        at = ("global", name)
        rels.append(Relation(
            ("rows",), ((*at, "count"), (*at, "missing")), f"column {name}"
        ))  # fmt: skip
        for key in ("count", "missing"):
            rels.append(Relation(
                (*at, key), tuple((*c, "columns", name, key) for c in clients),
                f"column {name}'s {key} over the clients",
            ))  # fmt: skip
        for b in range(len(block["histogram"])):
            rels.append(Relation(
                (*at, "histogram", b),
                tuple((*c, "columns", name, "histogram", b) for c in clients),
                f"column {name}'s histogram bin {b} over the clients",
            ))  # fmt: skip
        owners = [("global",), *((*c, "columns") for c in clients)]
        for owner in owners:
            inner: Any = stats
            for key in owner:
                inner = inner[key]
            own = inner[name]
            client = "" if owner == ("global",) else f", client {owner[1]}"
            where = f"column {name}{client}"
            at = (*owner, name)
            if client:
                rels.append(Relation(
                    (*owner[:2], "rows"), ((*at, "count"), (*at, "missing")), where
                ))  # fmt: skip
            if own["histogram"]:
                n_bins = len(own["histogram"])
                bins = tuple((*at, "histogram", b) for b in range(n_bins))
                rels.append(Relation((*at, "count"), bins, f"{where}, histogram"))
            if "other" in own:
                parts = tuple((*at, "top", v) for v in own["top"]) + ((*at, "other"),)
                rels.append(Relation((*at, "count"), parts, f"{where}, top values"))
    return rels


def _put(doc: dict[str, Any], path: tuple, value: Any) -> None:
    inner: Any = doc
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value


def _value_counts(codes: np.ndarray, values: Sequence[str], kind: str) -> Counter:
    """Rows per value (categorical) or rows holding each token (text)."""
    if kind == "text":
        return token_counts(codes, values)[1]
    return value_counts(codes, values)


def _as_strings(block: dict[str, Any], kind: str, counts: Counter, k: int) -> None:
    """``block`` of a string column: no numbers of its codes; its ``top``
    values of ``k`` rows or more, and the ``other`` rows (categorical)."""
    for key in _NOT_NUMBERS:
        if key in block:  # min and max: the global block's only
            block[key] = None
    block["histogram"] = []
    block["type"] = kind
    top = vocabulary(counts, k, TOP)
    block["top"] = {v: int(counts[v]) for v in top}
    if kind == "categorical":
        block["other"] = int(sum(counts.values()) - sum(block["top"].values()))


def heldout_other(
    client_rows: Sequence[np.ndarray],
    heldout: np.ndarray,
    *,
    columns: Sequence[str],
    column_types: Mapping[str, str],
    strings: Mapping[str, Sequence[str]],
    min_category_count: int,
    min_count: int,
) -> dict[str, dict[str, int | str]]:
    """Per categorical column, the held-out rows whose value the encoding
    sends to "other": ``unseen`` (in no client's training rows) and ``rare``
    (in fewer than ``min_category_count`` of them), counts under the
    minimum-count rule."""
    out: dict[str, dict[str, int | str]] = {}
    for j, name in enumerate(columns):
        if column_types.get(name) != "categorical":
            continue
        values = list(strings.get(name, ()))
        trained = merge_counts(value_counts(x[:, j], values) for x in client_rows)
        kept = set(vocabulary(trained, min_category_count))
        held = value_counts(np.asarray(heldout)[:, j], values)
        unseen = sum(n for v, n in held.items() if v not in trained)
        rare = sum(n for v, n in held.items() if v in trained and v not in kept)
        out[name] = {
            "unseen": shown(unseen, min_count),
            "rare": shown(rare, min_count),
        }
    return out


def skew_matrix(stats: dict[str, Any]) -> np.ndarray:
    """``(clients, columns)`` feature skew of a ``stats.json``: each client's
    column mean minus the global mean, in global standard deviations (NaN
    where suppressed or the column is constant)."""
    return np.array(
        [[np.nan if v is None else v for v in row] for row in stats["skew"]],
        dtype=np.float64,
    ).reshape(int(stats["clients"]), len(stats["columns"]))


def _column_block(
    m: Moments,
    fine_counts: np.ndarray,
    fine_edges: np.ndarray,
    coarse_counts: np.ndarray,
    k: int,
) -> list[dict[str, Any]]:
    """Per column: the statistics of the rows ``m`` summarizes, rule applied."""
    q = {p: quantiles(fine_counts, fine_edges, p / 100, m.whole) for p in QUARTILES}
    out = []
    for j in range(m.count.shape[0]):
        hidden = 0 < int(m.count[j]) < k
        block: dict[str, Any] = {  # exact here; the rule is applied at the end
            "count": int(m.count[j]),
            "missing": int(m.missing[j]),
        }
        values = {
            "mean": m.mean[j],
            "std": m.std[j],
            **{f"q{p}": v[j] for p, v in q.items()},
        }
        for name, value in values.items():
            block[name] = f"<{k}" if hidden else _float(value)
        block["histogram"] = [int(n) for n in coarse_counts[j]]
        out.append(block)
    return out


def _skew(per_client: Sequence[Moments], merged: Moments, k: int) -> list[list]:
    """Rows per client: ``(mean_i - mean) / std`` per column (None where the
    client holds fewer than ``k`` values or the column is constant)."""
    spread = merged.std
    rows = []
    for m in per_client:
        with np.errstate(invalid="ignore", divide="ignore"):
            z = (m.mean - merged.mean) / spread
        ok = (m.count >= k) & np.isfinite(z) & (spread > 0)
        rows.append(
            [_float(v) if good else None for v, good in zip(z, ok, strict=True)]
        )
    return rows


def _float(value: Any) -> float | None:
    v = float(value)
    return v if np.isfinite(v) else None


def _floats(values: np.ndarray) -> list[float]:
    return [float(v) for v in np.asarray(values, dtype=np.float64)]


def summarize_prepared(prepared: Any, manifest: Any, settings: Any) -> dict[str, Any]:
    """:func:`summarize` of a prepared data set's clients' training splits
    (the local test splits are never read; the held-out set only to count
    its rows whose category goes to "other", ``heldout_other``).

    Parameters
    ----------
    settings
        ``preprocess.*`` (``min_count_shown``, ``bins``, ``min_category_count``).
    """
    from fedpipe.data.ingest import read_schema
    from fedpipe.data.splits import open_federated

    schema = read_schema(prepared)
    data = open_federated(prepared, manifest)
    table = schema.get("source") == "table"
    if table:
        columns = [str(c) for c in schema["feature_names"]]
        rows = [client.x_train for client in data.clients]
    else:
        columns = [IMAGE_COLUMN]
        rows = [_intensity(client.x_train) for client in data.clients]
    column_types = dict(schema.get("column_types") or {}) if table else {}
    strings = dict(schema.get("strings") or {}) if table else {}
    stats = summarize(
        rows,
        [client.y_train for client in data.clients],
        columns=columns,
        class_names=[str(c) for c in schema.get("class_names") or data.spec.classes],
        kind="table" if table else "image",
        min_count=settings.min_count_shown,
        bins=settings.bins,
        column_types=column_types,
        strings=strings,
    )
    if table and schema.get("column_kinds"):
        stats["column_kinds"] = dict(schema["column_kinds"])
    if "categorical" in column_types.values():
        # counted from the fit's vocabulary rule, never an input of the fit
        stats["heldout_other"] = heldout_other(
            rows, np.asarray(data.x_test), columns=columns,
            column_types=column_types, strings=strings,
            min_category_count=settings.min_category_count,
            min_count=settings.min_count_shown,
        )  # fmt: skip
    return stats


def _intensity(x: np.ndarray) -> np.ndarray:
    """Each image's mean value, ``(n, 1)`` float64."""
    flat = np.asarray(x).reshape(len(x), -1)
    return flat.mean(axis=1, dtype=np.float64)[:, None]

"""Federated preprocessing of table columns (the ``preprocess`` stage).

One concern per module: :mod:`~fedpipe.data.preprocess.stats` (what each client
computes from its own training rows, and the merge), :mod:`~fedpipe.data.
preprocess.fit` (the transform from the merged statistics only) and
:mod:`~fedpipe.data.preprocess.apply` (the transform applied to rows as they
are read). :func:`fit_prepared` fits a prepared data set under its partition.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from fedpipe.data.preprocess.apply import RowTransform, read_transform, row_transform
from fedpipe.data.preprocess.encode import (
    CATEGORICAL_KINDS,
    OTHER,
    merge_counts,
    value_counts,
)
from fedpipe.data.preprocess.fit import (
    PreprocessError,
    Transform,
    fit_transform,
    identity_transform,
)

__all__ = [
    "PreprocessError",
    "RowTransform",
    "Transform",
    "fit_prepared",
    "fit_transform",
    "identity_transform",
    "read_transform",
    "row_transform",
]

IMAGE_NOTE = (
    "not a table: the stored pixels are divided by the data's scale (255) and "
    "nothing else; preprocess.* applies to tables"
)


def fit_prepared(prepared: Path, manifest: Path, settings: Any) -> Transform:
    """The transform of a prepared data set under its partition manifest.

    Reads only each client's training split (as its own array; the held-out set
    and the clients' local test splits are never read). An identity transform
    for anything but a table.

    Parameters
    ----------
    settings
        ``preprocess.*`` (a :class:`fedpipe.config.params.PreprocessParams`).
    """
    from fedpipe.data.ingest import read_schema
    from fedpipe.data.splits import open_federated

    schema = read_schema(prepared)
    if schema.get("source") != "table":
        return identity_transform(IMAGE_NOTE)
    columns = [str(c) for c in schema["feature_names"]]
    column_types = dict(schema.get("column_types") or {})
    _check_declared(column_types, settings)
    data = open_federated(prepared, manifest)
    client_rows = [client.x_train for client in data.clients]
    transform = fit_transform(
        client_rows,
        columns=columns,
        numeric=settings.numeric,
        fit=settings.fit,
        missing=settings.missing,
        bins=settings.bins,
        column_types=column_types,
        strings=schema.get("strings") or {},
        categorical_encoding=settings.categorical_encoding,
        min_category_count=settings.min_category_count,
        text_encoding=settings.text_encoding,
        min_token_count=settings.min_token_count,
        max_tokens=settings.max_tokens,
    )
    k = int(settings.min_count_shown)
    statistics = published_statistics(transform.statistics, k)
    if not transform.encodings:
        return dataclasses.replace(transform, statistics=statistics)
    # counted after the fit, from the fitted vocabularies (never an input)
    heldout = heldout_other(
        transform, client_rows, data.x_test, schema.get("strings") or {}
    )
    return dataclasses.replace(
        transform, statistics=statistics, heldout=published_heldout(heldout, k)
    )


def published_statistics(statistics: dict[str, Any], k: int) -> dict[str, Any]:
    """The fit's record of its counts (``transform.json``'s ``statistics``)
    under the minimum-count rule (``preprocess.min_count_shown``), as
    ``stats.json``: a count of 1 to ``k - 1`` reads ``"<k"``, and by difference
    (a column's count and missing beside the rows; a categorical column's
    categories and other rows beside its count) one more part is hidden as
    ``">=k"``. The fit itself used the exact counts; nothing reads these back."""
    from fedpipe.core.smallcells import Relation, suppress

    out = copy.deepcopy(statistics)
    columns = out.get("columns") or {}
    cells: dict[Any, int] = {}
    relations = []
    if isinstance(out.get("rows"), int):
        cells[("rows",)] = out["rows"]
    for name, entry in columns.items():
        at = ("columns", name)
        for key in ("count", "missing"):
            if isinstance(entry.get(key), int):
                cells[(*at, key)] = entry[key]
        if ("rows",) in cells and (*at, "count") in cells and (*at, "missing") in cells:
            relations.append(Relation(("rows",), ((*at, "count"), (*at, "missing"))))
        if "categories" in entry:
            parts = [(*at, "categories", v) for v in entry["categories"]]
            for part in parts:
                cells[part] = entry["categories"][part[-1]]
            cells[(*at, OTHER, "rows")] = entry[OTHER]["rows"]
            parts.append((*at, OTHER, "rows"))
            relations.append(Relation((*at, "count"), tuple(parts)))
        for token, n in (entry.get("top") or {}).items():
            cells[(*at, "top", token)] = n
    for path, value in suppress(cells, relations, k).items():
        inner: Any = out
        for key in path[:-1]:
            inner = inner[key]
        inner[path[-1]] = value
    return out


def published_heldout(heldout: dict[str, Any], k: int) -> dict[str, Any]:
    """:func:`heldout_other` under the minimum-count rule: its counts read
    ``"<k"`` below ``k``, and a value seen in fewer than ``k`` held-out rows
    is not named."""
    from fedpipe.core.smallcells import shown

    out = copy.deepcopy(heldout)
    for entry in (out.get("other") or {}).values():
        entry["unseen"] = shown(entry["unseen"], k)
        entry["rare"] = shown(entry["rare"], k)
        entry["unseen_values"] = {
            v: n for v, n in entry["unseen_values"].items() if n >= k
        }
    return out


def heldout_other(
    transform: Transform,
    client_rows: list[np.ndarray],
    x_test: Any,
    strings: dict[str, list[str]],
) -> dict[str, Any]:
    """Per categorical column, the held-out rows whose value goes to "other":
    ``unseen`` (no client's training rows have it) and ``rare`` (fewer than
    ``preprocess.min_category_count`` do), with the unseen values (up to 20)."""
    rows = np.asarray(x_test, dtype=np.float64)
    out: dict[str, Any] = {"rows": len(rows), "other": {}}
    for enc in transform.encodings:
        if enc.kind not in CATEGORICAL_KINDS:
            continue
        values = strings.get(enc.name, [])
        trained = merge_counts(
            value_counts(x[:, enc.column], values) for x in client_rows
        )
        codes = rows[:, enc.column]
        codes = codes[~np.isnan(codes)].astype(np.int64)
        counts = np.bincount(codes, minlength=len(values))
        unseen: dict[str, int] = {}
        rare = 0
        for code in np.flatnonzero(counts):
            value = values[code]
            if value in enc.vocabulary:
                continue
            if value in trained:
                rare += int(counts[code])
            else:
                unseen[value] = int(counts[code])
        out["other"][enc.name] = {
            "unseen": sum(unseen.values()),
            "rare": rare,
            "unseen_values": dict(sorted(unseen.items())[:20]),
        }
    return out


def _check_declared(column_types: dict[str, str], settings: Any) -> None:
    """The columns ``preprocess.categorical`` / ``.text`` declare were stored
    as such by the ingest (it reads the same keys)."""
    for key, kind in (("categorical", "categorical"), ("text", "text")):
        stale = [c for c in getattr(settings, key) if column_types.get(c) != kind]
        if stale:
            raise PreprocessError(
                f"preprocess.{key}: {', '.join(repr(c) for c in stale)} not stored "
                f"as {kind} by the ingest stage (the prepared data predates the "
                "setting); run the ingest stage again (fedpipe run does)"
            )

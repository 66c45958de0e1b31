"""Federated preprocessing of table columns (the ``preprocess`` stage).

One concern per module: :mod:`~fedpipe.data.preprocess.stats` (what each client
computes from its own training rows, and the merge), :mod:`~fedpipe.data.
preprocess.fit` (the transform from the merged statistics only) and
:mod:`~fedpipe.data.preprocess.apply` (the transform applied to rows as they
are read). :func:`fit_prepared` fits a prepared data set under its partition.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from fedpipe.data.preprocess.apply import RowTransform, read_transform, row_transform
from fedpipe.data.preprocess.encode import (
    CATEGORICAL_KINDS,
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
    if not transform.encodings:
        return transform
    # counted after the fit, from the fitted vocabularies (never an input)
    heldout = heldout_other(
        transform, client_rows, data.x_test, schema.get("strings") or {}
    )
    return dataclasses.replace(transform, heldout=heldout)


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

"""Federated preprocessing of table columns (the ``preprocess`` stage).

One concern per module: :mod:`~fedpipe.data.preprocess.stats` (what each client
computes from its own training rows, and the merge), :mod:`~fedpipe.data.
preprocess.fit` (the transform from the merged statistics only) and
:mod:`~fedpipe.data.preprocess.apply` (the transform applied to rows as they
are read). :func:`fit_prepared` fits a prepared data set under its partition.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedpipe.data.preprocess.apply import RowTransform, read_transform, row_transform
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
    data = open_federated(prepared, manifest)
    return fit_transform(
        [client.x_train for client in data.clients],
        columns=[str(c) for c in schema["feature_names"]],
        numeric=settings.numeric,
        fit=settings.fit,
        missing=settings.missing,
        bins=settings.bins,
    )

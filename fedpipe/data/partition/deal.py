"""The partition stage's work: deal a prepared data set's samples to clients.

:func:`partition_table` drops repeated samples, holds out a global test split,
deals the rest to clients with the chosen :class:`Partitioner`, splits each
client's share locally and lays any feature skew over it: the ``partition``
stage's manifest. It reads the prepared ``samples.parquet`` (a DataFrame), so
unlike the rest of :mod:`fedpipe.data.partition` it is imported on its own.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.config.dedupe import dedupe_mode
from fedpipe.core.seeds import rng_for
from fedpipe.data.partition import Partitioner, PartitionError, make_partitioner
from fedpipe.data.partition.featureskew import client_feature_transforms, skewed_columns
from fedpipe.data.partition.manifest import (
    build_manifest,
    check_partition,
    split_heldout,
)
from fedpipe.data.sources import DatasetSpec, to_features


def partition_table(
    samples: pd.DataFrame,
    *,
    classes: Sequence[int],
    seed: int,
    test_fraction: float,
    method: str,
    n_clients: int,
    local_test_fraction: float,
    dedupe: str | bool,
    settings: Mapping[str, Any],
    features: np.ndarray | None = None,
    spec: DatasetSpec | None = None,
    feature_names: Sequence[str] | None = None,
    column_types: Mapping[str, str] | None = None,
    table: bool = False,
) -> dict[str, Any]:
    """Hold out a global test split, deal the rest to clients, split each locally.

    Parameters
    ----------
    samples : DataFrame
        ``samples.parquet`` of the prepared data (``sample_id``, ``label``,
        ``content_hash``, optional ``client_key``).
    dedupe : str or bool
        ``data.dedupe`` (:func:`fedpipe.config.dedupe.dedupe_mode`): ``content``
        drops samples whose content repeats an earlier sample's, ``row`` those
        whose content and label do, ``none`` none; ``auto`` is ``content`` for
        images and ``none`` for a table (``table``). What is kept is then
        checked for held-out leakage by what makes a sample itself: an image's
        content (the same picture on both sides of the split is an error), a
        table row's id (rows are people: two who share every feature value are
        two people).
    settings : mapping
        The ``partition.*`` values (alpha, min_samples, min_classes,
        feature_skew, ...).
    features, spec : numpy.ndarray and DatasetSpec, optional
        The prepared features (rows aligned with ``samples``) and their spec:
        needed only by a partitioner that reads the inputs (``continuous``) and
        by ``partition.feature_skew`` other than ``none``.
    feature_names : sequence of str, optional
        A table's feature column names (``schema.json``), for
        ``partition.continuous_by`` and ``partition.domain_columns``.
    column_types : mapping, optional
        A table's column kinds (``schema.json`` ``column_types``): feature skew
        changes its numeric and date columns only.
    table : bool, optional
        The prepared data is a table (``schema.json`` ``source`` ``table``).

    Returns
    -------
    dict
        The manifest of :func:`fedpipe.data.partition.manifest.build_manifest`, plus
        ``dropped_duplicates`` (ids; with ``dedupe`` other than ``content``,
        ``dedupe`` records the mode that was applied) and, for natural
        partitions, ``client_keys``.
        With feature skew, ``params`` records its keys and each client entry its
        ``feature_transform`` (:mod:`fedpipe.data.partition.featureskew`); a
        table's ``feature_skew_columns`` says which columns it changed
        (``skewed``) and which it left alone (``left_alone``: name -> kind).

    Raises
    ------
    PartitionError
        Besides the partitioners' own: bad feature-skew settings (naming the
        key), or inputs needed but not given.
    """
    partitioner = make_partitioner(method, **settings)
    # natural client keys (a table's client column, an image mapping or folder
    # level), of every sample the prepared data holds; None for other methods
    all_groups = partitioner.sample_groups(samples)
    mode = dedupe_mode(dedupe, table=table)
    samples, rows, dropped = _drop_repeats(samples, mode)
    ids = samples["sample_id"].to_numpy(dtype=str)
    labels = samples["label"].to_numpy(dtype=np.int64)
    train_pos, test_pos = _hold_out(
        samples,
        labels,
        seed=seed,
        test_fraction=test_fraction,
        n_clients=n_clients,
        mode=mode,
        table=table,
    )
    groups = None if all_groups is None else all_groups[rows][train_pos]
    if feature_names is None and spec is not None:
        feature_names = spec.feature_columns
    skew_kind = str(settings.get("feature_skew") or "none")
    extra = _partition_inputs(
        partitioner,
        method=method,
        skew_kind=skew_kind,
        features=features,
        spec=spec,
        pool=rows[train_pos],
        feature_names=feature_names,
    )
    parts = partitioner.partition(
        labels[train_pos],
        n_clients,
        rng_for(seed, "partition"),
        groups=groups,
        **extra,
    )
    check_partition(
        parts,
        len(train_pos),
        min_samples=int(settings["min_samples"]),
        labels=labels[train_pos],
        min_classes=int(settings["min_classes"]),
    )
    manifest = build_manifest(
        sample_ids=ids[train_pos],
        labels=labels[train_pos],
        client_indices=parts,
        heldout_ids=ids[test_pos],
        local_test_fraction=local_test_fraction,
        rng=rng_for(seed, "local_split"),
        classes=list(classes),
        method=method,
        params=_recorded_params(
            partitioner,
            settings,
            seed=seed,
            test_fraction=test_fraction,
            local_test_fraction=local_test_fraction,
        ),
    )
    manifest["dropped_duplicates"] = sorted(dropped)
    if mode != "content":  # content: what every manifest did before the modes
        manifest["dedupe"] = mode
    if groups is not None:
        manifest["client_keys"] = sorted({str(g) for g in groups})
    if skew_kind != "none":
        assert features is not None and spec is not None
        _add_feature_skew(
            manifest,
            skew_kind,
            settings,
            seed=seed,
            pool=(features, rows[train_pos], spec),
            feature_names=feature_names,
            column_types=column_types,
        )
    return manifest


def partition_prepared(prepared: Path, **settings: Any) -> dict[str, Any]:
    """:func:`partition_table` of the prepared data set in ``prepared`` (its
    samples, features, schema and spec), with the ``settings`` the caller
    chooses (``classes``, ``seed``, ...: :meth:`Params.partition_arguments
    <fedpipe.config.params.Params.partition_arguments>`)."""
    from fedpipe.data.ingest import open_features, read_samples, read_schema

    schema = read_schema(prepared)
    return partition_table(
        read_samples(prepared),
        features=open_features(prepared),
        spec=DatasetSpec.from_schema(schema),
        feature_names=schema.get("feature_names"),
        column_types=schema.get("column_types"),
        table=schema.get("source") == "table",
        **settings,
    )


def _drop_repeats(
    samples: pd.DataFrame, mode: str
) -> tuple[pd.DataFrame, np.ndarray, list[str]]:
    """``samples`` without the repeats ``mode`` drops (``content``: a repeated
    content hash; ``row``: a repeated content hash and label; ``none``: none),
    the kept rows' positions in the prepared data and the dropped ids."""
    rows = np.arange(len(samples), dtype=np.int64)  # positions in the prepared data
    if mode == "none" or "content_hash" not in samples:
        return samples, rows, []
    key = samples["content_hash"].astype(str)
    if mode == "row":
        key = key + ":" + samples["label"].astype(str)
    repeated = key.duplicated(keep="first")
    dropped = samples.loc[repeated, "sample_id"].astype(str).tolist()
    kept = samples.loc[~repeated].reset_index(drop=True)
    return kept, rows[~repeated.to_numpy()], dropped


def _hold_out(
    samples: pd.DataFrame,
    labels: np.ndarray,
    *,
    seed: int,
    test_fraction: float,
    n_clients: int,
    mode: str,
    table: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """The training pool's and the held-out split's positions in ``samples``;
    refused when a sample is on both sides or the pool has fewer samples than
    clients."""
    train_pos, test_pos = split_heldout(
        len(samples),
        test_fraction=test_fraction,
        rng=rng_for(seed, "heldout"),
        labels=labels,
    )
    if mode != "content":
        _check_no_leakage(samples, train_pos, test_pos, table=table)
    if n_clients > len(train_pos):
        raise PartitionError(
            f"federation.clients={n_clients} exceeds the {len(train_pos)} training "
            f"samples; allowed: 1..{len(train_pos)}"
        )
    return train_pos, test_pos


def _partition_inputs(
    partitioner: Partitioner,
    *,
    method: str,
    skew_kind: str,
    features: np.ndarray | None,
    spec: DatasetSpec | None,
    pool: np.ndarray,
    feature_names: Sequence[str] | None,
) -> dict[str, Any]:
    """The keywords :meth:`Partitioner.partition` takes beyond the labels:
    ``values`` of the rows ``pool`` for a partitioner that reads the inputs."""
    if (skew_kind != "none" or partitioner.reads_inputs) and (
        features is None or spec is None
    ):
        raise PartitionError(
            f"partition.method={method} with partition.feature_skew={skew_kind} "
            "reads the inputs, but no prepared features were given"
        )
    if not partitioner.reads_inputs:
        return {}
    assert features is not None and spec is not None
    values = partitioner.sample_values(  # type: ignore[attr-defined]
        _row_chunks(features, pool, spec),
        input_shape=spec.input_shape,
        feature_names=feature_names,
    )
    return {"values": values}


def _recorded_params(
    partitioner: Partitioner,
    settings: Mapping[str, Any],
    *,
    seed: int,
    test_fraction: float,
    local_test_fraction: float,
) -> dict[str, Any]:
    """The manifest's ``params``: the partitioner's settings, its provenance and
    the split's seed and fractions."""
    # a setting whose default is null and that is left unset is not recorded
    # (a natural partition of a table records what it did before the image keys)
    recorded = {
        k: settings[k]
        for k in type(partitioner).settings
        if k in settings
        and (settings[k] is not None or getattr(k, "default", "") is not None)
    }
    recorded.update(partitioner.provenance())
    recorded.update(
        seed=seed,
        test_fraction=test_fraction,
        local_test_fraction=local_test_fraction,
        min_classes=settings["min_classes"],
    )
    return recorded


SKEW_KEYS = {
    "noise": ("noise_sigma",),
    "domains": ("domain_transforms", "domain_columns"),
}
"""The ``partition.*`` keys each kind of feature skew reads (recorded in the
manifest's ``params`` beside ``feature_skew``)."""


def _add_feature_skew(
    manifest: dict[str, Any],
    kind: str,
    settings: Mapping[str, Any],
    *,
    seed: int,
    pool: tuple[np.ndarray, np.ndarray, DatasetSpec],
    feature_names: Sequence[str] | None,
    column_types: Mapping[str, str] | None = None,
) -> None:
    """Record ``partition.feature_skew`` and every client's transform in
    ``manifest`` (in place)."""
    features, positions, spec = pool
    lo, hi = spec.value_range
    table_pool = None
    if kind == "domains" and len(spec.input_shape) != 3:
        table_pool = to_features(features, positions, spec).reshape(len(positions), -1)
    transforms = client_feature_transforms(
        kind,
        n_clients=len(manifest["clients"]),
        seed=seed,
        input_shape=spec.input_shape,
        value_range=(lo / spec.scale, hi / spec.scale),
        noise_sigma=settings.get("noise_sigma", 0.0),
        domain_transforms=settings.get("domain_transforms"),
        domain_columns=settings.get("domain_columns"),
        feature_names=feature_names,
        pool=table_pool,
        column_types=column_types,
    )
    assert transforms is not None
    params = dict(manifest["params"])
    params["feature_skew"] = kind
    for key in SKEW_KEYS.get(kind, ()):
        value = settings.get(key)
        params[key] = list(value) if isinstance(value, list | tuple) else value
    manifest["params"] = dict(sorted(params.items()))
    for entry, transform in zip(manifest["clients"], transforms, strict=True):
        entry["feature_transform"] = transform
    if len(spec.input_shape) != 3 and feature_names is not None:
        chosen = settings.get("domain_columns") if kind == "domains" else None
        manifest["feature_skew_columns"] = skewed_columns(
            feature_names, column_types, chosen
        )


def _row_chunks(
    features: np.ndarray, positions: np.ndarray, spec: DatasetSpec, size: int = 1024
) -> Iterator[np.ndarray]:
    """Rows ``positions`` of ``features``, scaled, ``size`` rows at a time."""
    for start in range(0, len(positions), size):
        yield to_features(features, positions[start : start + size], spec)


def _check_no_leakage(
    samples: pd.DataFrame,
    train_pos: np.ndarray,
    test_pos: np.ndarray,
    *,
    table: bool,
) -> None:
    """Refuse a split with the same sample on both sides (held-out leakage):
    the same content for images, the same id for a table's rows."""
    column = "sample_id" if table else "content_hash"
    if column not in samples:
        return
    keys = samples[column].to_numpy(dtype=str)
    shared = set(keys[train_pos]) & set(keys[test_pos])
    if not shared:
        return
    leaked = samples.loc[samples[column].astype(str).isin(shared), "sample_id"]
    examples = ", ".join(leaked.astype(str).head(6))
    what = "sample ids (data.id_column)" if table else "sample contents"
    raise PartitionError(
        f"{len(shared)} {what} appear in both the held-out test split and "
        f"the training data (e.g. {examples}): the test would measure memory, not "
        "generalisation; set data.dedupe: content to drop repeated contents"
    )

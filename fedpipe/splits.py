"""Each client's data: the held-out split, the partition table and the arrays.

:func:`partition_table` deals the prepared samples to clients (the ``partition``
stage's manifest); :func:`federated_data` turns a manifest into arrays.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.data import DatasetSpec, to_arrays
from fedpipe.partition import PartitionError, make_partitioner
from fedpipe.partition.manifest import build_manifest, check_partition, split_heldout
from fedpipe.seeds import rng_for


@dataclass(frozen=True)
class ClientData:
    """One client's local train and local test arrays."""

    client: int
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass(frozen=True)
class FederatedData:
    """The held-out global test set and every client's data, in client order."""

    spec: DatasetSpec
    x_test: np.ndarray
    y_test: np.ndarray
    clients: tuple[ClientData, ...]


def partition_table(
    samples: pd.DataFrame,
    *,
    classes: Sequence[int],
    seed: int,
    test_fraction: float,
    method: str,
    n_clients: int,
    local_test_fraction: float,
    dedupe: bool,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """Hold out a global test split, deal the rest to clients, split each locally.

    Parameters
    ----------
    samples : DataFrame
        ``samples.parquet`` of the prepared data (``sample_id``, ``label``,
        ``content_hash``, optional ``client_key``).
    dedupe : bool
        Drop samples whose content repeats an earlier sample's (``data.dedupe``);
        otherwise a duplicate on both sides of the held-out split is an error.
    settings : mapping
        The ``partition.*`` values (alpha, min_samples, min_classes, ...).

    Returns
    -------
    dict
        The manifest of :func:`fedpipe.partition.manifest.build_manifest`, plus
        ``dropped_duplicates`` (ids) and, for natural partitions, ``client_keys``.
    """
    dropped: list[str] = []
    if dedupe and "content_hash" in samples:
        repeated = samples["content_hash"].duplicated(keep="first")
        dropped = samples.loc[repeated, "sample_id"].astype(str).tolist()
        samples = samples.loc[~repeated].reset_index(drop=True)
    ids = samples["sample_id"].to_numpy(dtype=str)
    labels = samples["label"].to_numpy(dtype=np.int64)
    train_pos, test_pos = split_heldout(
        len(samples),
        test_fraction=test_fraction,
        rng=rng_for(seed, "heldout"),
        labels=labels,
    )
    if not dedupe and "content_hash" in samples:
        _check_no_leakage(samples, train_pos, test_pos)
    if n_clients > len(train_pos):
        raise PartitionError(
            f"federation.clients={n_clients} exceeds the {len(train_pos)} training "
            f"samples; allowed: 1..{len(train_pos)}"
        )
    groups = None
    if method == "natural" and "client_key" in samples:
        groups = samples["client_key"].to_numpy(dtype=str)[train_pos]
    partitioner = make_partitioner(method, **settings)
    parts = partitioner.partition(
        labels[train_pos], n_clients, rng_for(seed, "partition"), groups=groups
    )
    check_partition(
        parts,
        len(train_pos),
        min_samples=int(settings["min_samples"]),
        labels=labels[train_pos],
        min_classes=int(settings["min_classes"]),
    )
    recorded = {k: settings[k] for k in type(partitioner).settings if k in settings}
    recorded.update(
        seed=seed,
        test_fraction=test_fraction,
        local_test_fraction=local_test_fraction,
        min_classes=settings["min_classes"],
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
        params=recorded,
    )
    manifest["dropped_duplicates"] = sorted(dropped)
    if groups is not None:
        manifest["client_keys"] = sorted({str(g) for g in groups})
    return manifest


def _check_no_leakage(
    samples: pd.DataFrame, train_pos: np.ndarray, test_pos: np.ndarray
) -> None:
    """Refuse a split with the same content on both sides (held-out leakage)."""
    hashes = samples["content_hash"].to_numpy(dtype=str)
    shared = set(hashes[train_pos]) & set(hashes[test_pos])
    if shared:
        leaked = samples.loc[samples["content_hash"].isin(shared), "sample_id"]
        examples = ", ".join(leaked.astype(str).head(6))
        raise PartitionError(
            f"{len(shared)} sample contents appear in both the held-out test split and "
            f"the training data (e.g. {examples}): the test would measure memory, not "
            "generalisation; set data.dedupe: true to drop repeated contents"
        )


def federated_data(
    features: np.ndarray,
    samples: pd.DataFrame,
    manifest: Mapping[str, Any],
    spec: DatasetSpec,
) -> FederatedData:
    """Arrays for the held-out test set and each client, as the manifest assigns."""
    position = {sid: i for i, sid in enumerate(samples["sample_id"].astype(str))}
    labels = samples["label"].to_numpy(dtype=np.int64)

    def arrays(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return to_arrays(features, labels, [position[i] for i in ids], spec)

    x_test, y_test = arrays(manifest["heldout"])
    clients = []
    for entry in manifest["clients"]:
        x_tr, y_tr = arrays(entry["train"])
        x_te, y_te = arrays(entry["test"])
        clients.append(ClientData(entry["client"], x_tr, y_tr, x_te, y_te))
    return FederatedData(spec, x_test, y_test, tuple(clients))

"""One federation round's pure parts: data per client, sampling, results, records.

Nothing here trains (see :mod:`fedpipe.training`) or orchestrates (see ``flows/``);
these are the typed values a round passes between its steps, and the functions that
turn them into the round's versioned outputs.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.data import DatasetSpec, to_arrays
from fedpipe.metrics import METRIC_NAMES, weighted_mean
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


def sample_clients(
    *, n_clients: int, per_round: int, seed: int, round_: int
) -> list[int]:
    """The clients that train in ``round_``: seeded per round, sorted by id."""
    if per_round >= n_clients:
        return list(range(n_clients))
    rng = rng_for(seed, "sample", round_)
    return sorted(int(c) for c in rng.choice(n_clients, size=per_round, replace=False))


@dataclass(frozen=True)
class RoundRecord:
    """Everything a round reports; written as the round's metrics outputs.

    Attributes
    ----------
    global_test : dict
        The new global model on the held-out test set.
    global_clients : list of dict
        The new global model on each client's local test split (all clients).
    local : dict
        Client id -> its locally trained model on its own local test split
        (selected clients only).
    personalized : list of dict, optional
        Each client's personalized model on its own local test split (all
        clients), when personalization is on.
    """

    round: int
    selected: list[int]
    n_test: list[int]
    global_test: dict[str, float]
    global_clients: list[dict[str, float]]
    local: dict[int, dict[str, float]]
    aggregation_weight_sum: float
    personalized: list[dict[str, float]] | None = None

    def global_clients_mean(self) -> dict[str, float]:
        """Global model on client test splits, mean weighted by test size."""
        return weighted_mean(self.global_clients, self.n_test)

    def global_clients_std(self) -> dict[str, float]:
        """Standard deviation of the global model's metrics across clients."""
        return _std(self.global_clients)

    def personalized_mean(self) -> dict[str, float]:
        """Personalized models on their own test splits, weighted by test size."""
        return weighted_mean(self.personalized or [], self.n_test)

    def personalized_std(self) -> dict[str, float]:
        """Standard deviation of personalized-model metrics across clients."""
        return _std(self.personalized or [])

    def local_mean(self) -> dict[str, float]:
        """Local models on their own test splits, weighted by test size."""
        rows = [self.local[c] for c in self.selected]
        return weighted_mean(rows, [self.n_test[c] for c in self.selected])

    def local_std(self) -> dict[str, float]:
        """Standard deviation of local-model metrics across selected clients."""
        return _std([self.local[c] for c in self.selected])

    @functools.cached_property
    def _summary(self) -> dict[str, Any]:
        return self._build_summary()

    def summary(self) -> dict[str, Any]:
        """The round's metrics file: global test, client means, bookkeeping
        (computed once; a copy each call)."""
        return copy.deepcopy(self._summary)

    def _build_summary(self) -> dict[str, Any]:
        out = {
            "round": self.round,
            "clients_selected": self.selected,
            "aggregation_weight_sum": self.aggregation_weight_sum,
            "global": _rounded(self.global_test),
            "global_on_clients": _rounded(self.global_clients_mean()),
            "global_on_clients_std": _rounded(self.global_clients_std()),
            "local": _rounded(self.local_mean()),
            "local_std": _rounded(self.local_std()),
        }
        if self.personalized is not None:
            out["personalized"] = _rounded(self.personalized_mean())
            out["personalized_std"] = _rounded(self.personalized_std())
        return out

    def client_table(self) -> pd.DataFrame:
        """One row per client: local-model and global-model metrics side by side."""
        rows = []
        for c, global_row in enumerate(self.global_clients):
            local = self.local.get(c, {m: float("nan") for m in METRIC_NAMES})
            row: dict[str, Any] = {
                "client": c,
                "selected": c in self.local,
                "n_test": self.n_test[c],
            }
            row.update({f"local_{m}": local[m] for m in METRIC_NAMES})
            row.update({f"global_{m}": global_row[m] for m in METRIC_NAMES})
            if self.personalized is not None:
                own = self.personalized[c]
                row.update({f"personalized_{m}": own[m] for m in METRIC_NAMES})
            rows.append(row)
        return pd.DataFrame(rows)


def _std(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per-metric standard deviation across rows (NaN values ignored)."""
    if not rows:
        return {m: float("nan") for m in METRIC_NAMES}
    return {m: float(np.nanstd([r[m] for r in rows])) for m in METRIC_NAMES}


def _rounded(metrics: Mapping[str, float]) -> dict[str, float | None]:
    return {
        k: (None if np.isnan(v) else round(float(v), 6)) for k, v in metrics.items()
    }


def write_json(path: Path, payload: Any) -> None:
    """Write JSON deterministically (sorted keys, fixed indent), atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """Read a JSON file written by :func:`write_json`."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: not found; run the stage that writes it first"
        )
    return json.loads(path.read_text())


def preflight(params: Any) -> None:
    """Checks that need no work: stop before anything runs.

    Raises
    ------
    ParamsError
        Naming the param key: a data path that does not exist, or (for the
        built-in data, whose size is known) more clients than training samples.
    """
    from fedpipe.config import ParamsError
    from fedpipe.data import MNIST5K

    data = params.data
    if data.source != "mnist5k":
        path = Path(data.path)
        if not path.exists():
            raise ParamsError(f"params.yaml: data.path={data.path!r} does not exist")
        if data.source == "images" and not path.is_dir():
            raise ParamsError(
                f"params.yaml: data.path={data.path!r} must be a folder with one "
                "sub-folder per class for data.source=images"
            )
        if data.source == "table" and not path.is_file():
            raise ParamsError(
                f"params.yaml: data.path={data.path!r} must be a CSV or Parquet file "
                "for data.source=table"
            )
        return
    n = MNIST5K.n_samples
    n_test = min(max(math.floor(data.test_fraction * n + 0.5), 1), n - 1)
    n_train = n - n_test
    clients = params.federation.clients
    need = clients * params.partition.min_samples
    if clients > n_train:
        raise ParamsError(
            f"params.yaml: federation.clients={clients} exceeds the {n_train} training "
            f"samples of {MNIST5K.name}; allowed: 1..{n_train}"
        )
    if need > n_train:
        raise ParamsError(
            f"params.yaml: partition.min_samples={params.partition.min_samples} x "
            f"federation.clients={clients} = {need} exceeds the {n_train} training "
            f"samples; allowed: partition.min_samples <= {n_train // clients}"
        )

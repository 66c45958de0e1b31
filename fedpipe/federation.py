"""One federation round's pure parts: data per client, sampling, results, records.

Nothing here trains (see :mod:`fedpipe.training`) or orchestrates (see ``flows/``);
these are the typed values a round passes between its steps, and the functions that
turn them into the round's versioned outputs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedpipe.data import DatasetSpec, to_arrays
from fedpipe.metrics import METRIC_NAMES, weighted_mean
from fedpipe.partition import make_partitioner
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
    df: pd.DataFrame,
    *,
    classes: Sequence[int],
    seed: int,
    test_fraction: float,
    method: str,
    alpha: float,
    min_samples: int,
    n_clients: int,
    local_test_fraction: float,
) -> dict[str, Any]:
    """Hold out a global test split, deal the rest to clients, split each locally.

    Returns the partition manifest (see
    :func:`fedpipe.partition.manifest.build_manifest`).
    """
    ids = df["sample_id"].to_numpy(dtype=str)
    labels = df["label"].to_numpy(dtype=np.int64)
    train_pos, test_pos = split_heldout(
        len(df),
        test_fraction=test_fraction,
        rng=rng_for(seed, "heldout"),
        labels=labels,
    )
    if n_clients > len(train_pos):
        raise ValueError(
            f"federation.clients={n_clients} exceeds the {len(train_pos)} training "
            f"samples; allowed: 1..{len(train_pos)}"
        )
    partitioner = make_partitioner(method, alpha=alpha, min_samples=min_samples)
    parts = partitioner.partition(
        labels[train_pos], n_clients, rng_for(seed, "partition")
    )
    check_partition(parts, len(train_pos), min_samples=min_samples)
    params = {
        "alpha": alpha,
        "min_samples": min_samples,
        "seed": seed,
        "test_fraction": test_fraction,
        "local_test_fraction": local_test_fraction,
    }
    if method != "dirichlet":
        params.pop("alpha")
    return build_manifest(
        sample_ids=ids[train_pos],
        labels=labels[train_pos],
        client_indices=parts,
        heldout_ids=ids[test_pos],
        local_test_fraction=local_test_fraction,
        rng=rng_for(seed, "local_split"),
        classes=list(classes),
        method=method,
        params=params,
    )


def federated_data(
    df: pd.DataFrame, manifest: Mapping[str, Any], spec: DatasetSpec
) -> FederatedData:
    """Arrays for the held-out test set and each client, as the manifest assigns."""
    x_test, y_test = to_arrays(df, spec, manifest["heldout"])
    clients = []
    for entry in manifest["clients"]:
        x_tr, y_tr = to_arrays(df, spec, entry["train"])
        x_te, y_te = to_arrays(df, spec, entry["test"])
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
class ClientResult:
    """A selected client's outcome: trained weights and its local model's metrics."""

    client: int
    n_train: int
    n_test: int
    weights: list[np.ndarray] = field(repr=False)
    local: dict[str, float]


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
    """

    round: int
    selected: list[int]
    n_test: list[int]
    global_test: dict[str, float]
    global_clients: list[dict[str, float]]
    local: dict[int, dict[str, float]]
    aggregation_weight_sum: float

    def global_clients_mean(self) -> dict[str, float]:
        """Global model on client test splits, mean weighted by test size."""
        return weighted_mean(self.global_clients, self.n_test)

    def local_mean(self) -> dict[str, float]:
        """Local models on their own test splits, weighted by test size."""
        rows = [self.local[c] for c in self.selected]
        return weighted_mean(rows, [self.n_test[c] for c in self.selected])

    def local_std(self) -> dict[str, float]:
        """Standard deviation of local-model metrics across selected clients."""
        return {
            m: float(np.nanstd([self.local[c][m] for c in self.selected]))
            for m in METRIC_NAMES
        }

    def summary(self) -> dict[str, Any]:
        """The round's metrics file: global test, client means, bookkeeping."""
        return {
            "round": self.round,
            "clients_selected": self.selected,
            "aggregation_weight_sum": self.aggregation_weight_sum,
            "global": _rounded(self.global_test),
            "global_on_clients": _rounded(self.global_clients_mean()),
            "local": _rounded(self.local_mean()),
            "local_std": _rounded(self.local_std()),
        }

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
            rows.append(row)
        return pd.DataFrame(rows)


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
    """Checks that need the data's size but no work: stop before anything runs.

    Raises
    ------
    ParamsError
        Naming the param key, e.g. more clients than training samples.
    """
    from fedpipe.config import ParamsError
    from fedpipe.data import spec_for

    try:
        spec = spec_for(params.data.source)
    except ValueError as exc:
        raise ParamsError(f"params.yaml: {exc}") from None
    # the held-out size exactly as split_heldout computes it (half rounds up)
    n_test = math.floor(params.data.test_fraction * spec.n_samples + 0.5)
    n_train = spec.n_samples - min(max(n_test, 1), spec.n_samples - 1)
    clients = params.federation.clients
    need = clients * params.partition.min_samples
    if clients > n_train:
        raise ParamsError(
            f"params.yaml: federation.clients={clients} exceeds the {n_train} training "
            f"samples of {spec.name}; allowed: 1..{n_train}"
        )
    if need > n_train:
        raise ParamsError(
            f"params.yaml: partition.min_samples={params.partition.min_samples} x "
            f"federation.clients={clients} = {need} exceeds the {n_train} training "
            f"samples; allowed: partition.min_samples <= {n_train // clients}"
        )

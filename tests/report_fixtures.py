"""A synthetic finished run on disk, in the formats the pipeline writes.

The per-round metrics follow ``metrics/rounds/round-K.json`` as the round stage
writes it; the health records follow the contract for
``metrics/health/round-K.json`` (briefs/health-contract.md); the partition report
is what ``tasks.data.partition`` writes (``class_counts.csv``, ``skew.json``) next
to the manifest; ``dvc.lock`` has the shape DVC 3 writes. Values are made up but
plausible, and seeded.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedpipe.core.jsonio import write_json
from fedpipe.model.metrics import METRIC_NAMES
from fedpipe.observe.doctor import codes

LAYERS = (("dense", "dense"), ("batch_normalization", "norm"), ("dense_1", "dense"))
FINDINGS = [
    {
        "code": codes.LOSS_RISING_ACCURACY_HOLDS,
        "severity": "warning",
        "title": "Global loss rises while accuracy holds",
        "evidence": [
            "global loss 0.41 -> 0.93 over rounds 2-4",
            "accuracy 0.90 -> 0.91",
        ],
        "fix": "lower train.lr (e.g. 0.01)",
        "rounds": [2, 3, 4],
    },
    {
        "code": "nonfinite-update",  # no doctor code: the report shows any code
        "severity": "error",
        "title": "Client 1 sent <NaN> weights",
        "evidence": ["round 3: client 1 has 12 non-finite values"],
        "fix": "check client 1's data",
        "rounds": [3],
    },
]


def _metrics(rng: np.random.Generator, level: float) -> dict[str, float]:
    return {
        "loss": round(float(2.0 * (1 - level) + rng.uniform(0, 0.05)), 6),
        "accuracy": round(float(level), 6),
        "precision": round(float(level - 0.01), 6),
        "recall": round(float(level - 0.02), 6),
        "auc": round(float(min(1.0, level + 0.05)), 6),
    }


def round_summary(k: int, *, clients: list[int], rng: np.random.Generator) -> dict:
    """A ``metrics/rounds/round-K.json`` payload."""
    level = 0.3 + 0.6 * (1 - 0.6**k)
    return {
        "round": k,
        "clients_selected": clients,
        "aggregation_weight_sum": 1.0,
        "global": _metrics(rng, level),
        "global_on_clients": _metrics(rng, level + 0.02),
        "local": _metrics(rng, level - 0.03),
        "local_std": {
            name: round(float(rng.uniform(0.01, 0.06)), 6) for name in METRIC_NAMES
        },
        "wire": {  # a 10,000-weight model sent as float32 both ways
            "uplink": "none",
            "clients_sent": len(clients),
            "uplink_bytes": 40_000 * len(clients),
            "downlink_bytes": 40_000 * len(clients),
            "uplink_bytes_per_client": 40_000.0,
            "downlink_bytes_per_client": 40_000.0,
            "uplink_ratio": 1.0,
        },
    }


def health_record(k: int, *, clients: list[int], rng: np.random.Generator) -> dict:
    """A ``metrics/health/round-K.json`` payload following the contract."""
    weights = {str(c): round(1 / len(clients), 6) for c in clients}
    return {
        "round": k,
        "clients": [
            {
                "client": c,
                "n_train": 100 + 10 * c,
                "update_norm": round(float(rng.uniform(0.5, 2.0) / k), 6),
                "cosine_to_mean": round(float(rng.uniform(0.6, 1.0)), 6),
                "nonfinite": 0,
                "train_loss": round(float(rng.uniform(0.2, 1.0)), 6),
                "aggregation_weight": weights[str(c)],
            }
            for c in clients
        ],
        "layers": [
            {
                "index": i,
                "name": name,
                "kind": kind,
                # the norm layer's trainable weights do not move in round 1: undefined
                "divergence": None
                if (kind == "norm" and k == 1)
                else round(float(rng.uniform(0.05, 0.9)), 6),
                "update_norm_mean": round(float(rng.uniform(0.1, 1.0)), 6),
                "weight_norm": round(float(rng.uniform(2, 5)), 6),
                "weight_norm_before": round(float(rng.uniform(2, 5)), 6),
                "stats_divergence": round(float(rng.uniform(0, 1)), 6)
                if kind == "norm"
                else None,
            }
            for i, (name, kind) in enumerate(LAYERS)
        ],
        "aggregation": {
            "weight_sum": 1.0,
            "fit_residual": 0.0,
            "nominal_weights": weights,
        },
        "global": {
            "weight_norm": 12.3,
            "weight_norm_before": 12.0,
            "nonfinite": 0,
            "mean_confidence": 0.9,
            "ece": 0.02,
            "loss": 0.31,
            "accuracy": 0.91,
            "loss_top_share": 0.4,
        },
        "gap": {"loss": 0.2, "accuracy": -0.03},
        "seconds": 0.012,
    }


def manifest(n_clients: int, n_classes: int, rng: np.random.Generator) -> dict:
    """A small ``data/partition/manifest.json`` payload."""
    clients = []
    for c in range(n_clients):
        train = rng.integers(0, 30, size=n_classes).tolist()
        test = rng.integers(0, 8, size=n_classes).tolist()
        clients.append(
            {
                "client": c,
                "train": [f"s-{c}-{i}" for i in range(sum(train))],
                "test": [f"t-{c}-{i}" for i in range(sum(test))],
                "train_class_counts": train,
                "test_class_counts": test,
            }
        )
    return {
        "method": "dirichlet",
        "params": {"alpha": 0.3},
        "classes": list(range(n_classes)),
        "n_clients": n_clients,
        "heldout": ["h-0", "h-1"],
        "clients": clients,
        "dropped_duplicates": [],
    }


def dvc_lock(rounds: int, root: Path | None = None) -> dict[str, Any]:
    """A ``dvc.lock`` in DVC 3's shape, with made-up hashes; with ``root``, each
    round's records under it are recorded with their true md5 (as DVC does:
    the views read only records ``dvc.lock`` holds with these bytes)."""
    import hashlib

    def out(path: str, seed: int, **extra: Any) -> dict[str, Any]:
        return {
            "path": path,
            "hash": "md5",
            "md5": f"{seed:032x}",
            "size": 1000 + seed,
            **extra,
        }

    stages: dict[str, Any] = {
        "ingest": {
            "cmd": "fedpipe stage ingest",
            "outs": [out("data/prepared", 1, nfiles=2)],
        },
        "partition": {
            "cmd": "fedpipe stage partition",
            "outs": [
                out("data/partition/manifest.json", 2),
                out("reports/partition", 3),
            ],
        },
    }
    for k in range(0, rounds + 1):
        name = "init" if k == 0 else f"round@{k}"
        stages[name] = {
            "cmd": f"fedpipe stage {name.replace('@', ' ')}",
            "outs": [
                out(f"models/round-{k}/weights.npz", 100 + k),
                out(f"models/round-{k}/server_state.npz", 200 + k),
            ],
        }
        records = [f"metrics/rounds/round-{k}.json", f"metrics/health/round-{k}.json"]
        for path in records if root is not None and k else []:
            if (root / path).is_file():
                md5 = hashlib.md5((root / path).read_bytes()).hexdigest()
                stages[name]["outs"].append({"path": path, "hash": "md5", "md5": md5})
    return {"schema": "2.0", "stages": stages}


def relock(root: Path, rounds: int = 4) -> None:
    """Write ``root``'s ``dvc.lock`` again for the round records now there (a
    test that edits a record as a run would have written it)."""
    (root / "dvc.lock").write_text(
        yaml.safe_dump(dvc_lock(rounds, root), sort_keys=False)
    )


PARAMS = {
    "seed": 7,
    "data": {"source": "mnist5k", "test_fraction": 0.2},
    "partition": {"method": "dirichlet", "alpha": 0.3},
    "federation": {"clients": 4, "rounds": 4},
    "train": {"epochs": 1, "lr": 0.05},
    "strategy": {"name": "fedavg"},
    "round_chain": {"1": 0, "2": 1, "3": 2, "4": 3},
}


def client_stats(n_clients: int, rng: np.random.Generator) -> dict:
    """The preprocess stage's readable statistics of a 3-column table."""
    from fedpipe.data.preprocess.summary import summarize

    rows = [rng.normal(i * 0.3, 1.0, size=(40, 3)) for i in range(n_clients)]
    return summarize(
        rows,
        [rng.integers(0, 2, size=40) for _ in rows],
        columns=["age", "income", "score"],
        class_names=["no", "yes"],
        kind="table",
        min_count=5,
        bins=64,
    )


def write_run(
    root: Path,
    *,
    rounds: int = 4,
    n_clients: int = 4,
    n_classes: int = 5,
    git: bool = False,
    seed: int = 0,
) -> Path:
    """Write a finished synthetic run under ``root``; return ``root``."""
    import pandas as pd

    from fedpipe.data.partition.diagnostics import (
        class_count_table,
        shown_counts,
        skew_summary,
    )

    rng = np.random.default_rng(seed)
    for k in range(1, rounds + 1):
        selected = sorted(
            rng.choice(n_clients, size=max(2, n_clients - 1), replace=False).tolist()
        )
        write_json(
            root / f"metrics/rounds/round-{k}.json",
            round_summary(k, clients=selected, rng=rng),
        )
        write_json(
            root / f"metrics/health/round-{k}.json",
            health_record(k, clients=selected, rng=rng),
        )
    part = manifest(n_clients, n_classes, rng)
    write_json(root / "data/partition/manifest.json", part)
    (root / "reports/partition").mkdir(parents=True, exist_ok=True)
    shown_counts(class_count_table(part), 5).to_csv(
        root / "reports/partition/class_counts.csv", index=False
    )
    write_json(root / "reports/partition/skew.json", skew_summary(part))
    write_json(root / "data/preprocess/stats.json", client_stats(n_clients, rng))
    # what the validate stage writes (reports/validation/summary.json)
    write_json(
        root / "reports/validation/summary.json",
        {"success": True, "n_rows": 400, "n_expectations": 12, "failures": [],
         "warnings": []},
    )  # fmt: skip
    from fedpipe.observe.history import flatten

    rows = [
        flatten(round_summary(k, clients=[0, 1], rng=rng)) for k in range(1, rounds + 1)
    ]
    pd.DataFrame(rows).to_csv(root / "metrics/history.csv", index=False)
    params = {**PARAMS, "federation": {**PARAMS["federation"], "rounds": rounds}}
    params["round_chain"] = {str(k): k - 1 for k in range(1, rounds + 1)}
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    relock(root, rounds)
    if git:
        env_args = [
            "-c",
            "user.name=fedpipe tests",
            "-c",
            "user.email=tests@fedpipe.invalid",
        ]
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
        subprocess.run(["git", "add", "-A"], cwd=root, check=True)
        subprocess.run(["git", *env_args, "commit", "-qm", "run"], cwd=root, check=True)
    return root

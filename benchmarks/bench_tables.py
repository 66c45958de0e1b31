"""A public table as it comes: raw columns vs federated preprocessing vs central.

sklearn's breast-cancer table (569 rows, 30 numeric columns on scales from about
0.05 to 4,254, a two-class label written as names) goes to CSV in a fresh
project (``fedpipe init``, a private Prefect server), which runs as the issue
did: ``mlp``, 5 clients Dirichlet 0.5, FedPer, Adam 0.001, 15 rounds. One
project, one run per setting (the data stages stay cached; ``preprocess``,
``init`` and the rounds run again):

* ``none``: ``preprocess.numeric: none``, the raw columns;
* ``standard``: the default, fitted from the clients' merged statistics;
* ``local``: ``preprocess.fit: local``, each client scaled by its own statistics;
* ``central``: the same model, initial weights, optimizer and epochs (rounds x
  train.epochs) trained on the pooled training rows, standardized with the
  pooled rows' mean and std computed centrally (numpy, not fedpipe's fit);
  evaluated on the same held-out rows.

Then the same table with about 5 % of its feature cells blanked (seeded) runs
with ``preprocess.missing: mean`` (federated ``standard``), beside its central
counterpart (mean of the present values, an indicator column per column with
missing values, standardized).

Prints the final global held-out accuracy of each. Run from the repository root:

    python benchmarks/bench_tables.py [--rounds 15] [--missing 0.05] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cache import (  # noqa: E402
    FEDPIPE,
    QUIET,
    _run,
    _set_params,
    private_prefect_server,
)

SETTINGS: dict[str, dict[str, Any]] = {
    "data": {"source": "table", "path": "data/table.csv", "label_column": "label"},
    "model": {"name": "mlp"},
    "federation": {"clients": 5, "fraction_fit": 1.0, "min_clients": 2},
    "partition": {"method": "dirichlet", "alpha": 0.5, "min_samples": 10},
    "personalization": {"method": "fedper"},
    "train": {"optimizer": "adam", "lr": 0.001},
}

VARIANTS: dict[str, dict[str, Any]] = {
    "none": {"numeric": "none", "fit": "federated"},
    "standard": {"numeric": "standard", "fit": "federated"},
    "local": {"numeric": "standard", "fit": "local"},
}


def breast_cancer(missing: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """sklearn's breast-cancer table, label as class names; ``missing`` of the
    feature cells blanked (seeded)."""
    from sklearn.datasets import load_breast_cancer

    raw = load_breast_cancer()
    df = pd.DataFrame(raw.data, columns=list(raw.feature_names))
    if missing > 0:
        rng = np.random.default_rng(seed)
        df = df.mask(rng.random(df.shape) < missing)
    df["label"] = [str(raw.target_names[t]) for t in raw.target]
    return df


def new_project(
    path: Path, table: pd.DataFrame, env: Mapping[str, str], rounds: int
) -> Path:
    """A fedpipe project with ``table`` as its data and the issue's settings."""
    remote = str(path) + "-remote"
    _run([FEDPIPE, "init", str(path), "--remote", remote], path.parent, env)
    (path / "data").mkdir(exist_ok=True)
    table.to_csv(path / "data/table.csv", index=False)
    settings = {k: dict(v) for k, v in SETTINGS.items()}
    settings["federation"]["rounds"] = rounds
    _set_params(path, settings)
    return path


def run_variant(
    project: Path, env: Mapping[str, str], preprocess: Mapping[str, Any]
) -> float:
    """``fedpipe run`` with ``preprocess.*`` set; the final global accuracy."""
    from fedpipe.core.jsonio import read_json

    _set_params(project, {"preprocess": dict(preprocess)})
    _run([FEDPIPE, "run", "--no-server-start", "--no-report", "-q"], project, env)
    return float(read_json(project / "metrics/summary.json")["global"]["accuracy"])


def central_accuracy(project: Path) -> float:
    """The run's model and initial weights trained on the pooled training rows,
    preprocessed centrally (numpy on the pooled rows: mean and std of the present
    values, missing values filled with the mean plus an indicator column)."""
    from fedpipe.config.params import load_params
    from fedpipe.core.jsonio import read_json
    from fedpipe.core.weights import load_weights
    from fedpipe.data.ingest import open_features, read_samples
    from fedpipe.data.sources import prepared_spec
    from fedpipe.data.splits import ClientData, FederatedData
    from fedpipe.model.centralized import train_centralized
    from fedpipe.model.training import ModelRunner, model_spec_for

    params = load_params(project / "params.yaml")
    prepared = project / "data/prepared"
    manifest = read_json(project / "data/partition/manifest.json")
    position = {s: i for i, s in enumerate(read_samples(prepared)["sample_id"])}
    features = np.asarray(open_features(prepared), dtype=np.float64)
    labels = read_samples(prepared)["label"].to_numpy()

    def rows(ids: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        idx = np.array([position[i] for i in ids], dtype=np.int64)
        return features[idx], labels[idx].astype(np.int32)

    x_train, y_train = rows([i for c in manifest["clients"] for i in c["train"]])
    x_test, y_test = rows(manifest["heldout"])
    mean, std = np.nanmean(x_train, axis=0), np.nanstd(x_train, axis=0)
    std = np.where(std > 0, std, 1.0)
    flagged = np.flatnonzero(np.isnan(x_train).any(axis=0))

    def central(x: np.ndarray) -> np.ndarray:
        missing = np.isnan(x)
        scaled = (np.where(missing, mean, x) - mean) / std
        return np.concatenate([scaled, missing[:, flagged]], axis=1).astype(np.float32)

    spec = prepared_spec(prepared)
    x_tr, x_te = central(x_train), central(x_test)
    spec = type(spec)(**{**spec.__dict__, "input_shape": (x_tr.shape[1],)})
    empty = np.zeros((0, x_tr.shape[1]), np.float32)
    data = FederatedData(
        spec,
        x_te,
        y_test,
        [ClientData(0, x_tr, y_train, empty, np.zeros(0, np.int32))],
    )
    runner = ModelRunner(model_spec_for(params, spec))
    _, record = train_centralized(
        runner,
        load_weights(project / "models/round-0/weights.npz"),
        data,
        epochs=params.federation.rounds * params.train.epochs,
        batch_size=params.train.batch_size,
        seed=params.seed,
    )
    return float(record["global"]["accuracy"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--missing", type=float, default=0.05)
    parser.add_argument("--out", type=Path, help="keep the projects here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-tables-") as tmp:
        root = args.out or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        home = root / "prefect-home"
        home.mkdir(exist_ok=True)
        with private_prefect_server(home) as api:
            env = {
                **os.environ,
                **QUIET,
                "PREFECT_API_URL": api,
                "PREFECT_HOME": str(home),
                "FEDPIPE_WARM": "0",
            }
            results: dict[str, float] = {}
            project = new_project(
                root / "breast-cancer", breast_cancer(), env, args.rounds
            )
            for name, preprocess in VARIANTS.items():
                results[name] = run_variant(project, env, preprocess)
                print(f"{name:<9} global acc {results[name]:.4f}", flush=True)
            results["central"] = central_accuracy(project)
            print(f"central   global acc {results['central']:.4f}", flush=True)
            gappy = new_project(
                root / "breast-cancer-missing",
                breast_cancer(args.missing, seed=0),
                env,
                args.rounds,
            )
            missing = {"numeric": "standard", "fit": "federated", "missing": "mean"}
            results["missing"] = run_variant(gappy, env, missing)
            results["missing-central"] = central_accuracy(gappy)
    print()
    print(f"| {args.rounds} rounds, final global held-out accuracy | |")
    print("|---|---:|")
    for name, label in [
        ("none", "raw columns (`preprocess.numeric: none`)"),
        ("standard", "`standard`, federated fit (default)"),
        ("local", "`standard`, `fit: local`"),
        ("central", "central model, pooled rows standardized centrally"),
        ("missing", f"{args.missing:.0%} missing, `missing: mean`, federated"),
        ("missing-central", f"{args.missing:.0%} missing, central (mean + indicator)"),
    ]:
        print(f"| {label} | {results[name]:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

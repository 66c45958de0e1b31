"""FedAvg against FedNova when slow clients send partial work.

Partial stragglers (``federation.stragglers: partial``) send the steps they
finished, and FedAvg still weights them by their whole sample count: a client that
ran 3 steps pulls the global model a fraction of what a client that ran 30 does,
so the federation drifts toward the fast clients' data. FedNova (Wang et al.,
2020) divides each update by its client's local steps.

Each run is fedpipe's own loop (:func:`fedpipe.federation.loop.run_federation`:
:func:`fedpipe.federation.round.run_round` round after round) on the built-in
digits, from params as a ``params.yaml`` would hold them (label-skewed clients:
Dirichlet 0.3; a deadline of ``--deadline`` steps, a share of slow clients that
finish ``--slow-speed`` of it), the clients one after another in this process,
no Prefect or DVC. Printed: a Markdown table of the final
round's held-out accuracy and the global model's mean accuracy on the slow and on
the other clients' test splits, mean ± std over the seeds. Run from the
repository root:

    python scripts/fednova_stragglers.py [--rounds 10] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tiny_data import ingest_digits  # noqa: E402

from fedpipe.config.params import Params, parse_params, round_chain  # noqa: E402
from fedpipe.data.ingest import open_features  # noqa: E402
from fedpipe.data.partition.deal import partition_table  # noqa: E402
from fedpipe.data.splits import FederatedData, federated_data  # noqa: E402
from fedpipe.federation import build  # noqa: E402
from fedpipe.federation.failures import slow_set  # noqa: E402
from fedpipe.federation.loop import first_round, run_federation  # noqa: E402
from fedpipe.model.trainer import run_here  # noqa: E402
from fedpipe.model.training import ModelRunner  # noqa: E402


def params_for(strategy: str, seed: int, args: argparse.Namespace) -> Params:
    """The run's params, as ``params.yaml`` would hold them."""
    federation: dict[str, Any] = {"clients": args.clients, "rounds": args.rounds}
    if args.deadline:
        federation.update(
            round_deadline_steps=args.deadline,
            stragglers="partial",
            slow_clients=args.slow_share,
            slow_speed=args.slow_speed,
        )
    return parse_params(
        {
            "seed": seed,
            "round_chain": round_chain(args.rounds),
            "federation": federation,
            "partition": {"method": "dirichlet", "alpha": args.alpha},
            "train": {"epochs": args.epochs, "batch_size": 32, "lr": 0.05},
            "model": {"name": "mlp"},
            "strategy": {"name": strategy},
        }
    )


def digits_data(params: Params, root: Path) -> FederatedData:
    """The 5,000 built-in digits, ingested and partitioned as the data stages do."""
    prepared = root / "prepared"
    samples, spec = ingest_digits(prepared, source="digits")
    manifest = partition_table(
        samples,
        classes=list(range(10)),
        seed=params.seed,
        test_fraction=params.data.test_fraction,
        method=params.partition.method,
        n_clients=params.federation.clients,
        local_test_fraction=params.partition.local_test_fraction,
        dedupe=True,
        settings=params.partition.model_dump(exclude={"method", "local_test_fraction"}),
    )
    return federated_data(open_features(prepared), samples, manifest, spec)


def run(params: Params, data: FederatedData, slow: set[int]) -> dict[str, float]:
    """The federation's rounds; the last round's figures (``slow``: the clients
    reported apart, the same in every row)."""
    spec = build.model_spec(params, data.spec)
    runner = ModelRunner(spec)
    out = run_federation(
        first_round(params, spec=spec, data=data),
        rounds=params.federation.rounds,
        map_clients=run_here(runner),
        runner=runner,
    )
    on_clients = out.record.global_clients

    def mean_acc(clients: set[int]) -> float:
        n = {c: out.record.n_test[c] for c in clients}
        return sum(on_clients[c]["accuracy"] * n[c] for c in clients) / sum(n.values())

    return {
        "held-out": out.record.global_test["accuracy"],
        "slow clients": mean_acc(slow),
        "other clients": mean_acc(set(range(params.federation.clients)) - slow),
        "partial": float(len(out.record.partial)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--deadline", type=int, default=20)
    parser.add_argument("--slow-share", type=float, default=0.3)
    parser.add_argument("--slow-speed", type=float, default=0.1)
    args = parser.parse_args()
    rows = {
        "fedavg, no deadline": ("fedavg", 0),
        "fedavg, partial stragglers": ("fedavg", args.deadline),
        "fednova, partial stragglers": ("fednova", args.deadline),
    }
    results: dict[str, list[dict[str, float]]] = {label: [] for label in rows}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            data = None
            slow = set(slow_set(args.clients, args.slow_share, seed))
            for label, (strategy, deadline) in rows.items():
                row = argparse.Namespace(**{**vars(args), "deadline": deadline})
                params = params_for(strategy, seed, row)
                data = data or digits_data(params, Path(tmp))
                results[label].append(run(params, data, slow))
                print(f"seed {seed}, {label}: {results[label][-1]}", flush=True)
    columns = ["held-out", "slow clients", "other clients"]
    print()
    print("| run | " + " | ".join(f"{c} acc" for c in columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for label, runs in results.items():
        cells = []
        for c in columns:
            values = [r[c] for r in runs]
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.3f} ± {std:.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

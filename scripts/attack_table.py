"""Attacks x defenses: final global accuracy under 20% malicious clients.

Every attack of ``fedpipe.federation.attacks`` against FedAvg, median, trimmed mean,
Krum, Multi-Krum, Bulyan and norm clipping, on the default data (the 5,000 built-in
MNIST digits), IID and Dirichlet(0.5), beside the clean run of each defense. Each
cell is a whole federation through the library's loop
(:func:`fedpipe.federation.loop.run_federation` over
:func:`fedpipe.federation.round.run_round`, the function the round stage calls) with a
small model and few rounds; the table gives the final held-out accuracy, mean ± std
over seeds (the seed also draws the partition, the malicious clients and the
initial model). Cells run in ``-j`` worker processes. Writes Markdown and CSV.

Example (the table in docs/attacks.md, about 10 minutes on 2 busy cores)::

    python scripts/attack_table.py -j 2 --seeds 0 1 2 --partitions iid \\
        --out docs/attack_table
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ATTACKS = (
    "label_flip_targeted", "label_flip_all", "sign_flip", "scaling", "gaussian",
    "alie", "ipm",
)  # fmt: skip
DEFENSES = (
    "fedavg", "fedmedian", "fedtrimmedavg", "krum", "multikrum", "bulyan", "clipping",
)  # fmt: skip
PARTITIONS = {"iid": {"method": "iid"}, "dirichlet-0.5": {"method": "dirichlet"}}
CLEAN = "none"


@dataclass(frozen=True)
class Setup:
    """What every cell shares (the command line)."""

    clients: int
    rounds: int
    share: float
    model: str
    lr: float
    epochs: int
    batch_size: int


@dataclass(frozen=True)
class Cell:
    partition: str
    seed: int
    attack: str
    defense: str


_DATA: dict[tuple[str, int], object] = {}


def _data(partition: str, seed: int, clients: int):  # type: ignore[no-untyped-def]
    """The default data dealt to ``clients`` (one per worker process and key)."""
    key = (partition, seed)
    if key not in _DATA:
        import numpy as np

        from fedpipe.config.params import PartitionParams
        from fedpipe.data.ingest import (
            ingest_arrays,
            open_features,
            read_samples,
            read_schema,
        )
        from fedpipe.data.partition.deal import partition_table
        from fedpipe.data.sources import DatasetSpec, load_mnist5k
        from fedpipe.data.splits import federated_data

        table = load_mnist5k()
        x = table.filter(like="px").to_numpy(dtype=np.uint8).reshape(-1, 28, 28, 1)
        y = table["label"].to_numpy(dtype=np.int64)
        prepared = Path(tempfile.mkdtemp(prefix="attack-table-")) / "prepared"
        ingest_arrays(
            x, y, out_dir=prepared, source="mnist5k",
            class_names=[str(c) for c in range(10)], value_range=(0.0, 255.0),
            scale=255.0,
        )  # fmt: skip
        settings = PartitionParams(**PARTITIONS[partition])
        samples = read_samples(prepared)
        manifest = partition_table(
            samples,
            classes=list(range(10)),
            seed=seed,
            test_fraction=0.2,
            method=settings.method,
            n_clients=clients,
            local_test_fraction=settings.local_test_fraction,
            dedupe=True,
            settings=settings.model_dump(exclude={"method", "local_test_fraction"}),
        )
        spec = DatasetSpec.from_schema(read_schema(prepared))
        _DATA[key] = federated_data(open_features(prepared), samples, manifest, spec)
    return _DATA[key]


def run_cell(cell: Cell, setup: Setup) -> tuple[Cell, float, float]:
    """One federation: (cell, final held-out accuracy, seconds)."""
    from fedpipe.client import make_client
    from fedpipe.client.base import LocalTraining
    from fedpipe.federation.attacks import AttackPlan, choose_malicious, make_attack
    from fedpipe.federation.build import round_steps
    from fedpipe.federation.loop import run_federation
    from fedpipe.federation.round import ClientEvaluation, RoundInputs
    from fedpipe.model.trainer import run_here
    from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
    from fedpipe.strategy import make_strategy

    started = time.perf_counter()
    data = _data(cell.partition, cell.seed, setup.clients)
    spec = ModelSpec(
        name=setup.model, input_shape=data.spec.input_shape,  # type: ignore[attr-defined]
        n_classes=10, optimizer="sgd", lr=setup.lr,
    )  # fmt: skip
    runner = _runner(spec, ModelRunner)
    malicious = choose_malicious(
        n_clients=setup.clients, seed=cell.seed, share=setup.share
    )
    plan = (
        None
        if cell.attack == CLEAN
        else AttackPlan(make_attack(cell.attack), malicious, seed=cell.seed)
    )
    f = len(malicious)
    strategy = make_strategy(
        cell.defense, num_byzantine=f, total_clients=setup.clients, beta=0.2
    )
    weights = initial_weights(spec, cell.seed)
    out = run_federation(
        RoundInputs(
            round=1, seed=cell.seed, spec=spec, data=data,  # type: ignore[arg-type]
            global_weights=weights, server_state=strategy.init_state(weights),
            client_states={}, strategy=strategy, algorithm=make_client("sgd"),
            training=LocalTraining(setup.epochs, setup.batch_size, setup.lr),
            clients_per_round=setup.clients,
            evaluation=ClientEvaluation(clients="none"),
            steps=round_steps(attack=plan),
        ),
        rounds=setup.rounds, map_clients=run_here(runner), runner=runner,
    )  # fmt: skip
    accuracy = out.record.global_test["accuracy"]
    return cell, accuracy, time.perf_counter() - started


_RUNNERS: dict = {}


def _runner(spec, cls):  # type: ignore[no-untyped-def]
    """One compiled model per spec and process."""
    if spec not in _RUNNERS:
        _RUNNERS[spec] = cls(spec)
    return _RUNNERS[spec]


def _init_worker() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")


def run_cells(
    cells: Sequence[Cell], setup: Setup, jobs: int
) -> dict[Cell, tuple[float, float]]:
    """Every cell's (accuracy, seconds), in ``jobs`` processes (1: this one)."""
    if jobs <= 1:
        _init_worker()
        done = [run_cell(c, setup) for c in cells]
    else:
        with ProcessPoolExecutor(jobs, initializer=_init_worker) as pool:
            done = list(pool.map(run_cell, cells, [setup] * len(cells)))
    return {cell: (acc, sec) for cell, acc, sec in done}


def _stats(values: Sequence[float]) -> tuple[float, float]:
    import numpy as np

    return float(np.mean(values)), float(np.std(values))


def tables(
    results: dict[Cell, tuple[float, float]],
    *,
    partitions: Sequence[str],
    attacks: Sequence[str],
    defenses: Sequence[str],
    seeds: Sequence[int],
) -> tuple[str, list[dict[str, object]]]:
    """The Markdown tables (one per partition) and the CSV rows."""
    lines, rows = [], []
    for p in partitions:
        lines += [f"**{p}**", "", "| attack | " + " | ".join(defenses) + " |"]
        lines.append("|---|" + "---:|" * len(defenses))
        for a in (CLEAN, *attacks):
            cells = []
            for d in defenses:
                accs = [results[Cell(p, s, a, d)][0] for s in seeds]
                mean, std = _stats(accs)
                cells.append(f"{100 * mean:.1f} ± {100 * std:.1f}")
                per_seed = {
                    f"seed_{s}": round(x, 4) for s, x in zip(seeds, accs, strict=True)
                }
                rows.append(
                    {"partition": p, "attack": a, "defense": d, "seeds": len(seeds),
                     "accuracy_mean": round(mean, 4), "accuracy_std": round(std, 4),
                     **per_seed}
                )  # fmt: skip
            name = "clean (no attack)" if a == CLEAN else a
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines), rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: python scripts/attack_table.py -j 2 --seeds 0 1 2 "
        "--partitions iid --out docs/attack_table",
    )
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=ATTACKS)
    parser.add_argument(
        "--defenses", nargs="+", default=list(DEFENSES), choices=DEFENSES
    )
    parser.add_argument(
        "--partitions", nargs="+", default=list(PARTITIONS), choices=list(PARTITIONS)
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument(
        "--share",
        type=float,
        default=0.2,
        help="share of malicious clients (default 0.2)",
    )
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "-j", "--jobs", type=int, default=1, help="worker processes (default 1)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("attack_table"),
        help="writes OUT.md and OUT.csv (default attack_table)",
    )
    args = parser.parse_args(argv)  # fmt: skip
    setup = Setup(
        clients=args.clients, rounds=args.rounds, share=args.share,
        model=args.model, lr=args.lr, epochs=args.epochs, batch_size=args.batch_size,
    )  # fmt: skip
    cells = [
        Cell(p, s, a, d)
        for p in args.partitions
        for s in args.seeds
        for a in (CLEAN, *args.attacks)
        for d in args.defenses
    ]
    started = time.perf_counter()
    results = run_cells(cells, setup, args.jobs)
    minutes = (time.perf_counter() - started) / 60
    markdown, rows = tables(
        results, partitions=args.partitions, attacks=args.attacks,
        defenses=args.defenses, seeds=args.seeds,
    )  # fmt: skip
    header = (
        f"Final held-out accuracy (%) after {setup.rounds} rounds, mean ± std over "
        f"seeds {', '.join(map(str, args.seeds))}; {setup.clients} clients, all "
        f"training every round, {setup.share:.0%} malicious; model {setup.model}, "
        f"lr {setup.lr}, {setup.epochs} local epoch(s). {len(cells)} federations "
        f"in {minutes:.1f} min with -j {args.jobs}.\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(header + "\n" + markdown)
    with args.out.with_suffix(".csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(header + "\n" + markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())

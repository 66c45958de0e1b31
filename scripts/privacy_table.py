"""Privacy against utility: the global model's accuracy at epsilon in {1, 2, 4, 8,
inf} (delta 1e-5) on the default data (the 5,000 built-in MNIST digits), with
central DP-FedAvg (client-level DP, fixed clipping) through the library's round
loop (:func:`fedpipe.federation.loop.run_federation`), in this process.

For each target epsilon the noise multiplier sigma is the smallest whose planned
rounds spend at most that epsilon (the accountant inverted:
:func:`fedpipe.federation.privacy.accountant.noise_for_epsilon`); inf is the same run
without privacy. Each federation (clients, clients per round) gets its own rows:
sampling more clients per round divides the noise on the mean update and
amplifies privacy, which is why DP-FedAvg is run with many clients.

    python scripts/privacy_table.py [--epsilons 1 2 4 8 inf] [--rounds 20]
        [--federations 10:10 100:20 500:100] [--cohort-size 50] [--out DIR]
        [--sampling fixed|poisson]

``--sampling poisson``: each client joins a round with probability m / n (keyed
by the secret key), sigma calibrated and epsilon reported by the PLD accountant
(``pld-poisson``); ``fixed`` (the default): m of n, RDP (``rdp-fixed``).

Prints the table as Markdown and writes ``privacy_table.md`` / ``.json`` to
``--out``. The noise is keyed by the project's secret key (``.fedpipe/dp.key``
in the working directory, created at first use), as in a run.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiny_data import ingest_digits

from fedpipe.client import make_client
from fedpipe.client.base import LocalTraining, RecordDP
from fedpipe.config import layout
from fedpipe.config.params import PartitionParams
from fedpipe.config.privacy import Privacy
from fedpipe.core.secretkey import load_or_create_key
from fedpipe.data.ingest import open_features
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import FederatedData, federated_data
from fedpipe.federation.build import private_strategy
from fedpipe.federation.loop import Callback, run_federation
from fedpipe.federation.privacy.accountant import noise_for_epsilon
from fedpipe.federation.round import (
    ClientSampling,
    FixedSampling,
    PoissonSampling,
    RoundInputs,
)
from fedpipe.federation.steps import RoundStep
from fedpipe.model.cohort import cohort_map
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.strategy import make_strategy

DELTA = 1e-5


def federation(
    scratch: Path, samples: Any, spec: DatasetSpec, *, clients: int, seed: int
) -> FederatedData:
    """IID clients with their local splits, as the partition stage makes them."""
    manifest = partition_table(
        samples,
        classes=list(range(len(spec.classes))),
        seed=seed,
        test_fraction=0.2,
        method="iid",
        n_clients=clients,
        local_test_fraction=0.2,
        dedupe=True,
        settings=PartitionParams(min_samples=5).model_dump(
            exclude={"method", "local_test_fraction"}
        ),
    )
    return federated_data(open_features(scratch), samples, manifest, spec)


def run(
    data: FederatedData,
    runner: ModelRunner,
    *,
    privacy: Privacy | None,
    rounds: int,
    per_round: int,
    lr: float,
    seed: int,
    cohort_size: int | None,
    key: bytes | None = None,
    sampling: ClientSampling | None = None,
    record_dp: RecordDP | None = None,
    steps: tuple[RoundStep, ...] = (),
    callbacks: Sequence[Callback] = (),
) -> dict[str, Any]:
    """One federation of ``rounds`` rounds; its last round's numbers.
    ``record_dp`` and ``steps``: DP-SGD in the clients' training and its round
    step (``benchmarks/bench_dpsgd.py``); ``callbacks``: the loop's."""
    strategy = make_strategy("fedavg")
    weights = initial_weights(runner.spec, seed)
    out = run_federation(
        RoundInputs(
            round=1,
            seed=seed,
            spec=runner.spec,
            data=data,
            global_weights=weights,
            server_state=strategy.init_state(weights),
            client_states={},
            strategy=private_strategy(
                strategy, privacy, seed=seed, key=key if privacy else None
            ),
            algorithm=make_client("sgd"),
            training=LocalTraining(epochs=1, batch_size=32, lr=lr, record_dp=record_dp),
            clients_per_round=per_round,
            steps=steps,
            sampling=sampling or FixedSampling(key=key if privacy else None),
        ),
        rounds=rounds,
        map_clients=cohort_map(runner, cohort_size),
        runner=runner,
        callbacks=callbacks,
    )
    return out.record.summary()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilons", nargs="+", default=["1", "2", "4", "8", "inf"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument(
        "--federations",
        nargs="+",
        default=["10:10", "100:20", "500:100"],
        help="clients:per_round pairs",
    )
    ap.add_argument("--clip", type=float, default=0.5, help="privacy.clip_norm")
    ap.add_argument(
        "--sampling", choices=["fixed", "poisson"], default="fixed",
        help="federation.sampling (poisson: the PLD accountant)",
    )  # fmt: skip
    ap.add_argument("--lr", type=float, default=0.1, help="train.lr")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--cohort-size",
        type=int,
        default=50,
        help="train.cohort_size: clients trained at once (vectorized)",
    )
    ap.add_argument(
        "--n-samples", type=int, default=None, help="digits used (default: all)"
    )
    ap.add_argument("--out", type=Path, default=Path("docs/privacy-table"))
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        samples, spec = ingest_digits(
            Path(tmp) / "prepared", source="mnist5k", n_samples=args.n_samples
        )
        model = ModelSpec(
            name="mlp",
            input_shape=spec.input_shape,
            n_classes=len(spec.classes),
            optimizer="sgd",
            lr=args.lr,
        )
        runner = ModelRunner(model)
        for pair in args.federations:
            n, m = (int(v) for v in pair.split(":"))
            data = federation(
                Path(tmp) / "prepared", samples, spec, clients=n, seed=args.seed
            )
            for target in map(float, args.epsilons):
                started = time.perf_counter()
                sigma = (
                    0.0
                    if math.isinf(target)
                    else noise_for_epsilon(
                        target,
                        rounds=args.rounds,
                        delta=DELTA,
                        n_clients=n,
                        per_round=m,
                        sampling=args.sampling,
                        rate=m / n,
                    )
                )
                privacy = (
                    None
                    if math.isinf(target)
                    else Privacy(
                        "central",
                        args.clip,
                        sigma,
                        DELTA,
                        n,
                        m,
                        sampling=args.sampling,
                        sampling_rate=m / n if args.sampling == "poisson" else None,
                    )  # fmt: skip
                )
                key = load_or_create_key(layout.DP_KEY)
                keyed = key if privacy else None
                sampling = (
                    PoissonSampling(m / n, key=keyed)
                    if args.sampling == "poisson"
                    else FixedSampling(key=keyed)
                )
                last = run(
                    data,
                    runner,
                    privacy=privacy,
                    rounds=args.rounds,
                    per_round=m,
                    lr=args.lr,
                    seed=args.seed,
                    cohort_size=args.cohort_size,
                    key=key,
                    sampling=sampling,
                )
                spent = (last.get("privacy") or {}).get("epsilon")
                rows.append(
                    {
                        "clients": n,
                        "per_round": m,
                        "target_epsilon": target,
                        "noise_multiplier": sigma,
                        "epsilon": spent,
                        "accuracy": last["global"]["accuracy"],
                        "seconds": round(time.perf_counter() - started, 1),
                    }
                )
                print(_row(rows[-1]), flush=True)
    text = _table(rows, args)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "privacy_table.md").write_text(text + "\n")
    (args.out / "privacy_table.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


def _row(r: dict[str, Any]) -> str:
    target = "∞" if math.isinf(r["target_epsilon"]) else f"{r['target_epsilon']:g}"
    spent = "∞ (no DP)" if r["epsilon"] is None else f"{r['epsilon']:.3f}"
    sigma = "—" if r["noise_multiplier"] == 0 else f"{r['noise_multiplier']:.3f}"
    return (
        f"| {r['clients']} | {r['per_round']} | {target} | {sigma} | {spent} | "
        f"{r['accuracy']:.4f} | {r['seconds']:.0f} |"
    )


def _table(rows: list[dict[str, Any]], args: argparse.Namespace) -> str:
    head = (
        f"Central DP-FedAvg, mlp, IID, {args.sampling} sampling, {args.rounds} "
        f"rounds, clip norm {args.clip}, "
        f"train.lr {args.lr}, seed {args.seed}, δ = {DELTA:g}\n\n"
        "| clients | per round | target ε | σ | ε spent | global accuracy | s |\n"
        "|---:|---:|---:|---:|---:|---:|---:|"
    )
    return "\n".join([head, *map(_row, rows)])


if __name__ == "__main__":
    raise SystemExit(main())

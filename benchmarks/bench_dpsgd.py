"""Record-level DP-SGD against utility: the global model's accuracy at each
client's epsilon in {1, 2, 4, 8} (delta 1e-5) and without DP, at the default 10
clients (all in every round) on the default data (the 5,000 built-in digits,
IID), mean ± std over seeds, and what DP-SGD costs a round against plain local
SGD, through the library's round loop
(:func:`fedpipe.federation.loop.run_federation`, as ``scripts/privacy_table.py``
runs it) in this process.

For each target the noise multiplier sigma is the smallest whose planned steps
(rounds x epochs x ceil(n / batch) for a client's n training records, q = batch
/ n) spend at most the target at delta under the PLD accountant the rounds
report (:func:`fedpipe.federation.privacy.accountant.dpsgd_noise_for_epsilon`);
every client's epsilon after the last round is read back from the round record.
The clip (C per record) and the learning rate are fixed before the runs, not
tuned on them.

    python benchmarks/bench_dpsgd.py [--epsilons 1 2 4 8 inf] [--rounds 20]
        [--seeds 0 1 2] [--clients 10] [--clip 1.0] [--lr 0.1] [--out FILE]

Prints the table as Markdown (and writes it with the raw numbers as JSON to
``--out``). The noise is keyed by the project's secret key (``.fedpipe/dp.key``
in the working directory, created at first use), as in a run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fedpipe.client.base import RecordDP
from fedpipe.config import layout
from fedpipe.config.privacy import Privacy
from fedpipe.core.secretkey import load_or_create_key
from fedpipe.federation.build import round_steps
from fedpipe.federation.loop import RoundTimes
from fedpipe.federation.privacy.accountant import dpsgd_noise_for_epsilon
from fedpipe.federation.privacy.dpsgd import RecordPrivacy, client_rate
from fedpipe.federation.round import FixedSampling
from fedpipe.model.training import ModelRunner, ModelSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from privacy_table import federation, load_digits  # noqa: E402
from privacy_table import run as run_private  # noqa: E402

DELTA = 1e-5
BATCH = 32


def run(
    data: Any,
    runner: ModelRunner,
    *,
    sigma: float | None,
    clip: float,
    rounds: int,
    lr: float,
    seed: int,
    key: bytes,
) -> tuple[dict[str, Any], list[float]]:
    """One federation (every client every round); its last round's summary and
    each round's seconds."""
    n = len(data.clients)
    record_dp, steps = None, ()
    if sigma is not None:
        record_dp = RecordDP(clip, sigma, key=key)
        privacy = Privacy("dpsgd", clip, sigma, DELTA, n, n)
        steps = round_steps(record_privacy=RecordPrivacy(privacy, batch_size=BATCH))
    times = RoundTimes()
    summary = run_private(
        data, runner, privacy=None, rounds=rounds, per_round=n, lr=lr, seed=seed,
        cohort_size=None, sampling=FixedSampling(), record_dp=record_dp,
        steps=steps, callbacks=[times],
    )  # fmt: skip
    return summary, times.seconds()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epsilons", nargs="+", default=["1", "2", "4", "8", "inf"])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--clip", type=float, default=1.0, help="privacy.clip_norm")
    ap.add_argument("--lr", type=float, default=0.1, help="train.lr")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    key = load_or_create_key(layout.DP_KEY)
    started_all = time.perf_counter()
    raw: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        samples, spec = load_digits(Path(tmp) / "prepared", None)
        model = ModelSpec("mlp", spec.input_shape, len(spec.classes), "sgd", args.lr)
        runner = ModelRunner(model)
        sigmas: dict[tuple[float, int], float] = {}
        for seed in args.seeds:
            data = federation(
                Path(tmp) / "prepared", samples, spec, clients=args.clients, seed=seed
            )
            sizes = sorted({len(c.y_train) for c in data.clients})
            smallest = sizes[0]  # the fastest spender (largest q) sets sigma
            steps = args.rounds * math.ceil(smallest / BATCH)
            for target in map(float, args.epsilons):
                sigma = None
                if not math.isinf(target):
                    cell = (target, smallest)
                    if cell not in sigmas:
                        sigmas[cell] = dpsgd_noise_for_epsilon(
                            target,
                            rate=client_rate(smallest, BATCH),
                            steps=steps,
                            delta=DELTA,
                        )
                    sigma = sigmas[cell]
                summary, seconds = run(
                    data, runner, sigma=sigma, clip=args.clip, rounds=args.rounds,
                    lr=args.lr, seed=seed, key=key,
                )  # fmt: skip
                spent = (summary.get("privacy") or {}).get("epsilon")
                row = {
                    "seed": seed,
                    "target": target,
                    "sigma": sigma,
                    "epsilon_worst_client": spent,
                    "accuracy": summary["global"]["accuracy"],
                    # the first round traces the step: the cost is the others'
                    "round_seconds": statistics.mean(seconds[1:] or seconds),
                    "n_train": sizes,
                }
                raw.append(row)
                print(json.dumps(row), flush=True)
    table = _table(raw, args)
    wall = time.perf_counter() - started_all
    print(table)
    print(f"\nwall time {wall:.0f} s")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "args": vars(args) | {"out": str(args.out)},
                    "rows": raw,
                    "wall_seconds": wall,
                },
                indent=1,
            )  # fmt: skip
        )
    return 0


def _table(raw: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "| target ε (each client) | σ | ε spent (worst client) | global accuracy "
        "(mean ± std) | s / round | × no DP |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    plain = [r["round_seconds"] for r in raw if math.isinf(r["target"])]
    base = statistics.mean(plain) if plain else float("nan")
    for target in map(float, args.epsilons):
        rows = [r for r in raw if r["target"] == target]
        acc = [r["accuracy"] for r in rows]
        std = statistics.stdev(acc) if len(acc) > 1 else 0.0
        secs = statistics.mean(r["round_seconds"] for r in rows)
        if math.isinf(target):
            label, sigma, spent = "∞ (no DP)", "—", "∞"
        else:
            label = f"{target:g}"
            sigma = f"{rows[0]['sigma']:.3f}"
            spent = f"{max(r['epsilon_worst_client'] for r in rows):.3f}"
        lines.append(
            f"| {label} | {sigma} | {spent} | {statistics.mean(acc):.3f} ± "
            f"{std:.3f} | {secs:.2f} | {secs / base:.2f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())

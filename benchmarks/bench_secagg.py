"""SecAgg+ (fedpipe.wire.secagg) in one process: seconds per phase and bytes.

Plays :func:`fedpipe.wire.secagg.run_protocol` at 100 and 1,000 clients with the
default k and t (:func:`~fedpipe.wire.secagg.default_settings`), with 0 % and 5 %
of the clients dropping out after sharing their keys, on a vector of the
default model's size (``params.yaml`` ``model.name`` built by
:func:`fedpipe.model.zoo.build_model` for mnist5k's 28x28x1 digits, 10 classes)
or of ``--length`` words. Every client's vector is a quantized uniform update
in [-1, 1]; each run checks that the unmasked total equals the plain uint32 sum.

Seconds are wall clock for all clients of a phase together, played one after
the other in this process (in a round each client's part runs in its own job):
``keys`` (secrets, advertise, the graph), ``share`` (Shamir + encryption),
``mask`` (masked inputs), ``sum`` (the server's sum), ``reveal``, ``unmask``.
Bytes are payloads (keys, ciphertexts, 4 bytes a word, share values), per
surviving client (the mean; dropped clients send only keys and ciphertexts),
and the server's total. Run from the repository root:

    python benchmarks/bench_secagg.py [--clients 100 1000] [--dropout 0 0.05]
        [--length N] [--out docs/benchmarks/secagg.md]
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from fedpipe.core.seeds import rng_for
from fedpipe.wire.secagg import (
    ProtocolResult,
    SecAggSettings,
    default_settings,
    quantize,
    run_protocol,
)

PHASES = ("keys", "share", "mask", "sum", "reveal", "unmask")
KEY = bytes(range(32))  # a fixed benchmark key, not a project's
SEED = 42


def default_model_length(params: Path = Path("params.yaml")) -> tuple[str, int]:
    """``model.name`` of ``params`` and its parameter count (mnist5k's input)."""
    from fedpipe.model.zoo import build_model

    name = yaml.safe_load(params.read_text())["model"]["name"]
    return name, int(build_model(name, (28, 28, 1), 10).count_params())


def _vectors(n: int, length: int, settings: SecAggSettings) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(SEED)
    return {
        u: quantize(
            rng.uniform(-1.0, 1.0, size=length),
            clipping_range=settings.clipping_range,
            bits=settings.quantization_bits,
            rng=rng,
        )
        for u in range(n)
    }


def one_run(n: int, dropout: float, length: int) -> tuple[dict, ProtocolResult]:
    """One round of ``n`` clients, ``round(dropout n)`` dropped after sharing."""
    settings = default_settings(n)
    vectors = _vectors(n, length, settings)
    drop_rng = rng_for(SEED, "dropout", 1, n)
    dropped = set(drop_rng.choice(n, size=round(dropout * n), replace=False).tolist())
    result = run_protocol(
        vectors,
        dropped=dropped,
        key=KEY,
        round_=1,
        settings=settings,
        graph_rng=rng_for(SEED, "secagg_graph", 1),
    )
    plain = np.zeros(length, dtype=np.uint32)
    for u, x in vectors.items():
        if u not in dropped:
            plain += x
    if not np.array_equal(plain, result.total):
        raise SystemExit(f"{n} clients, {len(dropped)} dropped: the sum is wrong")
    row = {
        "clients": n,
        "k": settings.num_shares,
        "t": settings.reconstruction_threshold,
        "dropped": len(dropped),
    }
    return row, result


def _mean(values: list[int]) -> int:
    return round(sum(values) / len(values))


def table_row(row: dict, result: ProtocolResult) -> str:
    sent = [
        b
        for u, b in result.client_bytes.items()
        if b.masked_vector  # survivors
    ]
    seconds = [result.seconds[p] for p in PHASES]
    cells = [
        row["clients"],
        row["k"],
        row["t"],
        row["dropped"],
        *(f"{s:.2f}" for s in seconds),
        f"{sum(seconds):.2f}",
        f"{_mean([b.public_keys for b in sent]):,}",
        f"{_mean([b.ciphertexts for b in sent]):,}",
        f"{_mean([b.masked_vector for b in sent]):,}",
        f"{_mean([b.revealed_shares for b in sent]):,}",
        f"{_mean([b.total for b in sent]):,}",
        f"{result.server_bytes:,}",
    ]
    return "| " + " | ".join(str(c) for c in cells) + " |"


HEADER = (
    "| clients | k | t | dropped | keys s | share s | mask s | sum s | reveal s "
    "| unmask s | total s | keys B | ciphertexts B | masked vector B "
    "| revealed shares B | client total B | server B |\n"
    "|" + "---:|" * 17
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--dropout", type=float, nargs="+", default=[0.0, 0.05])
    parser.add_argument("--length", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    if args.length is None:
        model, length = default_model_length()
        what = f"{length:,} words: the parameters of `{model}` (params.yaml)"
    else:
        length = args.length
        what = f"{length:,} words (--length)"
    lines = [HEADER]
    started = time.perf_counter()
    for n in args.clients:
        for dropout in args.dropout:
            row, result = one_run(n, dropout, length)
            lines.append(table_row(row, result))
            print(lines[-1], flush=True)
    elapsed = time.perf_counter() - started
    table = "\n".join(lines)
    print(table)

    if args.out is not None:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        command = "python " + " ".join(["benchmarks/bench_secagg.py", *sys.argv[1:]])
        args.out.write_text(
            "# SecAgg+ in one process (fedpipe.wire.secagg)\n\n"
            f"`{command}` at {commit}, {now}; {elapsed:.0f} s in all, on a shared "
            "2-core machine.\n\n"
            f"Vector: {what}. Default k and t; clients dropped after sharing their "
            "keys; every run's unmasked total equals the plain uint32 sum.\n\n"
            "Seconds: wall clock per phase for all clients together, one after the "
            "other in one process (a round runs each client's part in its own "
            "job). Bytes: payloads, the mean over surviving clients (a dropped "
            "client sends only its keys and ciphertexts), and everything the "
            "server sends (neighbours' keys, forwarded ciphertexts, neighbour "
            "ids to survivors).\n\n" + table + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

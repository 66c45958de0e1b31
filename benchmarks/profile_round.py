"""Where a default round's seconds go: training, each evaluation, the health
record, the probe, aggregation, and (against ``fedpipe run``) orchestration.

Makes the default project (``fedpipe init``: 5,000 digits, 10 IID clients,
``small_cnn``, SGD 0.05, batch 32, 1 epoch), runs its rounds as the library loop
(:func:`fedpipe.federation.loop.run_federation`, as ``bench_rounds.py`` does, but
the clients one after another: ``--threads 1``, since a profile sees only the main
thread) under :mod:`cProfile`, and attributes the steady rounds' time (rounds
2..R) to the functions that do each part. With ``--run`` it also times ``fedpipe
run`` of the same rounds in the same go and shows the difference as orchestration
and versioning (the Prefect task runs, the round's files, the ``dvc.lock`` record
and the artifacts, partly in background threads that a profile of the main thread
would not see).

cProfile adds a few percent to the many small calls, so the shares matter more
than the seconds. Run from the repository root:

    python benchmarks/profile_round.py [--rounds 6] [--run] [--threads 1]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rounds import FEDPIPE, early_stages  # noqa: E402

#: part of a round -> the function whose cumulative time it is (file suffix,
#: function name); the parts do not overlap
PARTS = {
    "local training (every client's fit)": ("model/training.py", "fit"),
    "local model on its own test split": ("model/trainer.py", "evaluate"),
    "global model: held-out set and every client's split": (
        "federation/round.py",
        "_evaluate_global",
    ),
    "personalized models' evaluation": ("federation/round.py", "_personalized"),
    "dead-unit probe": ("model/probe.py", "dead_unit_shares"),
    "health record": ("federation/diagnostics/updates.py", "__call__"),
    "aggregation (strategy and its wrappers)": ("strategy/base.py", "aggregate_round"),
}
WHOLE = ("federation/round.py", "run_round")


def _cumulative(stats: pstats.Stats, where: tuple[str, str]) -> float:
    suffix, name = where
    return sum(
        value[3]
        for (path, _, func), value in stats.stats.items()  # type: ignore[attr-defined]
        if func == name and path.endswith(suffix)
    )


def profile_library(project: Path, rounds: int) -> tuple[dict[str, float], float]:
    """Seconds per steady round of each part, and of the whole round."""
    from benchkit import library_rounds

    library_rounds(project, 1)  # round 1 compiles: left out
    profiler = cProfile.Profile()
    profiler.enable()
    library_rounds(project, rounds - 1)
    profiler.disable()
    stats = pstats.Stats(profiler)
    n = rounds - 1
    parts = {part: _cumulative(stats, where) / n for part, where in PARTS.items()}
    return parts, _cumulative(stats, WHOLE) / n


def make_project(rounds: int, threads: int | None = None) -> Path:
    """The default project with its data stages and initial model done
    (``runtime.threads``: ``threads``)."""
    import re

    project = Path(tempfile.mkdtemp(prefix="fedpipe-profile-")) / "project"
    subprocess.run([FEDPIPE, "init", str(project)], check=True, capture_output=True)
    params = project / "params.yaml"
    text = re.sub(r"(?m)^  rounds: \d+", f"  rounds: {rounds}", params.read_text())
    value = "null" if threads is None else str(threads)
    text = re.sub(r"(?m)^  threads: \w+", f"  threads: {value}", text)
    params.write_text(text)
    subprocess.run([FEDPIPE, "-C", str(project), "sync"], check=True)
    early_stages(project)
    return project


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--run", action="store_true", help="also time fedpipe run")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="runtime.threads (default 1: a profile sees the main thread only, so "
        "the parts add up only when every client trains there)",
    )
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 compiles)")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    project = make_project(args.rounds, args.threads)
    here = Path.cwd()
    parts, whole = profile_library(project, args.rounds)
    os.chdir(here)
    run = None
    if args.run:
        run = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("bench_rounds.py")),
             "--child", "fedpipe", "--project", str(project),
             "--rounds", str(args.rounds)],
            check=True, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
    rows = [*parts.items(), ("the rest of run_round", whole - sum(parts.values()))]
    print(f"| part of a steady round (rounds 2..{args.rounds}) | s | share |")
    print("|---|---:|---:|")
    for part, seconds in rows:
        print(f"| {part} | {seconds:.3f} | {seconds / whole:.0%} |")
    print(f"| **the library's round (profiled)** | **{whole:.3f}** | 100% |")
    if run is not None:
        import json

        fed = json.loads(run.stdout.strip().splitlines()[-1])["steady"]
        print(
            f"\n`fedpipe run`, the same rounds in the same go (not profiled): "
            f"{fed:.3f} s a steady round; the difference to an unprofiled library "
            "round is the orchestration and versioning (bench_rounds.py measures "
            "both unprofiled)"
        )


if __name__ == "__main__":
    main()

"""A start that costs nothing: ``fedpipe run`` with nothing to do and ``fedpipe
status``, whole processes, against another tree's (the old way) in the same go.

Variants, each a fresh process in ``--project`` (a project whose every stage is
up to date, e.g. 30 recorded rounds), alternating, ``--repeats`` times:

- *run*: ``fedpipe run --no-server-start`` (start to exit);
- *status*: ``fedpipe status``;
- *cold* (with ``--cold``): both again with the kept answers
  (``.dvc/tmp/fedpipe-*.json``, :mod:`orchestration.staleness`) moved aside for
  the call (and put back after it): what the first call after a change pays.

``--before TREE`` runs the same commands with ``PYTHONPATH=TREE`` (a clone at the
commit before, ``git clone -q REPO /tmp/base``) beside this tree's. Its ``fedpipe
run`` starts a Prefect flow run: set ``PREFECT_API_URL`` to a running server.
Medians are reported. From the repository root:

    python benchmarks/bench_start.py --project DIR [--before TREE] [--repeats 10]

Make a 30-round project: ``fedpipe init DIR``, set ``federation.rounds: 30`` and
``scripts/tiny_data.py``'s ``TINY`` settings in ``DIR/params.yaml``, ``fedpipe
run`` once there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "run": (["run", "--no-server-start"], "0 stage(s) ran"),
    "status": (["status"], "stages"),
}


def time_command(name: str, tree: Path, project: Path, *, cold: bool) -> float:
    """Seconds of one ``fedpipe NAME`` process with ``tree``'s code."""
    args, expect = COMMANDS[name]
    # cold: the kept answers moved aside for this call, then put back (the
    # warm calls that follow find them as they were)
    aside = {p: p.read_bytes() for p in _kept(project)} if cold else {}
    for path in aside:
        path.unlink()
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "fedpipe_app.cli", *args],
        capture_output=True,
        text=True,
        cwd=project,
        env=os.environ | {"PYTHONPATH": str(tree)},
    )
    took = time.perf_counter() - started
    if cold:
        for path in _kept(project):
            path.unlink()
        for path, data in aside.items():
            path.write_bytes(data)
    if proc.returncode != 0 or expect not in proc.stdout:
        raise SystemExit(
            f"error: `fedpipe {' '.join(args)}` with {tree} in {project} exited "
            f"{proc.returncode} or did not find every stage up to date; run it "
            f"once there first\n{proc.stdout[-1000:]}\n{proc.stderr[-2000:]}"
        )
    return took


def _kept(project: Path) -> list[Path]:
    return sorted((project / ".dvc" / "tmp").glob("fedpipe-*.json"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, required=True)
    parser.add_argument("--before", type=Path, help="the old way's tree")
    parser.add_argument("--repeats", type=int, default=10, help="runs of each")
    parser.add_argument("--cold", action="store_true", help="also without records")
    args = parser.parse_args(argv)
    project = args.project.resolve()
    trees = {"this tree": ROOT}
    if args.before is not None:
        trees["before"] = args.before.resolve()
    variants = [(n, False) for n in COMMANDS]
    if args.cold:
        variants += [(n, True) for n in COMMANDS]
    times: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, cold in variants:
            for label, tree in trees.items():
                if cold and label != "this tree":
                    continue  # the old way keeps nothing
                key = f"{name}{' (cold)' if cold else ''}: {label}"
                took = time_command(name, tree, project, cold=cold)
                times.setdefault(key, []).append(took)
    print("| what | median (s) | min | max |")
    print("|---|---:|---:|---:|")
    for key, values in times.items():
        print(
            f"| {key} | {statistics.median(values):.2f} | {min(values):.2f} "
            f"| {max(values):.2f} |"
        )
    print(
        f"(medians of {args.repeats}, alternating; every run: "
        + json.dumps({k: [round(x, 2) for x in v] for k, v in times.items()})
        + ")"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

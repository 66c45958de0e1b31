"""What every fedpipe command pays before it starts: importing TensorFlow and Keras,
with and without :mod:`fedpipe_app.deferred` (the API modules fedpipe never uses
loaded on first use).

Two variants, each in a fresh interpreter, alternating, ``--repeats`` times:

- *import*: ``import tensorflow, keras`` alone (the clock around the import);
- *noop run* (``--project DIR``): ``fedpipe run --no-server-start --no-report`` in a
  project where every stage is up to date (the whole process, start to exit): the
  start-up a person waits for when nothing needs doing.

The *shipped* side runs the same code with :func:`fedpipe_app.deferred.install`
replaced by a no-op. Medians are reported, with the ratio deferred / shipped. Run
from the repository root:

    python benchmarks/bench_import.py [--repeats 5] [--project DIR]
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

IMPORT = """
import json, sys, time
from fedpipe_app import deferred, tfnotices
tfnotices.install()
if {defer}:
    deferred.install()
t = time.perf_counter()
import tensorflow, keras
print(json.dumps({{"s": time.perf_counter() - t,
                  "sklearn": "sklearn" in sys.modules}}))
"""

NOOP_RUN = """
import sys
from fedpipe_app import cli, deferred
if not {defer}:
    deferred.install = lambda *a, **k: None
sys.exit(cli.main(["run", "--no-server-start", "--no-report"]))
"""


def time_import(defer: bool) -> float:
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT.format(defer=defer)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["sklearn"] is not defer, got  # the variant did what it says
    return float(got["s"])


def time_noop_run(defer: bool, project: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", NOOP_RUN.format(defer=defer)],
        capture_output=True,
        text=True,
        cwd=project,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    took = time.perf_counter() - started
    if proc.returncode != 0 or "0 stage(s) ran" not in proc.stdout:
        raise SystemExit(
            f"error: `fedpipe run` in {project} did not find every stage up to date "
            f"(exit {proc.returncode}); run it once there first\n{proc.stderr[-2000:]}"
        )
    return took


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each variant")
    parser.add_argument(
        "--project",
        type=Path,
        help="a project where `fedpipe run` has nothing to do (adds the noop run)",
    )
    args = parser.parse_args(argv)
    variants = {"import": time_import}
    if args.project is not None:
        project = args.project.resolve()
        variants["noop run"] = lambda defer: time_noop_run(defer, project)
    times: dict[tuple[str, bool], list[float]] = {}
    for _ in range(args.repeats):
        for name, measure in variants.items():
            for defer in (False, True):
                times.setdefault((name, defer), []).append(measure(defer))
    print("| what | shipped (s) | deferred (s) | deferred / shipped |")
    print("|---|---:|---:|---:|")
    for name in variants:
        shipped = statistics.median(times[(name, False)])
        deferred = statistics.median(times[(name, True)])
        print(f"| {name} | {shipped:.2f} | {deferred:.2f} | {deferred / shipped:.2f} |")
    print(
        f"(medians of {args.repeats}, alternating; every run: "
        + json.dumps(
            {
                f"{n} {'deferred' if d else 'shipped'}": [round(x, 2) for x in v]
                for (n, d), v in times.items()
            }
        )
        + ")"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

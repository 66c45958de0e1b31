"""Where a whole ``fedpipe run``'s seconds go: its start, each round, the summary,
the doctor and report, the last ``dvc.lock`` record, its end.

Makes the default project (as ``profile_round.py`` does: ``fedpipe init``, the data
stages and the initial model done and recorded), then runs the flow ``fedpipe
run`` runs (:func:`flows.pipeline.run_pipeline`, with fedpipe's heartbeat, against
the local Prefect server) ``--repeats`` times, forgetting the rounds between runs,
with a clock around each part: the functions the flow calls are wrapped in this
process only (nothing in the package is changed). The parts:

- *start*: from the call to the first stage: Prefect creating the flow run, the
  recorder's process starting and reading ``dvc.lock`` for what is up to date;
- *round 1*, and *rounds 2..R* (their median, and what round 1 costs above it:
  tracing the models' steps, first calls);
- *summary*; *doctor and report* (the doctor and every section of the report
  but its lineage run while the last ``dvc.lock`` records are written);
  *waiting for the last record* (what is left of that record when the report
  comes to its lineage, which reads ``dvc.lock`` after it); *artifacts and the
  end* (the run's artifacts, Prefect finishing the flow run).

The whole run against its steady rounds (median round x R) is issue 27's third
figure. Run from the repository root:

    python benchmarks/profile_run.py [--rounds 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_rounds import _reset_rounds  # noqa: E402
from profile_round import make_project  # noqa: E402


def one_run(project: Path) -> dict[str, Any]:
    """One ``run_pipeline`` of the rounds and the summary, its parts timed."""
    os.chdir(project)
    _reset_rounds(project)
    from orchestration.server import ensure_api

    ensure_api()
    import flows.pipeline as pipeline
    from fedpipe.config.params import load_params
    from orchestration.heartbeat import own_heartbeat

    spans: list[tuple[str, float, float]] = []
    originals: dict[tuple[Any, str], Callable[..., Any]] = {}

    def clock(owner: Any, name: str, label: Callable[..., str]) -> None:
        original = getattr(owner, name)
        originals[(owner, name)] = original

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spans.append((label(*args), started, time.perf_counter()))

        setattr(owner, name, timed)

    clock(pipeline, "run_stage", lambda params, stage, **_: stage)
    clock(pipeline, "doctor_and_report", lambda *_: "doctor and report")
    clock(pipeline._Records, "finish", lambda *_: "waiting for the records")
    clock(pipeline, "publish_run_artifacts", lambda *_: "artifacts")
    params = load_params()
    try:
        started = time.perf_counter()
        with own_heartbeat():
            pipeline.run_pipeline(params)
        ended = time.perf_counter()
    finally:
        for (owner, name), original in originals.items():
            setattr(owner, name, original)
    rounds = {s: b - a for s, a, b in spans if s.startswith("round@")}
    # the wait for the last record: inside the doctor-and-report span (where the
    # report's lineage waits for it) or after it; counted once, as the wait
    waits = [(a, b) for s, a, b in spans if s == "waiting for the records"]
    reporting = [(a, b) for s, a, b in spans if s == "doctor and report"]
    inside = sum(b - a for a, b in waits for ra, rb in reporting if ra <= a and b <= rb)
    first_stage = min(a for s, a, _ in spans if s.startswith("round@"))
    steady = statistics.median(list(rounds.values())[1:])
    parts = {
        "start (flow run, what is up to date)": first_stage - started,
        "round 1": rounds["round@1"],
        f"rounds 2..{len(rounds)}": sum(list(rounds.values())[1:]),
        "summary": sum(b - a for s, a, b in spans if s == "summary"),
        "doctor and report": sum(b - a for a, b in reporting) - inside,
        "waiting for the last record": max(b - a for a, b in waits),
    }
    parts["the rest (artifacts, the flow run's end, between stages)"] = (
        ended - started - sum(parts.values())
    )
    return {
        "parts": parts,
        "whole": ended - started,
        "steady": steady,
        "rounds": len(rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(one_run(args.child)))
        return
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 compiles)")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    project = make_project(args.rounds)
    runs = []
    for i in range(args.repeats):
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(project)],
            check=True, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = runs[-1]
        print(
            f"run {i + 1}: whole {r['whole']:.2f} s, steady round {r['steady']:.2f} s, "
            f"whole / (steady x rounds) {r['whole'] / (r['steady'] * r['rounds']):.2f}",
            file=sys.stderr,
        )
    median = {
        k: statistics.median(r["parts"][k] for r in runs) for k in runs[0]["parts"]
    }
    whole = statistics.median(r["whole"] for r in runs)
    steady = statistics.median(r["steady"] for r in runs)
    print(f"| part of the whole run (median of {len(runs)}) | s | share |")
    print("|---|---:|---:|")
    for part, seconds in median.items():
        print(f"| {part} | {seconds:.2f} | {seconds / whole:.0%} |")
    print(f"| **the whole run** | **{whole:.2f}** | 100% |")
    print(
        f"\nsteady round (median of rounds 2..{args.rounds}) {steady:.2f} s; the whole "
        f"run is {whole / (steady * args.rounds):.2f}x {args.rounds} steady rounds"
    )


if __name__ == "__main__":
    main()

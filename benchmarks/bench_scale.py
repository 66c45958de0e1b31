"""Seconds per round, peak memory and cache bytes as the federation grows.

For each case (clients in the federation x clients per round) a fresh project
(``fedpipe init``) is made on a generated table with the same data per client
(``--rows-per-client`` rows: after the held-out 20 % and the local test 20 %,
about 26 training samples each, at least 20), trained with the MLP for
``--rounds`` rounds, and measured three ways, all in this one go:

- ``fedpipe run --no-report`` (a private Prefect server with its services on, as
  fedpipe starts one; every stage recorded in ``dvc.lock``): seconds per round
  from the times its round metrics files were written (rounds 2..R, so start-up
  and compilation are left out), and the peak
  resident memory of the process (``wait4``; the data stages included);
- the library loop: :func:`fedpipe.federation.loop.run_federation` on the same
  inputs in a plain process, no Prefect, no files, no DVC (rounds 2..R);
  fedpipe against it is the cost of orchestration and versioning; its peak
  resident memory is that of the rounds alone;
- bytes each round adds to ``.dvc/cache`` (new cache objects of its outs, as
  :mod:`benchmarks.bench_cache` attributes them; the median of rounds 2..R, as the
  last round scores every client and its table has a row for each).

A plain case (``1000x100``) trains as the default ``train.cohort_size: auto``
does (the MLP: vectorized cohorts of 10); ``1000x100c100`` trains cohorts of 100
clients (``train.cohort_size: 100``), ``1000x100c1`` one by one, in both fedpipe
and the library loop; ``1000x100d``
runs fedpipe's client training on Dask (``runtime.runner: dask``, a local cluster
of 2 worker processes; the library loop stays in one process).
``--images`` adds the images case: ``seed_cnn`` on 100x100 RGB, ``--images-n``
generated images in two classes, 100 clients of which 10 train per round.

Large federations score the global model on the round's participants only
(``evaluation.clients: participants``; the last round scores everyone) unless
``--evaluate all``. Run from the repository root:

    python benchmarks/bench_scale.py [--cases 10x10,100x10,1000x10,1000x100]
        [--rounds 4] [--repeats 3] [--images] [--json PATH] [--keep DIR]

``--repeats N`` runs fedpipe and the library loop N times per case, alternating,
and shows the medians; the repeats go round the cases (repeat 1 of every case,
then repeat 2, ...), so a machine that drifts during the go moves every case
alike (a round of 1,000 clients against one of 100 is a ratio across cases). ``--peers`` adds pfl-research's table mode
(``benchmarks/peers/pfl_peer.py``, ``WORKLOAD=table``: the same generator, clients
and cohort, the MLP 32-64-10, equal training rows a client) to the alternation of
each table case (vectorized cohorts too: pfl trains the same clients), in its own
virtualenv ``$PFL_VENV`` (left out with a message where that is missing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cache import (  # noqa: E402
    DVC,
    FEDPIPE,
    QUIET,
    ROUND_PREFIX,
    _run,
    _set_params,
    attribute,
    private_prefect_server,
)
from benchkit import PEERS, library_rounds, pfl_python  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
N_FEATURES = 32
N_CLASSES = 10


@dataclass(frozen=True)
class Case:
    """One federation size: ``clients`` in all, ``per_round`` training per round."""

    clients: int
    per_round: int
    images: bool = False
    cohort: int | None = None
    dask: bool = False

    @property
    def label(self) -> str:
        kind = "images, seed_cnn" if self.images else "table, mlp"
        if self.cohort == 1:
            kind += ", one by one"
        elif self.cohort:
            kind += f", cohorts of {self.cohort}"
        if self.dask:
            kind += ", on Dask"
        return f"{self.clients:,}x{self.per_round:,} ({kind})"

    @classmethod
    def parse(cls, text: str) -> Case:
        """``1000x100`` (``train.cohort_size: auto``, the default: cohorts of 10
        for the MLP); ``1000x100c100`` with ``train.cohort_size: 100``
        (``c1``: one by one);
        ``1000x100d`` with ``runtime.runner: dask`` (a local cluster of 2)."""
        text = text.lower()
        dask = text.endswith("d")
        size, _, cohort = text.removesuffix("d").partition("c")
        clients, _, per_round = size.partition("x")
        return cls(
            int(clients),
            int(per_round),
            cohort=int(cohort) if cohort else None,
            dask=dask,
        )


@dataclass(frozen=True)
class Result:
    case: str
    fedpipe_s: float
    library_s: float
    peak_rss_mb: float
    library_rss_mb: float
    cache_bytes_per_round: float
    rounds: int
    final_accuracy: float | None
    pfl_s: float | None = None

    @property
    def ratio(self) -> float:
        return self.fedpipe_s / self.library_s


# ---------------------------------------------------------------- data


def write_table(path: Path, rows: int, seed: int) -> None:
    """``rows`` samples of ``N_FEATURES`` features around one centre per class."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 1.0, size=(N_CLASSES, N_FEATURES))
    labels = rng.integers(0, N_CLASSES, rows)
    x = centres[labels] + rng.normal(0.0, 1.5, size=(rows, N_FEATURES))
    table = pd.DataFrame(
        x.astype(np.float32), columns=[f"f{i}" for i in range(N_FEATURES)]
    )
    table["label"] = labels
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_parquet(path, index=False)


def write_images(folder: Path, n: int, seed: int, size: int = 100) -> None:
    """``n`` RGB images in two class folders: noise with a brighter square or disc."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:size, :size]
    for name in ("disc", "square"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        label = i % 2
        img = rng.integers(0, 120, size=(size, size, 3), dtype=np.uint8)
        cy, cx = rng.integers(25, size - 25, 2)
        r = int(rng.integers(10, 20))
        if label == 0:
            mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        else:
            mask = (abs(yy - cy) <= r) & (abs(xx - cx) <= r)
        img[mask] = rng.integers(150, 255, size=3, dtype=np.uint8)
        name = ("disc", "square")[label]
        Image.fromarray(img).save(folder / name / f"{i:05d}.png")


# ---------------------------------------------------------------- one case


def make_project(
    project: Path, case: Case, *, args: argparse.Namespace, env: Mapping[str, str]
) -> None:
    _run(
        [FEDPIPE, "init", str(project), "--remote", str(project) + "-remote"], ROOT, env
    )
    if case.images:
        write_images(project / "data" / "raw" / "shapes", args.images_n, seed=1)
        data = {"source": "images", "path": "data/raw/shapes", "image_size": [100, 100]}
        model = {"name": "seed_cnn"}
        min_samples = 20
    else:
        write_table(
            project / "data" / "raw" / "scale.parquet",
            case.clients * args.rows_per_client,
            seed=1,
        )
        data = {"source": "table", "path": "data/raw/scale.parquet"}
        model = {"name": "mlp"}
        min_samples = 20
    evaluate = "all" if args.evaluate == "all" else "participants"
    _set_params(
        project,
        {
            "data": data,
            "model": model,
            "federation": {
                "clients": case.clients,
                "rounds": args.rounds,
                "fraction_fit": case.per_round / case.clients,
                "min_clients": 1,
            },
            "partition": {"min_samples": min_samples, "method": "iid"},
            "evaluation": {"clients": evaluate},
            "train": {"cohort_size": case.cohort or "auto"},
            "runtime": {"runner": "dask" if case.dask else "local"},
            "validation": {"min_rows": 100},
        },
    )
    _run([FEDPIPE, "sync"], project, env)
    _run(["git", "add", "-A"], project, env)
    _run(["git", "commit", "-qm", "bench_scale case"], project, env)


def run_fedpipe(
    project: Path, env: Mapping[str, str], *, force: bool = False
) -> tuple[float, float]:
    """``fedpipe run`` (``force``: every stage again): seconds per round (rounds
    2..R) and peak RSS in MB."""
    args = [FEDPIPE, "run", "--no-server-start", "--no-report", "-q"]
    args += ["--force"] if force else []
    with open(project / "bench-run.log", "w") as log:
        proc = subprocess.Popen(
            args, cwd=project, env=dict(env), stdout=log, stderr=log
        )
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(
            f"fedpipe run failed in {project}:\n"
            + (project / "bench-run.log").read_text()[-6000:]
        )
    written = sorted(
        (int(p.stem.split("-")[1]), p.stat().st_mtime)
        for p in (project / "metrics" / "rounds").glob("round-*.json")
    )
    times = [t for _, t in written]
    per_round = statistics.median(np.diff(times)) if len(times) > 1 else float("nan")
    return float(per_round), usage.ru_maxrss / 1024


def run_library(project: Path, env: Mapping[str, str]) -> tuple[float, float]:
    """The library loop in a fresh process: seconds per round (rounds 2..R) and
    its peak RSS in MB (the rounds alone: no data stages)."""
    out = subprocess.run(
        [sys.executable, __file__, "--library-loop", str(project)],
        cwd=ROOT,
        env=dict(env) | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"library loop failed:\n{out.stderr[-6000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return float(got["per_round"]), float(got["peak_rss_mb"])


def library_loop(project: Path) -> dict[str, float]:
    """The library loop: seconds per round (rounds 2..R) and peak RSS."""
    import resource

    times, _ = library_rounds(project)
    return {
        "per_round": float(statistics.median(np.diff(times.ends))),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def cache_per_round(project: Path, env: Mapping[str, str]) -> float:
    cache = Path(_run([DVC, "cache", "dir"], project, env).strip())
    order = _run([DVC, "stage", "list", "--name-only"], project, env).split()
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    stages = attribute(lock, order, cache / "files" / "md5")
    rounds = [s.total for s in stages if s.stage.startswith(ROUND_PREFIX)]
    # rounds 2..R; the median, as the last round scores (and tables) every client
    return float(statistics.median(rounds[1:] or rounds))


def run_pfl(case: Case, args, env: Mapping[str, str]) -> float:  # type: ignore[no-untyped-def]
    """pfl-research's seconds per round (rounds 2..R) on the same federation: its
    clients hold as many training rows as fedpipe's (fedpipe keeps 20 % of the
    table held out and a fifth of each client's rows for its local test; pfl's
    script holds out 20 % only, so it is given 80 % of the rows)."""
    python = pfl_python()
    assert python is not None
    out = subprocess.run(
        [str(python), str(PEERS / "pfl_peer.py")],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={
            **env,
            "WORKLOAD": "table",
            "CLIENTS": str(case.clients),
            "COHORT": str(case.per_round),
            "ROUNDS": str(args.rounds),
            "ROWS": str(round(case.clients * args.rows_per_client * 0.8)),
        },
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["round_s_median"])


@dataclass
class _Timings:
    """One case's project and its runs so far."""

    case: Case
    project: Path
    started: float
    fed: list = field(default_factory=list)
    lib: list = field(default_factory=list)
    peer: list = field(default_factory=list)


def _prepare(case: Case, work: Path, *, args, env) -> _Timings:  # type: ignore[no-untyped-def]
    suffix = ("-img" if case.images else "") + (
        f"-c{case.cohort}" if case.cohort else ""
    )
    suffix += "-dask" if case.dask else ""
    project = work / f"p{case.clients}x{case.per_round}{suffix}"
    started = time.perf_counter()
    make_project(project, case, args=args, env=env)
    return _Timings(case, project, started)


def _once(t: _Timings, i: int, *, args, env) -> None:  # type: ignore[no-untyped-def]
    """Repeat ``i`` of one case: fedpipe, the library loop, pfl, one after another."""
    t.fed.append(run_fedpipe(t.project, env, force=i > 0))
    t.lib.append(run_library(t.project, env))
    # pfl trains the same clients whether fedpipe vectorizes them or not
    if getattr(args, "peers", False) and not (t.case.images or t.case.dask):
        t.peer.append(run_pfl(t.case, args, env))


def _result(t: _Timings, *, args, env) -> Result:  # type: ignore[no-untyped-def]
    fed_s = statistics.median(f for f, _ in t.fed)
    lib_s = statistics.median(f for f, _ in t.lib)
    rss, lib_rss = max(r for _, r in t.fed), max(r for _, r in t.lib)
    summary = json.loads((t.project / "metrics" / "summary.json").read_text())
    acc = (summary.get("global") or {}).get("accuracy")
    print(
        f"  {t.case.label}: fedpipe {fed_s:.3f} s/round, library {lib_s:.3f}, "
        f"{time.perf_counter() - t.started:.0f} s since its project was made",
        file=sys.stderr,
        flush=True,
    )
    return Result(
        case=t.case.label,
        fedpipe_s=fed_s,
        library_s=lib_s,
        peak_rss_mb=rss,
        library_rss_mb=lib_rss,
        cache_bytes_per_round=cache_per_round(t.project, env),
        rounds=args.rounds,
        final_accuracy=acc,
        pfl_s=statistics.median(t.peer) if t.peer else None,
    )


def measure_all(cases: Sequence[Case], work: Path, *, args, env) -> list[Result]:  # type: ignore[no-untyped-def]
    """Every case, the repeats interleaved across the cases (repeat 1 of each
    case, then repeat 2 of each, ...), so that a machine drifting during the go
    moves every case alike and the ratios between cases (a round of 1,000
    clients against one of 100) are not the drift's; medians per case."""
    timings = [_prepare(case, work, args=args, env=env) for case in cases]
    for i in range(args.repeats):
        for t in timings:
            _once(t, i, args=args, env=env)
    return [_result(t, args=args, env=env) for t in timings]


def measure(case: Case, work: Path, *, args, env) -> Result:  # type: ignore[no-untyped-def]
    """One case alone (:func:`measure_all` of one)."""
    return measure_all([case], work, args=args, env=env)[0]


def markdown(results: Sequence[Result]) -> str:
    peers = any(r.pfl_s is not None for r in results)
    lines = [
        "| clients x per round | fedpipe run s/round | library loop s/round | ratio "
        + ("| pfl s/round | fedpipe / pfl " if peers else "")
        + "| peak RSS MB (run / rounds only) | cache bytes/round | final accuracy |",
        "|---|---:|---:|---:|" + ("---:|---:|" if peers else "") + "---:|---:|---:|",
    ]
    for r in results:
        acc = "" if r.final_accuracy is None else f"{r.final_accuracy:.3f}"
        peer = ""
        if peers:
            peer = (
                "| | "
                if r.pfl_s is None
                else f"| {r.pfl_s:.3f} | {r.fedpipe_s / r.pfl_s:.2f}x "
            )
        lines.append(
            f"| {r.case} | {r.fedpipe_s:.3f} | {r.library_s:.3f} | {r.ratio:.2f}x "
            f"{peer}| {r.peak_rss_mb:,.0f} / {r.library_rss_mb:,.0f} "
            f"| {r.cache_bytes_per_round:,.0f} | {acc} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cases", default="10x10,100x10,1000x10,1000x100,1000x100c100,10000x100"
    )
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="runs of fedpipe and of the library loop per case, alternating; "
        "the medians are shown",
    )
    parser.add_argument("--rows-per-client", type=int, default=40)
    parser.add_argument("--images", action="store_true", help="add the images case")
    parser.add_argument("--images-n", type=int, default=20_000)
    parser.add_argument(
        "--evaluate", choices=("participants", "all"), default="participants"
    )
    parser.add_argument(
        "--peers", action="store_true", help="add pfl-research's table mode ($PFL_VENV)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", type=Path, help="keep the projects in this folder")
    parser.add_argument("--library-loop", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.library_loop:
        print(json.dumps(library_loop(args.library_loop)))
        return 0
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (round 1 compiles)")
    cases = [Case.parse(c) for c in args.cases.split(",") if c]
    if args.peers:
        if pfl_python() is None:
            print(
                "pfl-research left out: no $PFL_VENV/bin/python (docs/benchmarks.md "
                "says how to make that virtualenv)",
                file=sys.stderr,
            )
            args.peers = False
    if args.images:
        cases.append(Case(100, 10, images=True))

    work = (
        args.keep.resolve()
        if args.keep
        else Path(tempfile.mkdtemp(prefix="fedpipe-scale-"))
    )
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **QUIET, "DVC_SITE_CACHE_DIR": str(work / "dvc-site-cache")}
    env.pop("PREFECT_API_URL", None)
    env["PREFECT_HOME"] = str(work / "prefect-client-home")
    results: list[Result] = []
    try:
        # the server as fedpipe starts it for a person: services on (the task
        # run recorder's CPU is part of what a run costs on this machine)
        with private_prefect_server(work / "prefect-home", services=True) as url:
            env["PREFECT_API_URL"] = url
            results = measure_all(cases, work, args=args, env=env)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(markdown(results))
    if args.json:
        rows = [asdict(r) | {"ratio": r.ratio} for r in results]
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Bytes each federation round adds to the DVC cache.

Creates a fresh project (``fedpipe init``; SCAFFOLD, 100 clients, 10 sampled per
round, the MLP, 5 rounds by default), runs ``fedpipe run --no-report`` against a
private Prefect server (its own PREFECT_HOME, a free loopback port: no developer's
server at 4200 is used or started), then attributes the cache to the stages.

Attribution reads only ``dvc.lock``: stages in ``dvc.yaml`` order (``dvc stage
list``), each stage's outs by their md5. An md5 ending in ``.dir`` is a directory:
its listing object (``files/md5/XX/REST.dir``, a JSON list of ``{md5, relpath}``)
and every file object it lists count. An object counts for the first stage whose
outs hold it; later stages that hold it again add nothing, which is what DVC's
content-addressed cache stores. Sizes are those of the cache files. Outs with no
object in the cache add nothing and are listed apart. (``cache: false`` outs are
usually in the cache all the same: recording a stage saves it to DVC's run cache,
which commits its uncached outs so it can restore them.)

Out paths of ``round@K`` are shown with ``K`` replaced by ``{K}``, so one column
follows one output across rounds, whatever the outputs are. The total growth of the
cache folder (every file under it, the run cache included) after the run against
after ``fedpipe init`` is reported beside the per-stage sums.

The project goes to a temporary folder, removed afterwards unless ``--keep``;
``--out DIR`` puts it at DIR and keeps it. Run from the repository root (the tools
beside this interpreter are used):

    python benchmarks/bench_cache.py [--rounds 5] [--clients 100] [--per-round 10]
        [--strategy scaffold] [--out DIR] [--keep] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent  # works with .venv/bin/python, activated or not
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
PREFECT = str(BIN / "prefect")
ROUND_PREFIX = "round@"
DIR_SUFFIX = ".dir"
TRAIN_DIGITS = 4_000  # the default mnist5k training share (test_fraction 0.2)
QUIET = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "DVC_NO_ANALYTICS": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "GIT_AUTHOR_NAME": "fedpipe bench",
    "GIT_AUTHOR_EMAIL": "bench@fedpipe.invalid",
    "GIT_COMMITTER_NAME": "fedpipe bench",
    "GIT_COMMITTER_EMAIL": "bench@fedpipe.invalid",
}


@dataclass(frozen=True)
class StageCache:
    """Cache bytes one stage's outs added that no earlier stage had.

    ``by_out`` maps each out path (as in ``dvc.lock``) to its new bytes; outs with
    no object in the cache are in ``uncached`` instead.
    """

    stage: str
    by_out: dict[str, int]
    uncached: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.by_out.values())


@dataclass(frozen=True)
class CacheReport:
    """Everything the benchmark measured; bytes throughout."""

    settings: dict[str, object]
    stages: list[StageCache]
    cache_after_init: int
    cache_after_run: int
    run_seconds: float

    @property
    def rounds(self) -> list[StageCache]:
        return [s for s in self.stages if s.stage.startswith(ROUND_PREFIX)]

    @property
    def growth(self) -> int:
        return self.cache_after_run - self.cache_after_init

    def to_json(self) -> dict[str, object]:
        return {
            "settings": self.settings,
            "stages": [asdict(s) | {"total": s.total} for s in self.stages],
            "rounds_total": sum(s.total for s in self.rounds),
            "rounds_mean": _mean([s.total for s in self.rounds]),
            "stages_total": sum(s.total for s in self.stages),
            "cache_after_init": self.cache_after_init,
            "cache_after_run": self.cache_after_run,
            "cache_growth": self.growth,
            "run_seconds": self.run_seconds,
        }


# --- attribution: pure functions of dvc.lock and the cache folder -----------------


def object_path(odb: Path, md5: str) -> Path:
    """Where DVC 3 keeps the object ``md5`` under ``odb`` (``.../files/md5``)."""
    return odb / md5[:2] / md5[2:]


def objects_of(odb: Path, md5: str) -> dict[str, int]:
    """Size of every cache object behind one out's md5 ({} if it is not cached).

    A ``.dir`` md5 stands for its listing object plus every file object listed
    in it.
    """
    listing = object_path(odb, md5)
    if not listing.is_file():
        return {}
    objects = {md5: listing.stat().st_size}
    if md5.endswith(DIR_SUFFIX):
        for entry in json.loads(listing.read_text()):
            path = object_path(odb, entry["md5"])
            if path.is_file():
                objects[entry["md5"]] = path.stat().st_size
    return objects


def attribute(
    lock: Mapping[str, object], order: Sequence[str], odb: Path
) -> list[StageCache]:
    """New cache bytes per stage and out, stages in ``order`` (then any others).

    An object is counted for the first (stage, out) that holds it, so the per-out
    figures of a stage add up to its total and nothing is counted twice.
    """
    stages: Mapping[str, Mapping] = lock.get("stages", {})  # type: ignore[assignment]
    names = [s for s in order if s in stages] + [s for s in stages if s not in order]
    seen: set[str] = set()
    result = []
    for name in names:
        by_out: dict[str, int] = {}
        uncached: list[str] = []
        for out in stages[name].get("outs", []):
            md5 = out.get("md5")
            objects = objects_of(odb, md5) if md5 else {}
            if not objects:
                uncached.append(out["path"])
                continue
            by_out[out["path"]] = sum(
                size for obj, size in objects.items() if obj not in seen
            )
            seen.update(objects)
        result.append(StageCache(name, by_out, uncached))
    return result


def folder_bytes(root: Path) -> int:
    """Bytes of every file under ``root`` (0 if it does not exist)."""
    if not root.is_dir():
        return 0
    return sum(
        (Path(d) / f).lstat().st_size for d, _, files in os.walk(root) for f in files
    )


def generic_path(stage: str, path: str) -> str:
    """``path`` with the round number of a ``round@K`` stage written ``{K}``."""
    if not stage.startswith(ROUND_PREFIX):
        return path
    key = re.escape(stage.removeprefix(ROUND_PREFIX))
    return re.sub(rf"(?<!\d){key}(?!\d)", "{K}", path)


# --- the run ------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_prefect_server(home: Path, *, services: bool = False) -> Iterator[str]:
    """A Prefect server on a free loopback port with PREFECT_HOME ``home``.

    ``services``: with the server's services on, as ``prefect server start``
    (and so fedpipe) runs it for a person; among them the task run recorder, which
    turns task-run events into the task runs the UI shows, and costs CPU per task
    run. Off by default (nothing here reads task runs back).

    Yields its API URL; stops it (its whole process group) on exit.
    """
    from orchestration.server import server_env, wait_healthy

    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = server_env() | {"PREFECT_HOME": str(home)}
    with open(home / "server.log", "w") as log:
        proc = subprocess.Popen(
            [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)]
            + ["--analytics-off"]
            + ([] if services else ["--no-services"]),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}/api"
            wait_healthy(url, timeout=120)
            yield url
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _run(args: list[str], cwd: Path, env: Mapping[str, str]) -> str:
    proc = subprocess.run(
        args, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited {proc.returncode} in {cwd}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc.stdout


def _set_params(project: Path, sections: Mapping[str, Mapping[str, object]]) -> None:
    path = project / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params.pop("round_chain", None)  # `fedpipe sync` regenerates it
    for section, values in sections.items():
        params[section] = {**(params.get(section) or {}), **values}
    path.write_text(yaml.safe_dump(params, sort_keys=False))


def measure(
    project: Path,
    *,
    env: Mapping[str, str],
    rounds: int = 5,
    clients: int = 100,
    per_round: int = 10,
    strategy: str = "scaffold",
    model: str = "mlp",
    min_samples: int | None = None,
    remote: Path | None = None,
) -> CacheReport:
    """Create ``project``, run it, attribute its DVC cache to the stages.

    ``env`` is the environment of every command; it must name a Prefect server in
    ``PREFECT_API_URL`` (the run never starts one). ``min_samples`` defaults to
    20, or less when ``clients`` share the 4,000 training digits more thinly.
    ``remote`` is the DVC remote ``fedpipe init`` configures (nothing is pushed;
    default: ``<project>-remote`` beside the project).
    """
    if min_samples is None:
        # each client's share keeps partition.local_test_fraction (0.2) back
        min_samples = max(1, min(20, TRAIN_DIGITS // clients // 2))
    if not env.get("PREFECT_API_URL"):
        raise ValueError("measure: env must set PREFECT_API_URL (a running server)")
    env = {**QUIET, **env}
    remote = remote or project.parent / f"{project.name}-remote"
    _run([FEDPIPE, "init", str(project), "--remote", str(remote)], Path.cwd(), env)
    settings = {
        "strategy": {"name": strategy},
        "federation": {
            "clients": clients,
            "rounds": rounds,
            "fraction_fit": per_round / clients,
        },
        "model": {"name": model},
        "partition": {"min_samples": min_samples},
    }
    _set_params(project, settings)
    _run([FEDPIPE, "sync"], project, env)
    _run(["git", "add", "-A"], project, env)
    _run(["git", "commit", "-qm", "bench_cache experiment"], project, env)

    cache_root = Path(_run([DVC, "cache", "dir"], project, env).strip())
    before = folder_bytes(cache_root)
    start = time.perf_counter()
    _run([FEDPIPE, "run", "--no-server-start", "--no-report"], project, env)
    seconds = time.perf_counter() - start
    after = folder_bytes(cache_root)

    order = _run([DVC, "stage", "list", "--name-only"], project, env).split()
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    stages = attribute(lock, order, cache_root / "files" / "md5")
    return CacheReport(
        settings={**settings, "per_round": per_round},
        stages=stages,
        cache_after_init=before,
        cache_after_run=after,
        run_seconds=seconds,
    )


# --- output -------------------------------------------------------------------------


def _mean(values: Sequence[int]) -> float:
    return statistics.fmean(values) if values else 0.0


def _fmt(n: float) -> str:
    return f"{n:,.0f}"


def markdown(report: CacheReport) -> str:
    """The per-round table, the mean, and how the stage sums meet the folder walk."""
    rounds = report.rounds
    columns: list[str] = []
    for s in rounds:
        for path in s.by_out:
            generic = generic_path(s.stage, path)
            if generic not in columns:
                columns.append(generic)

    def cells(s: StageCache) -> list[float]:
        generic = {generic_path(s.stage, p): b for p, b in s.by_out.items()}
        return [generic.get(c, 0) for c in columns] + [s.total]

    lines = [
        "| round | " + " | ".join(f"`{c}`" for c in columns) + " | total |",
        "|---|" + "---:|" * (len(columns) + 1),
    ]
    for s in rounds:
        lines.append(
            f"| {s.stage.removeprefix(ROUND_PREFIX)} | "
            + " | ".join(_fmt(v) for v in cells(s))
            + " |"
        )
    if rounds:
        means = [_mean([cells(s)[i] for s in rounds]) for i in range(len(columns) + 1)]
        lines.append("| mean | " + " | ".join(_fmt(v) for v in means) + " |")
    uncached = sorted({generic_path(s.stage, p) for s in rounds for p in s.uncached})
    others = [s for s in report.stages if not s.stage.startswith(ROUND_PREFIX)]
    stage_sum = sum(s.total for s in report.stages)
    lines += [
        "",
        f"Bytes per round stage: new cache objects of its outs (`dvc.lock`); "
        f"not cached: {', '.join(f'`{p}`' for p in uncached) or 'none'}.",
        "Other stages: "
        + ", ".join(f"{s.stage} {_fmt(s.total)}" for s in others)
        + f"; all stages {_fmt(stage_sum)}.",
        f"`.dvc/cache` walk: {_fmt(report.cache_after_init)} after init, "
        f"{_fmt(report.cache_after_run)} after the run, growth "
        f"{_fmt(report.growth)} (run cache and other files: "
        f"{_fmt(report.growth - stage_sum)}). Run: {report.run_seconds:.1f} s.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        help="project directory, kept afterwards (default: a temporary one)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--strategy", default="scaffold")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the temporary folder (project, Prefect home, server log)",
    )
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="fedpipe-bench-cache-"))
    project = (args.out or work / "project").resolve()
    env = dict(os.environ) | {"DVC_SITE_CACHE_DIR": str(work / "dvc-site-cache")}
    env.pop("PREFECT_API_URL", None)
    env["PREFECT_HOME"] = str(work / "prefect-client-home")
    try:
        with private_prefect_server(work / "prefect-home") as url:
            env["PREFECT_API_URL"] = url
            report = measure(
                project,
                env=env,
                rounds=args.rounds,
                clients=args.clients,
                per_round=args.per_round,
                strategy=args.strategy,
                remote=work / "dvc-remote",
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(markdown(report))
    if args.keep or args.out:
        print(f"\nproject: {project}")
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`dvc repro` against `fedpipe run --no-report` on the default pipeline, in one go.

Creates a fresh default project (``fedpipe init``: 5,000 MNIST digits, 10 clients,
the small CNN, 10 rounds; git and DVC initialised, committed) and copies it, so
both runs start from the same clean state. Against one private Prefect server (a
free loopback port, its own PREFECT_HOME: no developer's server at 4200 is used or
started) it times

- ``fedpipe run --no-report`` in one copy (every stage in one process);
- ``dvc repro`` in the other (one ``fedpipe stage`` command per stage, served by
  the project's warm worker unless ``FEDPIPE_WARM=0`` is set);
- with ``--cold``, also ``dvc repro`` with ``FEDPIPE_WARM=0`` in a third copy
  (every stage a fresh process: what ``dvc repro`` cost before the warm worker);

prints the seconds and the ratios, and checks that every round's
``models/round-N/weights.npz`` is bitwise identical across the runs (exit 1 if
not). Warm workers are stopped at the end. Run from the repository root:

    python benchmarks/bench_repro.py [--rounds 10] [--cold] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml
from bench_cache import QUIET, private_prefect_server

from fedpipe_app.stageclient import DIR_ENV, stop_workers

BIN = Path(sys.executable).parent
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")


def _run(args: list[str], cwd: Path, env: Mapping[str, str]) -> float:
    """Seconds ``args`` took in ``cwd``; raises with its output if it failed."""
    started = time.perf_counter()
    proc = subprocess.run(
        args, cwd=cwd, env=dict(env), capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} exited {proc.returncode} in {cwd}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return seconds


def new_project(path: Path, env: Mapping[str, str], rounds: int) -> Path:
    """The default project (``fedpipe init``) with ``rounds`` rounds, committed."""
    subprocess.run([FEDPIPE, "init", str(path)], env=dict(env), check=True)
    if rounds != 10:
        params = path / "params.yaml"
        raw = yaml.safe_load(params.read_text())
        raw.pop("round_chain", None)
        raw["federation"]["rounds"] = rounds
        params.write_text(yaml.safe_dump(raw, sort_keys=False))
        _run([FEDPIPE, "sync"], path, env)
    _run(["git", "add", "-A"], path, env)
    _run(["git", "commit", "-qm", "default project"], path, env)
    return path


def model_hashes(project: Path) -> dict[str, str]:
    """md5 of every round's global weights."""
    return {
        p.parent.name: hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(project.glob("models/round-*/weights.npz"))
    }


def measure(
    work: Path, env: Mapping[str, str], *, rounds: int, cold: bool
) -> dict[str, float]:
    """Seconds per way of running the pipeline; checks their models agree."""
    base = new_project(work / "base", env, rounds)
    ways = {
        "fedpipe run --no-report": ([FEDPIPE, "run", "--no-report"], {}),
        "dvc repro": ([DVC, "repro"], {}),
    }
    if cold:
        ways["dvc repro (FEDPIPE_WARM=0)"] = ([DVC, "repro"], {"FEDPIPE_WARM": "0"})
    seconds: dict[str, float] = {}
    hashes: dict[str, dict[str, str]] = {}
    for n, (name, (cmd, extra)) in enumerate(ways.items()):
        project = work / f"project-{n}"
        shutil.copytree(base, project, symlinks=True)
        print(f"{name} ...", flush=True)
        seconds[name] = _run(cmd, project, {**env, **extra})
        hashes[name] = model_hashes(project)
        print(f"  {seconds[name]:.1f} s", flush=True)
    first = next(iter(hashes.values()))
    if len(first) != rounds + 1 or any(h != first for h in hashes.values()):
        raise SystemExit(f"models differ between the runs: {hashes}")
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--cold", action="store_true", help="also time dvc repro with FEDPIPE_WARM=0"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp folder")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="fedpipe-bench-repro-"))
    warm_dir = work / "warm"
    warm_dir.mkdir(mode=0o700)
    env = (
        dict(os.environ)
        | QUIET
        | {
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "DVC_SITE_CACHE_DIR": str(work / "dvc-site-cache"),
            "PREFECT_HOME": str(work / "prefect-client-home"),
            "FEDPIPE_DVC_REMOTE": str(work / "dvc-remote"),
            DIR_ENV: str(warm_dir),
        }
    )
    try:
        with private_prefect_server(work / "prefect-home") as url:
            env["PREFECT_API_URL"] = url
            try:
                seconds = measure(work, env, rounds=args.rounds, cold=args.cold)
            finally:
                stop_workers(warm_dir)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    base = seconds["fedpipe run --no-report"]
    print(f"\ndefault pipeline, {args.rounds} rounds, same Prefect server:")
    for name, s in seconds.items():
        print(f"  {name:<28} {s:7.1f} s   {s / base:5.2f}x")
    print(f"models/round-0..{args.rounds}/weights.npz: bitwise identical across runs")
    if args.keep:
        print(f"kept: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

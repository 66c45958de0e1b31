"""Kill fedpipe anywhere, resume, and check the project ends as if nothing happened.

Two copies of one project (the default data and model, a stateful server strategy
and personalization: FedAdam with Ditto, whose server and clients both keep state
across rounds). The reference runs ``fedpipe run`` once, uninterrupted. The other
is killed ``--kills`` times: each time a command, ``fedpipe run`` or ``dvc repro``
(drawn from the seed), starts in its own session and its whole process group gets
SIGKILL at a moment drawn uniformly from ``--window`` seconds after its start
(the default window spans the reference run, so kills land in every stage: data,
validation, partition, rounds, summary, the dvc.lock records). A command that
ends before its moment is not a kill; the next one forces every stage again
(``--force``), so that there is always work to interrupt. Every command is the
resume of the one killed before it. At the end ``fedpipe run`` finishes the
project, and the script checks that

* no command exited non-zero before its kill (a wedged or broken project) and
  none printed a Python traceback;
* ``dvc status`` is clean;
* every output equals the reference run's bit for bit (the comparison of
  ``scripts/compare_trees.py``: every file of the project and every dvc.lock out,
  timings aside).

Usage::

    python scripts/chaos.py --kills 50 --seed 0
    python scripts/chaos.py --kills 4 --rounds 2 --clients 4 --keep /tmp/chaos

Exit status 0 when every check holds, 1 otherwise (the report says which), 2 when
the projects could not be set up. The figures go to stdout as a table, and with
``--json`` to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_trees as ct  # noqa: E402  (a script beside this one)

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("fedpipe run", "dvc repro")
#: A stateful server strategy and personalization with client state.
OVERRIDES: dict[str, Any] = {
    "strategy": {"name": "fedadam"},
    "personalization": {"method": "ditto", "ditto_lambda": 0.1},
}
COMMAND_TIMEOUT_S = 1800.0
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Attempt:
    """One command of the chaos project."""

    command: str
    forced: bool
    kill_at: float  # seconds after its start
    seconds: float = 0.0
    killed: bool = False
    exit_code: int | None = None
    traceback: bool = False
    repaired: list[str] = field(default_factory=list)  # lines saying so


@dataclass
class Outcome:
    kills: int
    kills_by_command: dict[str, int]
    completed_before_kill: int
    failures: list[str]
    tracebacks: int
    repairs: list[str]
    dvc_status_clean: bool
    identical: bool
    differences: list[str]
    files_compared: int
    lock_outs_compared: int
    reference_seconds: float
    seconds: float

    @property
    def ok(self) -> bool:
        return (
            not self.failures
            and not self.tracebacks
            and self.dvc_status_clean
            and self.identical
        )


def _command(name: str, *, forced: bool) -> list[str]:
    exe = Path(sys.executable).parent
    if name == "fedpipe run":
        cmd = [str(exe / "fedpipe"), "run", "--no-server-start", "--no-report", "-q"]
    else:
        cmd = [str(exe / "dvc"), "repro"]
    return cmd + (["--force"] if forced else [])


def _start(cmd: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path):
    out = open(log, "w")  # closed by _finish
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: killed whole
    )
    return proc, out


def run_to_end(cmd: Sequence[str], cwd: Path, env: Mapping[str, str], log: Path) -> int:
    proc, out = _start(cmd, cwd, env, log)
    try:
        return proc.wait(timeout=COMMAND_TIMEOUT_S)
    finally:
        out.close()


def run_whole(project: Path, env: Mapping[str, str], log: Path) -> int:
    """An uninterrupted ``fedpipe run`` of ``project`` (not forced); its exit code."""
    return run_to_end(_command("fedpipe run", forced=False), project, env, log)


def attempt(item: Attempt, project: Path, env: Mapping[str, str], log: Path) -> Attempt:
    """Run ``item``'s command and SIGKILL its process group at ``kill_at``."""
    proc, out = _start(_command(item.command, forced=item.forced), project, env, log)
    started = time.monotonic()
    try:
        proc.wait(timeout=item.kill_at)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        item.killed = True
    finally:
        out.close()
    item.seconds = time.monotonic() - started
    item.exit_code = None if item.killed else proc.returncode
    text = log.read_text(errors="replace")
    item.traceback = TRACEBACK in text
    item.repaired = [line for line in text.splitlines() if "repaired" in line]
    return item


def make_project(
    project: Path, env: Mapping[str, str], overrides: Mapping[str, Any], log: Path
) -> None:
    code = run_to_end(
        [str(Path(sys.executable).parent / "fedpipe"), "init", project.name],
        project.parent,
        env,
        log,
    )
    if code != 0:
        raise SystemExit(f"fedpipe init failed ({log}):\n{ct._tail(log)}")
    params = yaml.safe_load((project / "params.yaml").read_text())
    ct._write_params(project, ct.merge(params, overrides))
    # round_chain written back, so that `dvc repro` can run first
    code = run_to_end(
        [str(Path(sys.executable).parent / "fedpipe"), "sync"], project, env, log
    )
    if code != 0:
        raise SystemExit(f"fedpipe sync failed ({log}):\n{ct._tail(log)}")


def dvc_status_clean(project: Path, env: Mapping[str, str]) -> tuple[bool, str]:
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "dvc"), "status", "--json"],
        cwd=project,
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return False, (proc.stdout + proc.stderr).strip()
    try:
        return json.loads(proc.stdout or "{}") == {}, proc.stdout.strip()
    except ValueError:
        return False, proc.stdout.strip()


def chaos(args: argparse.Namespace, work: Path, api_url: str) -> Outcome:
    env = ct.run_env(work / "shared", api_url)
    overrides = ct.merge(
        OVERRIDES,
        {
            "federation": {
                k: v
                for k, v in (("rounds", args.rounds), ("clients", args.clients))
                if v is not None
            }
        },
    )
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    reference, victim = work / "reference", work / "chaos"
    # every command of the go runs with PREFECT_HOME work/ph
    commands_env = env | {"PREFECT_HOME": str(work / "ph")}
    for project in (reference, victim):
        make_project(
            project, commands_env, overrides, logs / f"init-{project.name}.txt"
        )
    started = time.monotonic()
    ref_log = logs / "reference.txt"
    code = run_whole(reference, commands_env, ref_log)
    reference_s = time.monotonic() - started
    if code != 0:
        raise SystemExit(f"the reference run failed:\n{ct._tail(ref_log)}")
    print(f"reference run: {reference_s:.0f} s", flush=True)

    rng = random.Random(args.seed)
    low, high = args.window or (1.0, reference_s)
    attempts: list[Attempt] = []
    forced = False
    failures: list[str] = []
    while sum(a.killed for a in attempts) < args.kills:
        item = Attempt(rng.choice(COMMANDS), forced, rng.uniform(low, high))
        log = logs / f"attempt-{len(attempts) + 1:03d}.txt"
        attempt(item, victim, commands_env, log)
        attempts.append(item)
        kills = sum(a.killed for a in attempts)
        state = "killed" if item.killed else f"ended with {item.exit_code}"
        print(
            f"[{kills:>3}/{args.kills}] {item.command}{' --force' * item.forced}: "
            f"{state} at {item.seconds:.1f} s"
            + (" (TRACEBACK)" if item.traceback else "")
            + "".join(f"\n      {line}" for line in item.repaired),
            flush=True,
        )
        if not item.killed and item.exit_code != 0:
            failures.append(f"{log.name}: {item.command} exited {item.exit_code}")
            break  # a wedged project: the rest would say the same
        forced = not item.killed  # a finished project gets work again
    final_log = logs / "final.txt"
    code = run_whole(victim, commands_env, final_log)
    if code != 0:
        failures.append(f"final fedpipe run exited {code}: {ct._tail(final_log, 3)}")
    final_text = final_log.read_text(errors="replace")
    clean, status = dvc_status_clean(victim, env)
    comparison = ct.compare_projects(reference, victim)
    by_command = {
        c: sum(a.killed for a in attempts if a.command == c) for c in COMMANDS
    }
    return Outcome(
        kills=sum(a.killed for a in attempts),
        kills_by_command=by_command,
        completed_before_kill=sum(not a.killed for a in attempts),
        failures=failures,
        tracebacks=sum(a.traceback for a in attempts) + (TRACEBACK in final_text),
        repairs=[line for a in attempts for line in a.repaired],
        dvc_status_clean=clean,
        identical=comparison.identical,
        differences=[f"{n}: {d}" for n, d in comparison.differ[:10]]
        + ([] if clean else [f"dvc status: {status[:300]}"]),
        files_compared=comparison.files,
        lock_outs_compared=comparison.lock_outs,
        reference_seconds=round(reference_s, 1),
        seconds=round(time.monotonic() - started, 1),
    )


def _yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def report(outcome: Outcome) -> str:
    runs = ", ".join(f"{n} of `{c}`" for c, n in outcome.kills_by_command.items())
    lines = [
        "| check | result |",
        "|---|---|",
        f"| kills (SIGKILL of the process group) | {outcome.kills} ({runs}) |",
        f"| commands that ended before their kill | {outcome.completed_before_kill} |",
        f"| a command failed (wedged) | {'; '.join(outcome.failures) or 'none'} |",
        f"| tracebacks printed | {outcome.tracebacks} |",
        f"| state repaired (lines) | {len(outcome.repairs)} |",
        f"| `dvc status` clean at the end | {_yes(outcome.dvc_status_clean)} |",
        f"| outputs equal the uninterrupted run | "
        f"{_yes(outcome.identical)} ({outcome.files_compared} files, "
        f"{outcome.lock_outs_compared} dvc.lock outs) |",
        f"| time | reference {outcome.reference_seconds:.0f} s, chaos "
        f"{outcome.seconds:.0f} s |",
    ]
    lines += [f"- {d}" for d in outcome.differences]
    lines += [f"- repaired: {r}" for r in outcome.repairs[:10]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Kill fedpipe run / dvc repro at random moments, resume, "
        "and compare with an uninterrupted run.",
    )
    parser.add_argument("--kills", type=int, default=50, help="default 50")
    parser.add_argument("--seed", type=int, default=0, help="kill moments, commands")
    parser.add_argument(
        "--rounds", type=int, help="federation.rounds (default: params')"
    )
    parser.add_argument("--clients", type=int, help="federation.clients")
    parser.add_argument(
        "--window",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="kill moments, seconds after a command's start (default 1 to the "
        "reference run's length)",
    )
    parser.add_argument("--keep", type=Path, help="keep the projects in this folder")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--api-url",
        help="a running Prefect server's API to report to (default: start one)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.kills < 1:
        print("chaos.py: --kills must be >= 1", file=sys.stderr)
        return 2
    work = (args.keep or Path(tempfile.mkdtemp(prefix="fedpipe-chaos-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.api_url:
            outcome = chaos(args, work, args.api_url)
        else:
            with ct.prefect_server(work / "prefect-server") as url:
                outcome = chaos(args, work, url)
    except ct.UsageError as exc:
        print(f"chaos.py: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(report(outcome))
    if args.json:
        args.json.write_text(
            json.dumps(asdict(outcome) | {"ok": outcome.ok}, indent=2) + "\n"
        )
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())

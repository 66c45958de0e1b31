"""Running a sweep (:mod:`fedpipe_app.experiments.sweep`): slots, processes, DVC
experiments.

How the runs happen, and why (measured on the tiny project of the e2e tests,
2 rounds, a CPU shared with other work):

- Each of the ``-j N`` *slots* is a workspace of the project of its own: a git
  worktree at the project's commit (``.dvc/tmp/sweeps/NAME/slot-I``) whose
  ``.dvc/config.local`` points ``cache.dir`` at the project's cache, with the
  project's uncommitted changes to tracked files copied in (what ``dvc exp run``
  would take). A slot runs its points one after another: ``params.yaml`` set
  to the point (:func:`fedpipe.config.overrides.set_params`, ``round_chain``
  regenerated), ``fedpipe run``, optionally ``fedpipe centralized``, then
  ``dvc exp save -n NAME-<point>-s<seed>`` with the untracked metrics and health
  records included. Worktrees share the project's refs, so ``dvc exp show`` in
  the project lists every saved run against its commit. A point took 26 s in a
  fresh slot (data stages included) and ``dvc exp save`` 2.4 s; later points in
  the same slot reuse its prepared data and partition (``dvc.lock`` in the
  slot), so only ``init`` and the rounds run again.
- ``dvc exp run --temp -S ...`` run concurrently (option b) took 22 s for the
  same point, but DVC's ``-S`` cannot regenerate ``round_chain`` when
  ``federation.rounds`` is swept, so ``params.yaml`` would have to be written
  in the one shared workspace before each start (what ``fedpipe run --exp``
  does): concurrent points would race on it. Each temp copy also starts with
  nothing recorded unless ``dvc.lock`` is committed, so every point reran the
  data stages. DVC's queue (option c) adds a Celery worker whose state survives
  a ``kill -9`` of the sweep half-way (queued and running entries to clean),
  and its ``-S`` has the same ``round_chain`` problem.

Robust to ``kill -9``: a run counts as finished only when its experiment ref
exists *and* its row is in ``runs.jsonl`` (appended after the save); a slot
remembers the run it started (``.dvc/tmp/sweep-run``) and the process group it
started it in (``.dvc/tmp/sweep-pid``): the next sweep ends that group if it is
still alive and reruns the half-finished point with ``--force`` (every stage,
from scratch).
Two sweeps of the same ``--out`` cannot run at once (an ``flock`` the kernel
drops with the process).

DVC and fedpipe run as commands (``dvc``, ``python -m fedpipe_app.cli``), not
imported: fedpipe's core stays free of DVC and Prefect.
"""

from __future__ import annotations

import csv
import fcntl
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpipe.config import layout
from fedpipe.config.overrides import set_params
from fedpipe.config.params import ParamsError, load_params
from fedpipe.core.errors import FedpipeError
from fedpipe.core.git import git
from fedpipe.core.jsonio import read_json
from fedpipe_app.experiments.sweep import (
    METRICS,
    SEED_KEY,
    Run,
    centralized_args,
    layer_divergence,
    progress_line,
    run_row,
    table,
    table_markdown,
    varying,
)
from fedpipe_app.experiments.variants import dvc_command

RUN_MARKER = ".dvc/tmp/sweep-run"  # in the slot; git ignores .dvc/tmp
PID_FILE = ".dvc/tmp/sweep-pid"
ROWS = "runs.jsonl"
# untracked run files each experiment keeps (cache: false outputs, not in git)
KEEP = (
    "metrics/rounds", "metrics/health", "metrics/summary.json",
    "metrics/history.csv", "metrics/centralized.json",
)  # fmt: skip


@dataclass(frozen=True)
class SweepSettings:
    """How to run a sweep (from the command line)."""

    name: str
    out: Path
    jobs: int = 1
    centralized: bool = False
    params_file: str = "params.yaml"


# ---------------------------------------------------------------- git and dvc


def _git(root: Path, *args: str, check: bool = True) -> str:
    proc = git(root, *args)
    if check and (proc is None or proc.returncode != 0):
        said = "git cannot be run" if proc is None else proc.stderr.strip()
        raise RuntimeError(f"git {' '.join(args)}: {said}")
    return "" if proc is None else proc.stdout.strip()


def baseline(root: Path) -> str:
    """The project's commit (the experiments' baseline).

    Raises
    ------
    ParamsError
        Not a git repository with a commit.
    """
    proc = git(root, "rev-parse", "HEAD")
    if proc is None or proc.returncode != 0:
        raise ParamsError(
            "fedpipe sweep needs a git repository with a commit (DVC keeps "
            "experiments as git refs); `fedpipe init` makes one"
        )
    return proc.stdout.strip()


def saved_experiments(root: Path, base: str) -> set[str]:
    """Names of the DVC experiments saved on commit ``base``."""
    prefix = f"refs/exps/{base[:2]}/{base[2:]}/"
    out = _git(root, "for-each-ref", "--format=%(refname)", prefix, check=False)
    return {line[len(prefix) :] for line in out.splitlines() if line}


def _cache_dir(root: Path) -> Path:
    proc = subprocess.run(
        [dvc_command(), "cache", "dir"], cwd=root, capture_output=True, text=True
    )
    text = proc.stdout.strip()
    return Path(text) if proc.returncode == 0 and text else root / ".dvc" / "cache"


def _changed_files(root: Path) -> list[str]:
    """Tracked files that differ from the commit (what ``dvc exp run`` takes)."""
    out = _git(root, "diff", "--name-only", "HEAD", check=False)
    return [line for line in out.splitlines() if (root / line).is_file()]


# ---------------------------------------------------------------- slots


LEFTOVER_GRACE_S = 120.0
"""How long a leftover that must not be cut short (``dvc exp save``, the run's
dvc.lock recorder) may take to end by itself before it is killed anyway."""


def _leftovers(slot: Path) -> dict[int, list[bytes]]:
    """Process groups a killed sweep left running in ``slot``, with the command
    line of each group's leader (empty when it cannot be read).

    Each command of a run is started in a session of its own with the slot as
    its working directory, and its pid is written to ``PID_FILE`` right after:
    a sweep killed between the two leaves a running command and no pid file
    (seen on CI: the resumed run was refused, DVC's lock held by the orphan).
    A run's dvc.lock recorder is a session of its own too. So on Linux the
    leaders of sessions working in the slot and running fedpipe, its
    orchestration or DVC are found in /proc; elsewhere the pid file is all
    there is.
    """
    groups: dict[int, list[bytes]] = {}
    try:
        groups[int((slot / PID_FILE).read_text().split()[0])] = []
    except (OSError, ValueError, IndexError):
        pass
    here = slot.resolve()
    for entry in _processes():
        pid = int(entry.name)
        try:
            if Path(os.readlink(entry / "cwd")) != here or os.getsid(pid) != pid:
                continue
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue  # gone, or not ours to look at
        if any(_ours(a) for a in argv):
            groups[pid] = argv
    for pgid, argv in groups.items():
        if not argv:
            try:
                groups[pgid] = Path(f"/proc/{pgid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                pass
    return groups


def _processes() -> list[Path]:
    """The /proc entries of running processes (none where there is no /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    return [entry for entry in proc.iterdir() if entry.name.isdigit()]


def _ours(arg: bytes) -> bool:
    """Whether a command-line word names fedpipe, its orchestration or DVC."""
    return (
        b"fedpipe" in arg
        or arg.startswith(b"orchestration.")
        or Path(arg.decode(errors="replace")).name == "dvc"
    )


def _let_finish(argv: Sequence[bytes]) -> bool:
    """Whether a leftover must end by itself: ``dvc exp save`` (killed, it can
    leave the workspace half-restored: an empty dvc.lock was seen) and the
    dvc.lock recorder (its stdin closed, it lands its record and ends)."""
    words = [a.decode(errors="replace") for a in argv]
    saving = any(Path(w).name == "dvc" for w in words) and "save" in words
    return saving or "orchestration.dvclock" in words


def _end_leftover(slot: Path) -> bool:
    """End the process groups a killed sweep left running in ``slot``: a run
    is killed (it reruns anyway), which ends its recorder; a save or recorder
    is given :data:`LEFTOVER_GRACE_S` to end by itself. True if any was found."""
    here = slot.resolve()
    found = False
    for wait in (False, True):  # kill the runs first: their recorders then end
        for pgid, argv in _leftovers(slot).items():
            try:
                cwd = Path(os.readlink(f"/proc/{pgid}/cwd"))
            except OSError:
                cwd = None  # gone, or not Linux: the group is checked below
            if cwd is not None and cwd.resolve() != here:
                continue  # the pid was reused by something else
            if not _group_alive(pgid) or (_let_finish(argv) and not wait):
                continue
            found = True
            deadline = time.monotonic() + (LEFTOVER_GRACE_S if wait else 0.0)
            while wait and _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            deadline = time.monotonic() + 30
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(0.1)  # until gone, and its locks with it
    (slot / PID_FILE).unlink(missing_ok=True)
    return found


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, which hold no
    locks and which nobody may reap when their parent was killed, do not)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    if not Path("/proc").is_dir():
        return True
    for entry in _processes():
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def open_slot(root: Path, base: str, path: Path, cache: Path) -> bool:
    """Make ``path`` a worktree of ``root`` at ``base`` sharing ``cache``.

    Returns True when the slot held a half-finished run of an earlier sweep
    (its next run is then forced). Such a slot is made anew: whatever a killed
    run or save left half-written there (an emptied dvc.lock, a half-restored
    workspace) is gone.
    """
    half_done = False
    if path.exists():
        half_done = _end_leftover(path) or (path / RUN_MARKER).exists()
    if path.exists() and (
        half_done or _git(path, "rev-parse", "HEAD", check=False) != base
    ):
        shutil.rmtree(path)
        _git(root, "worktree", "prune")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _git(root, "worktree", "prune")
        _git(root, "worktree", "add", "--detach", "--force", str(path), base)
    (path / ".dvc" / "config.local").write_text(f"[cache]\n    dir = {cache}\n")
    for name in _changed_files(root):
        shutil.copy2(root / name, path / name)
    lock = root / "dvc.lock"
    if lock.is_file() and not (path / "dvc.lock").is_file():
        shutil.copy2(lock, path / "dvc.lock")  # untracked: what already ran
    return half_done


# ---------------------------------------------------------------- one run


class RunFailed(FedpipeError):
    """A command of one run exited non-zero (message names it and its log)."""


def _call(cmd: list[str], slot: Path, log: Path) -> None:
    started = time.perf_counter()
    (slot / PID_FILE).parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}  # {time.strftime('%H:%M:%S')}\n")
        out.flush()
        proc = subprocess.Popen(
            cmd, cwd=slot, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        (slot / PID_FILE).write_text(f"{proc.pid}\n")
        code = proc.wait()
        out.write(f"# exit {code} after {time.perf_counter() - started:.1f} s\n")
    (slot / PID_FILE).unlink(missing_ok=True)
    if code != 0:
        raise RunFailed(f"{cmd[2] if len(cmd) > 2 else cmd[0]} exited {code}")


def fedpipe_command(*args: str) -> list[str]:
    """``fedpipe ARGS`` run by this interpreter."""
    return [sys.executable, "-m", "fedpipe_app.cli", *args]


def run_in_slot(
    run: Run,
    slot: Path,
    *,
    base_params: str,
    log: Path,
    centralized: bool,
    force: bool,
    save: Callable[[list[str], Path, Path], None],
) -> dict[str, Any]:
    """Run ``run`` in ``slot``, save it as a DVC experiment; its results row."""
    started = time.perf_counter()
    params_path = slot / "params.yaml"
    params_path.write_text(base_params)
    set_params(params_path, run.overrides)
    (slot / RUN_MARKER).parent.mkdir(parents=True, exist_ok=True)
    (slot / RUN_MARKER).write_text(run.name + "\n")
    run_args = ["run", "--no-server-start", "--no-report"]
    _call(fedpipe_command(*run_args, *(["--force"] if force else [])), slot, log)
    central = None
    if centralized:
        params = load_params(params_path)
        extra = centralized_args(
            rounds=params.federation.rounds,
            clients=params.federation.clients,
            batch_size=params.train.batch_size,
            local_steps=params.train.local_steps,
        )
        _call(fedpipe_command("centralized", *extra), slot, log)
        central = read_json(slot / layout.CENTRALIZED_METRICS)
    elif (slot / layout.CENTRALIZED_METRICS).exists():
        (slot / layout.CENTRALIZED_METRICS).unlink()  # an earlier point's
    rounds = load_params(params_path).federation.rounds
    health = [read_json(slot / layout.health_metrics(k)) for k in range(1, rounds + 1)]
    summary = read_json(slot / layout.SUMMARY_METRICS)
    include = [
        a for k in KEEP if (slot / k).exists() for a in ("--include-untracked", k)
    ]
    save([dvc_command(), "exp", "save", "-f", "-n", run.name, *include], slot, log)
    seconds = time.perf_counter() - started
    row = run_row(
        run, summary=summary, central=central,
        layers=layer_divergence(health), seconds=seconds,
    )  # fmt: skip
    return row


# ---------------------------------------------------------------- results


def read_rows(out: Path) -> list[dict[str, Any]]:
    """The rows of ``out/runs.jsonl`` (a line cut by a kill is skipped)."""
    path = out / ROWS
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_results(out: Path, runs: Sequence[Run], keys: Sequence[str]) -> None:
    """``runs.csv``, ``table.csv``, ``table.md`` and ``layers.json`` from the
    rows of ``runs`` (in sweep order) found in ``runs.jsonl``."""
    by_name = {r["run"]: r for r in read_rows(out)}
    rows = [by_name[r.name] for r in runs if r.name in by_name]
    cols = ["run", "point", *keys, SEED_KEY, *METRICS]
    _write_atomic(out / "runs.csv", _csv(rows, cols))
    shown = varying(keys, rows) or list(keys)  # fixed keys: in runs.csv only
    entries = table(rows, shown)
    tcols = [
        "point",
        *shown,
        "n",
        *(f"{m}_{s}" for m in METRICS for s in ("mean", "std")),
    ]
    _write_atomic(out / "table.csv", _csv(entries, tcols))
    _write_atomic(out / "table.md", table_markdown(entries, shown))
    layers = [
        {"run": r["run"], "point": r["point"], SEED_KEY: r[SEED_KEY],
         "settings": {k: r.get(k) for k in keys}, "layers": r["layers"]}
        for r in rows
    ]  # fmt: skip
    _write_atomic(out / "layers.json", json.dumps(layers, indent=1) + "\n")


def _csv(rows: Sequence[dict[str, Any]], cols: Sequence[str]) -> str:
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(cols), extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: _csv_value(row.get(c)) for c in cols})
    return buffer.getvalue()


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (list, dict, bool)):
        return json.dumps(value)
    return value


# ---------------------------------------------------------------- the sweep


def _hold(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ParamsError(
            f"{out}: another fedpipe sweep is writing there; wait for it or "
            "give --out / --name"
        ) from None
    return fd


def run_sweep(
    runs: Sequence[Run],
    keys: Sequence[str],
    settings: SweepSettings,
    *,
    root: Path = Path("."),
    say: Callable[[str], None] = print,
) -> int:
    """Run every run not finished yet; write the results as each finishes.

    Returns
    -------
    int
        0 when every run has finished, 1 when some failed (named in the output).
    """
    root = root.resolve()
    out = settings.out if settings.out.is_absolute() else root / settings.out
    lock_fd = _hold(out)
    try:
        return _sweep(runs, keys, settings, root, out, say)
    finally:
        os.close(lock_fd)


def _sweep(
    runs: Sequence[Run],
    keys: Sequence[str],
    settings: SweepSettings,
    root: Path,
    out: Path,
    say: Callable[[str], None],
) -> int:
    base = baseline(root)
    saved = saved_experiments(root, base)
    rows = {r["run"] for r in read_rows(out)}
    todo = [r for r in runs if not (r.name in saved and r.name in rows)]
    total, done_before = len(runs), len(runs) - len(todo)
    for r in runs:
        if r not in todo:
            say(f"skip {r.name}: finished (experiment and row exist)")
    write_results(out, runs, keys)
    if not todo:
        say(f"sweep {settings.name}: all {total} runs finished; results in {out}")
        return 0
    (out / "logs").mkdir(exist_ok=True)
    base_params = (root / settings.params_file).read_text()
    cache = _cache_dir(root)
    slots_dir = root / ".dvc" / "tmp" / "sweeps" / settings.name
    jobs = max(1, min(settings.jobs, len(todo)))
    say(f"sweep {settings.name}: {len(todo)} of {total} runs to go, {jobs} at a time "
        f"(slots in {slots_dir.relative_to(root)})")  # fmt: skip
    pending: queue.Queue[Run] = queue.Queue()
    for r in todo:
        pending.put(r)
    state = _State(total=total, finished=done_before, todo=len(todo), jobs=jobs)
    lock, save_lock = threading.Lock(), threading.Lock()
    stop = threading.Event()  # set on Ctrl-C / SIGTERM: start nothing more

    def save(cmd: list[str], slot: Path, log: Path) -> None:
        with save_lock:  # dvc exp save writes shared refs (EXEC_*): one at a time
            _call(cmd, slot, log)

    def worker(i: int) -> None:
        slot = slots_dir / f"slot-{i}"
        try:
            with lock:  # git worktree add: one at a time
                force = open_slot(root, base, slot, cache)
        except (RuntimeError, OSError) as exc:
            with lock:
                say(f"slot-{i}: could not be made ({exc}); its runs go to the others")
            return
        while not stop.is_set():
            try:
                run = pending.get_nowait()
            except queue.Empty:
                return
            log = out / "logs" / f"{run.name}.log"
            log.write_text("")
            try:
                row = run_in_slot(
                    run, slot, base_params=base_params, log=log,
                    centralized=settings.centralized, force=force, save=save,
                )  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - one run's failure, named
                if stop.is_set():
                    return  # ended by the interrupt, not failed
                with lock:
                    state.failed.append(run.name)
                    say(f"FAILED {run.name}: {exc}; log: {log}")
                (slot / RUN_MARKER).unlink(missing_ok=True)
                force = True  # the slot's workspace may be half-written
                continue
            force = False
            with lock:
                with (out / ROWS).open("a") as f:
                    f.write(json.dumps(row) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                (slot / RUN_MARKER).unlink(missing_ok=True)
                write_results(out, runs, keys)
                say(state.finish(run, row))

    threads = [
        threading.Thread(target=worker, args=(i,), daemon=True) for i in range(jobs)
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)
    except BaseException:  # Ctrl-C: end the runs started, leave them to resume
        stop.set()
        for _ in range(2):  # again after the workers stopped: none slipped through
            for i in range(jobs):
                _end_leftover(slots_dir / f"slot-{i}")
            for t in threads:
                t.join(timeout=10)
        raise
    finished = {r["run"] for r in read_rows(out)}
    for r in todo:
        if r.name not in finished and r.name not in state.failed:
            state.failed.append(r.name)  # no slot was left to run it
    if state.failed:
        failed = ", ".join(state.failed)
        say(
            f"sweep {settings.name}: {len(state.failed)} run(s) failed: {failed}; "
            "run the same command again to retry them"
        )
        return 1
    say(f"sweep {settings.name}: {total} runs finished; results in {out}")
    return 0


@dataclass
class _State:
    total: int
    finished: int
    todo: int
    jobs: int
    started: float = 0.0
    ran: int = 0

    def __post_init__(self) -> None:
        self.started = time.perf_counter()
        self.failed: list[str] = []

    def finish(self, run: Run, row: dict[str, Any]) -> str:
        self.finished += 1
        self.ran += 1
        left = self.todo - self.ran - len(self.failed)
        elapsed = time.perf_counter() - self.started
        eta = elapsed / self.ran * left if left > 0 else None
        return progress_line(self.finished, self.total, run, row, eta)

"""One run per project at a time: ``fedpipe run`` holds DVC's own repo lock.

DVC serializes its commands on ``.dvc/tmp/lock``: ``zc.lockfile``, an exclusive
``flock`` on that file, which then holds the holder's pid (`` 1234``). ``fedpipe
run`` takes the very same lock, the same way, for its whole run, so

- a second ``fedpipe run`` in the project refuses at once with one line naming
  the first (its pid and command), before it writes anything (``-S`` included);
- ``dvc repro`` (or ``dvc commit``, ``dvc checkout``...) refuses as it does
  against another DVC process ("Unable to acquire lock"), and ``fedpipe run``
  refuses while a ``dvc repro`` runs (naming the ``dvc`` process);
- a run killed by SIGKILL leaves no stale lock: the kernel drops a ``flock``
  with the last descriptor that holds it.

``dvc repro`` lets go of its repo lock while a stage's command runs (so that the
command may call DVC) and guards the stage's files with its read/write lock
(``.dvc/tmp/rwlock``: paths, pids and commands) instead. So a run that got the repo
lock also reads that file: a live process named there is a ``dvc repro`` in a
stage, and the run refuses, naming it. Named by no live process, a damaged
rwlock (empty or cut short: DVC rewrites it in place, and a kill in between
wedges every later DVC command) or one naming only processes that are gone is
removed, and one line says so (:func:`repair_rwlock`).

The run's own DVC calls must not take the lock again: in this process and in the
``dvc.lock`` recorder (a child process, :mod:`orchestration.dvclock`), :func:`open_repo`
gives a ``Repo`` whose lock is DVC's ``LockNoop`` while this run holds the real
one. The recorder also inherits the locked descriptor (:func:`held_fd`), so the
lock stays held until a record it is writing has landed, even if the run was
killed meanwhile.

``fedpipe stage`` takes no lock: under ``dvc repro`` DVC guards its stages.

Standard library only at import: ``fedpipe run`` takes the lock before Prefect or
DVC are imported.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedpipe.core.errors import FedpipeError

LOCK_PATH = Path(".dvc/tmp/lock")  # DVC's repo lock, relative to the project
RWLOCK_PATH = Path(".dvc/tmp/rwlock")  # DVC's per-path locks of running stages
HOLDER_ENV = "FEDPIPE_REPO_LOCK"  # pid of the run holding it, for its children
RETRY_S = 3.0  # as DVC: a short-lived holder (`dvc status`) is waited for
ORPHAN_WAIT_S = 60.0  # for the recorder of a killed run to land its record
_held: dict[Path, int] = {}  # project root -> locked descriptor (this process)


class ProjectBusy(FedpipeError, RuntimeError):
    """Another process holds the project's DVC repo lock."""


def holder_pid(root: Path = Path(".")) -> int | None:
    """The pid written in the lock file (None if absent or unreadable)."""
    try:
        return int((root / LOCK_PATH).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def describe_process(pid: int | None) -> str:
    """``pid 1234 (fedpipe run)``: the pid with its command line when known."""
    if pid is None:
        return "another process (its pid is not in .dvc/tmp/lock)"
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return f"pid {pid}"
    words = [Path(w).name if i == 0 else w for i, w in enumerate(_command(raw))]
    return f"pid {pid} ({' '.join(words)[:80]})" if words else f"pid {pid}"


def _command(raw: bytes) -> list[str]:
    words = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
    # `python .../bin/fedpipe run`: show the script, not the interpreter
    if len(words) > 1 and Path(words[0]).name.startswith("python"):
        words = words[1:]
    return words


def busy_message(root: Path, command: str, holder: str, lock: Path) -> str:
    """The one line a refused command prints."""
    return (
        f"{root.resolve()}: {holder} is running in this project (it holds DVC's "
        f"lock, {lock}); `{command}` refused: wait for it to end, or stop it"
    )


def rwlock_holders(root: Path = Path(".")) -> list[str]:
    """Live processes other than this one that DVC's ``rwlock`` names (a ``dvc
    repro`` running a stage's command), as ``pid 1234 (dvc repro)``; a file cut
    short is searched for pids as text."""
    try:
        raw = (root / RWLOCK_PATH).read_bytes()
    except FileNotFoundError:
        return []
    info, _ = _parse_rwlock(raw)
    return [describe_process(pid) for pid in _rwlock_pids(info, raw) if _alive(pid)]


def repair_rwlock(root: Path = Path(".")) -> str | None:
    """With the repo lock held and no live process named in DVC's ``rwlock``:
    remove the file when it is damaged or names only processes that are gone.

    DVC rewrites ``.dvc/tmp/rwlock`` in place (truncate, then write) under its
    repo lock; a kill in between leaves it empty or cut short, and every later
    DVC command (``dvc status``, a ``fedpipe run``) then stops with
    ``RWLockFileCorruptedError``. While this process holds the repo lock no DVC
    process edits it, so a damaged file is damage, not a write under way. DVC
    reads a missing file as "no paths locked" (``dvc/rwlock.py``, ``_edit_rwlock``).

    Returns the one line saying what was found and repaired (None: nothing to
    repair). Call :func:`rwlock_holders` first: a live process named there is
    a ``dvc repro`` at work, and the file is its own.
    """
    path = root / RWLOCK_PATH
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    info, problem = _parse_rwlock(raw)
    pids = _rwlock_pids(info, raw)
    if problem is None and not pids:
        return None  # sound, and no path locked
    if problem is None:
        gone = ", ".join(f"pid {pid}" for pid in pids)
        problem = f"it named only processes that are gone ({gone})"
    path.unlink()
    return (
        f"repaired {root.resolve() / RWLOCK_PATH}: {problem}; no live process is "
        "named in it, so it was removed (DVC reads no file as no paths locked)"
    )


def _parse_rwlock(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The rwlock's content as DVC's schema has it, and what is wrong with it
    (None: nothing)."""
    if not raw.strip():
        return None, f"it was empty ({len(raw)} bytes: a DVC write cut short)"
    try:
        info = json.loads(raw)
    except ValueError:
        return None, f"it was not JSON ({len(raw)} bytes: a DVC write cut short)"
    problem = _schema_problem(info)
    return (None, problem) if problem else (info, None)


def _schema_problem(info: Any) -> str | None:
    """What in ``info`` DVC's ``rwlock`` schema rejects (``RWLockFileFormatError``):
    ``{"write": {path: {pid, cmd}}, "read": {path: [{pid, cmd}, ...]}}``."""

    def entry_ok(entry: Any) -> bool:
        return (
            isinstance(entry, dict)
            and set(entry) == {"pid", "cmd"}
            and isinstance(entry["pid"], int)
            and isinstance(entry["cmd"], str)
        )

    wrong = "it was JSON but not DVC's rwlock format"
    if not isinstance(info, dict) or set(info) - {"write", "read"}:
        return wrong
    writes, reads = info.get("write", {}), info.get("read", {})
    if not isinstance(writes, dict) or not isinstance(reads, dict):
        return wrong
    if not all(entry_ok(e) for e in writes.values()):
        return wrong
    if not all(isinstance(r, list) and all(map(entry_ok, r)) for r in reads.values()):
        return wrong
    return None


_PID = re.compile(rb'"pid"\s*:\s*(\d+)')


def _rwlock_pids(info: dict[str, Any] | None, raw: bytes) -> list[int]:
    """The pids the rwlock names, other than this process's (from the text when
    the file does not parse: a live one there may still be at work)."""
    if info is None:
        pids = {int(m) for m in _PID.findall(raw)}
    else:
        entries = list(info.get("write", {}).values())
        for readers in info.get("read", {}).values():
            entries.extend(readers)
        pids = {e["pid"] for e in entries}
    return sorted(pids - {os.getpid()})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _try_flock(path: Path, *, retry_s: float) -> int | None:
    """A descriptor of ``path`` holding an exclusive ``flock``, or None."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + retry_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.25)


def _write_pid(fd: int) -> None:
    """The lock file's content as zc.lockfile writes it: `` <pid>\\n``."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f" {os.getpid()}\n".encode(), 0)


@contextmanager
def hold(
    root: Path = Path("."),
    *,
    command: str = "fedpipe run",
    retry_s: float = RETRY_S,
) -> Iterator[None]:
    """Hold the project's DVC repo lock for the ``with`` block.

    Re-entrant within a process (a run's flow inside ``fedpipe run``). While it
    is held, ``FEDPIPE_REPO_LOCK`` names this process for its children (whose DVC
    calls then take no lock of their own).

    Raises
    ------
    ProjectBusy
        Another process holds it (after ``retry_s`` seconds of retries); the
        message names that process.
    """
    key = root.resolve()
    if key in _held:
        yield
        return
    if not (root / ".dvc").is_dir():  # not a DVC project: nothing to serialize
        yield
        return
    fd = _try_flock(root / LOCK_PATH, retry_s=retry_s)
    if fd is None and (pid := holder_pid(root)) is not None and not _alive(pid):
        # a run killed meanwhile: its recorder finishes the record it was writing
        # (it holds the run's descriptor) and ends; worth waiting for
        fd = _try_flock(root / LOCK_PATH, retry_s=ORPHAN_WAIT_S)
    if fd is None:
        holder = describe_process(holder_pid(root))
        raise ProjectBusy(busy_message(root, command, holder, LOCK_PATH))
    if running := rwlock_holders(root):
        os.close(fd)
        raise ProjectBusy(busy_message(root, command, running[0], RWLOCK_PATH))
    if repaired := repair_rwlock(root):
        print(repaired, file=sys.stderr, flush=True)
    _write_pid(fd)
    os.set_inheritable(fd, False)
    _held[key] = fd
    before = os.environ.get(HOLDER_ENV)
    os.environ[HOLDER_ENV] = str(os.getpid())
    try:
        yield
    finally:
        del _held[key]
        if before is None:
            os.environ.pop(HOLDER_ENV, None)
        else:
            os.environ[HOLDER_ENV] = before
        os.close(fd)  # drops the flock (unless a child still has it)


def held_fd(root: Path) -> int | None:
    """The locked descriptor this process holds for ``root`` (None if none)."""
    return _held.get(root.resolve())


def held_for_us(root: Path) -> bool:
    """Whether the lock is held by this process or, for a child such as the
    ``dvc.lock`` recorder, by the run that started it."""
    if root.resolve() in _held:
        return True
    owner = os.environ.get(HOLDER_ENV, "")
    return owner.isdigit() and int(owner) in (os.getpid(), os.getppid())


def open_repo(root: Path, *, held: bool | None = None) -> Any:
    """``dvc.repo.Repo(root)``; its lock a no-op while this run holds the real one
    (DVC would otherwise wait 3 s for it and fail). ``held``: decided by the
    caller (the recorder decides once, at start), else :func:`held_for_us`."""
    from dvc.lock import LockNoop
    from dvc.repo import Repo

    repo = Repo(str(root))
    if held_for_us(root) if held is None else held:
        repo.lock = LockNoop()
    return repo

"""Recording stages in ``dvc.lock`` from a process of its own.

``fedpipe run`` records each stage as ``dvc commit --force`` would. Through DVC's
API that means parsing and rewriting ``dvc.lock`` (a round-trip YAML parse, pure
Python) for every stage: about 0.1-0.7 s of CPU per round at 10 rounds, growing
with the rounds, done in the run's process while the next round trains, where it
holds the interpreter lock the training loop needs. Here the same DVC calls run in
a child process (``python -m orchestration.dvclock ROOT``, which imports DVC and nothing
else), and every stage that finished while the previous record was being written
is recorded in one go: one parse and one write of ``dvc.lock`` for all of them.

The protocol is one JSON line per request on stdin (``{"stages": [...]}``) and one
per reply on stdout (``{"ok": true}`` or ``{"error": "..."}``). The same process
also answers which stages are up to date (``{"fresh": [...]}``, replied
``{"fresh": n}``) when a run starts: the run's own process imports no DVC.

A record still costs CPU that the training beside it wants (a round-trip YAML
parse and write of the whole ``dvc.lock``, which grows with the rounds: about
0.5 s a record at 12 rounds of 1,000 clients, py-spy), so the recorder rests
between records: after a record that took t seconds the next waits until
``t * (1 / BUSY_SHARE - 1)`` seconds have passed (:meth:`LockRecorder.rested`;
``fedpipe run`` rests between rounds only, a data stage is recorded at once),
and takes every stage that finished meanwhile. The recorder is busy at most
``BUSY_SHARE`` of the time; a run that is killed outright (``kill -9``) can lose
the records of the rounds of that rest (a rerun recomputes them, same bits);
Ctrl-C, SIGTERM and a lost Prefect server record them before the run ends. The
record in flight at a ``kill -9`` lands (this process has a session of its own);
its reply then finds the pipe closed and the process ends, writing nothing into
the killed run's output.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Iterator, Sequence
from itertools import groupby
from pathlib import Path
from typing import Any

from fedpipe.core import atomic
from fedpipe.core.diskspace import DiskFullError, disk_full_in
from orchestration.repolock import held_fd

os.environ.setdefault("DVC_NO_ANALYTICS", "1")

BUSY_SHARE = 0.2  # at most this share of the time spent writing dvc.lock


def commit_stages(
    root: Path, names: Sequence[str], *, lock_held: bool | None = None
) -> None:
    """Record the stages ``names`` (``round@3``...) in ``dvc.lock``: their deps,
    params and outs as they are now, outs copied into DVC's cache without
    relinking the workspace files (the next stage may be reading them), and
    their entries in DVC's run cache; as ``dvc commit --force`` does.

    ``lock_held``: the run that started this recorder holds DVC's repo lock
    (:mod:`orchestration.repolock`); DVC then does not take it again."""
    from dvc.repo import locked

    from orchestration.repolock import open_repo

    logging.getLogger("dvc").setLevel(logging.WARNING)
    with open_repo(root, held=lock_held) as repo:
        locked(record_stages_in)(repo, names)


def record_stages_in(repo: Any, names: Sequence[str]) -> None:
    """:func:`commit_stages` in the open ``repo`` (DVC's lock already held)."""
    by_name = {stage.addressing: stage for stage in repo.index.stages}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise KeyError(f"no stage named {', '.join(missing)} in dvc.yaml")
    stages = [by_name[n] for n in names]
    with _params_read_once():
        for stage in stages:
            stage.save()
            stage.commit(relink=False)
    for dvcfile, group in groupby(stages, key=lambda s: s.dvcfile):
        dump_lock(Path(dvcfile._lockfile.path), list(group))


@contextlib.contextmanager
def _params_read_once() -> Iterator[None]:
    """DVC reads ``params.yaml`` three times for every stage it saves (the
    params dependency's hash, then twice more for the run cache's key), each a
    round-trip YAML parse and a ``dpath`` walk of the whole file per key: 44 %
    of a round's record (cProfile, 24 rounds of 1,000 clients). Every round
    stage names the same keys, so while the stages of one record are saved a
    read is made once per file, keys and the file's state (inode, size, mtime,
    ctime: a file changed meanwhile is read again) and each caller gets its own
    deep copy of what DVC's own reader returned (tests/test_dvclock_dump.py)."""
    from dvc.dependency import param

    original = param.read_param_file
    seen: dict[tuple, Any] = {}

    def read_param_file(fs, path, key_paths=None, flatten=False, **load_kwargs):  # type: ignore[no-untyped-def]
        try:
            st = os.stat(path)
            key = (
                path,
                None if key_paths is None else tuple(key_paths),
                flatten,
                tuple(sorted(load_kwargs.items())),
                st.st_ino,
                st.st_size,
                st.st_mtime_ns,
                st.st_ctime_ns,
            )
            hash(key)
        except (OSError, TypeError):  # not a local file, or unhashable options
            return original(fs, path, key_paths, flatten, **load_kwargs)
        if key not in seen:
            seen[key] = original(fs, path, key_paths, flatten, **load_kwargs)
        return copy.deepcopy(seen[key])

    param.read_param_file = read_param_file
    try:
        yield
    finally:
        param.read_param_file = original


class _RecordSession:
    """The recorder's records of one run: while the run holds DVC's lock, one
    repository opened for all of them, ``dvc.yaml`` parsed into stages once
    (nothing else writes ``dvc.yaml`` or ``dvc.lock`` meanwhile); opening it and
    parsing took about a third of a record's CPU, in every record (py-spy, a
    4-round tiny run). Without the lock, or after a record failed, each record
    opens the repository anew (:func:`commit_stages`)."""

    def __init__(self, root: Path, lock_held: bool) -> None:
        self.root, self.lock_held = root, lock_held
        self._repo: Any = None

    def record(self, names: Sequence[str]) -> None:
        if not self.lock_held:
            commit_stages(self.root, names, lock_held=False)
            return
        from orchestration.repolock import open_repo

        if self._repo is None:
            logging.getLogger("dvc").setLevel(logging.WARNING)
            self._repo = open_repo(self.root, held=True)
        try:
            with self._repo.lock:  # a no-op lock (the run holds DVC's) DVC asserts
                record_stages_in(self._repo, names)
        except BaseException:
            self.close()  # the next record starts from the files
            raise

    def close(self) -> None:
        if self._repo is not None:
            repo, self._repo = self._repo, None
            repo.close()


def fresh_stages(
    root: Path, names: Sequence[str], *, lock_held: bool | None = None
) -> int:
    """How many of the stages ``names`` (in pipeline order), from the first, are
    recorded in ``dvc.lock`` with nothing they use changed (``dvc status``, one
    repository opened for all).

    Raises
    ------
    ProjectBusy
        A file of the project another DVC command holds (or held)."""
    from dvc.lock import LockError

    from orchestration.repolock import ProjectBusy, open_repo

    logging.getLogger("dvc").setLevel(logging.WARNING)
    with open_repo(root, held=lock_held) as repo:
        try:
            for n, name in enumerate(names):
                if repo.status(targets=[name]):
                    return n
        except LockError as exc:
            raise ProjectBusy(f"{root.resolve()}: {exc}") from exc
    return len(names)


def restore_stage_outputs(root: Path, stage: str) -> None:
    """Check ``stage``'s outputs out again as ``dvc.lock`` records them (if it does).

    Used when data that was just ingested fails validation: the workspace goes back
    to the last good data set. Without a recorded version there is nothing to
    restore and the (rejected) outputs stay for inspection.
    """
    from orchestration.repolock import open_repo

    # `import dvc` sets its logger to INFO; every stage would then print "Updating
    # lock file" twice (DVC's handler and Prefect's). Prefect logs the stage already.
    repo = open_repo(root)  # no second lock while this run holds DVC's
    logging.getLogger("dvc").setLevel(logging.WARNING)
    with repo:
        try:
            repo.checkout(targets=[stage], force=True)
        except Exception:  # noqa: BLE001 - nothing recorded yet: keep what is there
            return


def dump_lock(path: Path, stages: Sequence[Any]) -> None:
    """Write ``stages``' records into the lock file ``path`` as DVC's
    ``Lockfile.dump_stages`` does (the same YAML, byte for byte), but replaced
    whole (:mod:`fedpipe.core.atomic`): DVC truncates ``dvc.lock`` and writes it
    in place, so a full disk or a kill in between would leave every recorded
    round's record cut short; here the old file stays until the new one is
    complete.

    DVC parses and re-emits the whole file (ruamel's round trip, pure Python):
    a record then costs time in proportion to the rounds recorded before it,
    0.5 s of CPU at 12 rounds of a 1,000-client project, while the run trains
    on the same cores. Only the stages being recorded are emitted here, each
    block put in place of its old one or after the last (:func:`splice_lock`);
    the file is the one DVC's full rewrite gives (``tests/test_dvclock_dump.py``),
    and is written DVC's way where the old file is not laid out as DVC writes
    it or a new block does not read back as its record.
    """
    from dvc.stage import serialize

    records: dict[str, Any] = {}
    for stage in stages:
        records.update(serialize.to_lockfile(stage))
    old = path.read_text() if path.exists() else ""
    text = splice_lock(old, records)
    if text is None:
        text = rewrite_lock(old, records, str(path))
    atomic.write_text(path, text)


def rewrite_lock(old: str, records: dict[str, Any], name: str = "dvc.lock") -> str:
    """The lock file text ``old`` with ``records`` (stage name -> record) merged
    in, as DVC writes it: parsed and emitted whole."""
    from dvc.utils.serialize import dumps_yaml, parse_yaml_for_update

    data = parse_yaml_for_update(old, name) if old else {}
    if not data:
        data.update({"schema": "2.0"})
    data["stages"] = data.get("stages", {})
    data["stages"].update(records)
    return str(dumps_yaml(data))


_LOCK_HEAD = "schema: '2.0'\nstages:\n"


def splice_lock(old: str, records: dict[str, Any]) -> str | None:
    """:func:`rewrite_lock`'s text, emitting only ``records``' blocks; None where
    ``old`` is not a lock file as DVC lays it out (its head, then one block per
    stage, every line of a block indented under its first) or a block does not
    read back as its record."""
    from dvc.utils.serialize import dumps_yaml
    from ruamel.yaml import YAML

    if not old.startswith(_LOCK_HEAD) or not old.endswith("\n"):
        return None
    lines: dict[str, list[str]] = {}  # a stage's first line -> its lines
    current: list[str] | None = None
    for line in old[len(_LOCK_HEAD) :].splitlines(keepends=True):
        if line.lstrip().startswith("#"):
            return None  # a comment: DVC's round trip keeps it where it is
        if line.startswith("  ") and not line.startswith("   "):
            if line in lines:
                return None
            current = lines[line] = [line]
        elif current is None or not line.startswith("    "):
            return None  # not DVC's layout
        else:
            current.append(line)
    blocks = {first: "".join(block) for first, block in lines.items()}
    safe = YAML(typ="safe")  # libyaml's parser where there, YAML 1.2 as DVC's
    for stage, record in records.items():
        block = str(dumps_yaml({"stages": {stage: record}}))
        # the block stands alone: one stage, its lines indented under it, and
        # it reads back as the record
        if safe.load(block) != {"stages": {stage: _plain(record)}}:
            return None
        block = block.removeprefix("stages:\n")
        first, *rest = block.splitlines(keepends=True)
        if first.startswith("   ") or any(not r.startswith("    ") for r in rest):
            return None
        blocks[first] = block
    return _LOCK_HEAD + "".join(blocks.values())


def _plain(value: Any) -> Any:
    """``value`` (DVC's record: ordered dicts, lists, scalars) as plain dicts and
    lists, to compare with what a YAML parser reads back."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class LockRecorder:
    """A child process that records stages in ``dvc.lock`` for one run.

    Started on first use; :meth:`close` ends it. One request at a time.
    Stages passed to :meth:`queue` (finished, their record not yet written) are
    what :func:`freeze` records before a process ends abruptly.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._queued: list[str] = []
        self._rest_until = 0.0
        _recorders.add(self)

    def rested(self) -> bool:
        """Whether the rest after the last record is over (see the module)."""
        return time.monotonic() >= self._rest_until

    def queue(self, names: Sequence[str]) -> None:
        """``names`` finished; a :meth:`record` of them follows."""
        self._queued.extend(n for n in names if n not in self._queued)

    def fresh_prefix(self, names: Sequence[str]) -> int:
        """:func:`fresh_stages` of ``names``, worked out in the recorder's process.

        Raises
        ------
        ProjectBusy
            As :func:`fresh_stages`.
        """
        with self._lock:
            reply = self._ask({"fresh": list(names)}, what="checking dvc.lock")
        if "busy" in reply:
            from orchestration.repolock import ProjectBusy

            raise ProjectBusy(reply["busy"])
        if "error" in reply:
            raise RuntimeError(f"checking dvc.lock failed:\n{reply['error']}")
        return int(reply["fresh"])

    def record(self, names: Sequence[str]) -> None:
        """Record ``names`` (in pipeline order); raises what DVC raised."""
        with self._lock:
            started = time.monotonic()
            self._record(names)
            self._queued = [n for n in self._queued if n not in names]
            ended = time.monotonic()
            self._rest_until = ended + (ended - started) * (1 / BUSY_SHARE - 1)

    def _ask(self, request: dict[str, Any], *, what: str) -> dict[str, Any]:
        """One request to the recorder's process and its reply (lock held)."""
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            self._proc = None
            raise RuntimeError(
                f"the dvc.lock recorder (pid {proc.pid}) exited with "
                f"{proc.wait()} while {what}"
            )
        return dict(json.loads(line))

    def _record(self, names: Sequence[str]) -> None:
        reply = self._ask({"stages": list(names)}, what=f"recording {', '.join(names)}")
        if "disk_full" in reply:  # one line for the CLI, not DVC's traceback
            full = reply["disk_full"]
            raise DiskFullError(Path(full["path"]), needed=full["needed"])
        if "error" in reply:
            stages = ", ".join(names)
            raise RuntimeError(
                f"recording {stages} in dvc.lock failed:\n{reply['error']}"
            )

    def _record_queued(self) -> bool:
        """With the lock held: record the queued stages (False if that failed)."""
        try:
            if self._queued:
                self._record(self._queued)
        except Exception:  # noqa: BLE001 - the process is ending; they rerun later
            return False
        return True

    def _start(self) -> subprocess.Popen[str]:
        if self._proc is None or self._proc.poll() is not None:
            # the run's locked descriptor of DVC's repo lock, if it holds one:
            # a record in flight keeps the project locked until it has landed
            held = held_fd(self.root)
            self._proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "orchestration.dvclock",
                    str(self.root.resolve()),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                cwd=self.root,
                env=os.environ | {"PYTHONPATH": _import_path()},
                start_new_session=True,  # Ctrl-C goes to the run, which closes us
                pass_fds=() if held is None else (held,),
            )
        return self._proc

    def close(self) -> None:
        with self._lock:
            if self._proc is not None:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                try:
                    self._proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
                self._proc = None

    def __enter__(self) -> LockRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_recorders: weakref.WeakSet[LockRecorder] = weakref.WeakSet()


def freeze(timeout: float) -> bool:
    """Before a process ends abruptly (its Prefect server gone): let the record
    being written land, record the stages queued behind it, and start no other
    record. False if a record was still being written after ``timeout`` seconds
    (it lands anyway: the recorder's process is its own) or failed."""
    deadline = time.monotonic() + timeout
    landed = []
    for recorder in list(_recorders):
        if recorder._lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            landed.append(recorder._record_queued())
        else:
            landed.append(False)
    return all(landed)


def _import_path() -> str:
    """PYTHONPATH for the child: where ``tasks`` is importable from, first."""
    here = str(Path(__file__).resolve().parent.parent)
    rest = os.environ.get("PYTHONPATH")
    return here if not rest else f"{here}{os.pathsep}{rest}"


#: the name DVC gives a file while it writes it (``dvc_objects.fs.utils.tmp_fname``:
#: a dot, 16 random bytes in URL-safe base64, ``.tmp``)
DVC_PARTIAL = re.compile(r"^\.[A-Za-z0-9_-]{22}\.tmp$")


def _drop_partial_copies(root: Path) -> None:
    """Remove the half-written files DVC leaves when the disk fills while it
    records: copies into its cache (``.NAME.tmp``) and, beside the outputs in
    the workspace, the files it writes there (seen in ``metrics/clients`` and
    ``metrics/health`` after a disk filled during a later round: issue 36, the
    420 KiB case of tests/e2e/test_disk_full.py). They hold the space the
    operator frees for the resumed run, and DVC does not reuse them."""
    for tmp in (root / ".dvc" / "cache" / "files" / "md5").rglob(".*.tmp"):
        tmp.unlink(missing_ok=True)
    for folder, dirs, files in os.walk(root):
        if Path(folder) == root:
            dirs[:] = [d for d in dirs if d not in (".git", ".dvc")]
        for name in files:
            if DVC_PARTIAL.match(name):
                (Path(folder) / name).unlink(missing_ok=True)


def _fresh_reply(root: Path, names: list[str], lock_held: bool) -> dict[str, Any]:
    from orchestration.repolock import ProjectBusy

    try:
        return {"fresh": fresh_stages(root, names, lock_held=lock_held)}
    except ProjectBusy as exc:
        return {"busy": str(exc)}
    except Exception:  # noqa: BLE001 - reported to the run, which raises it
        return {"error": traceback.format_exc()}


def main(argv: Sequence[str]) -> int:
    from orchestration.repolock import held_for_us

    root = Path(argv[0])
    lock_held = held_for_us(root)  # decided now: the run may be gone later
    records = _RecordSession(root, lock_held)
    try:
        return _serve(root, lock_held, records)
    finally:
        records.close()


def _serve(root: Path, lock_held: bool, records: _RecordSession) -> int:
    """Answer the run's requests (one JSON line each) until its pipe closes."""
    for line in sys.stdin:
        request = json.loads(line)
        if "fresh" in request:
            if not _reply(_fresh_reply(root, request["fresh"], lock_held)):
                return 0
            continue
        names = request["stages"]
        try:
            records.record(names)
            reply: dict[str, object] = {"ok": True}
        except Exception as exc:  # noqa: BLE001 - reported to the run, which raises it
            reply = {"error": traceback.format_exc()}
            # DVC copying the outputs into its cache says no file name
            full = disk_full_in(exc, where=root / ".dvc" / "cache")
            if full is not None:
                reply["disk_full"] = {"path": str(full.path), "needed": full.needed}
            if lock_held:  # no other DVC process writes to this project now
                _drop_partial_copies(root)  # whatever stopped the record
        if not _reply(reply):
            return 0
    return 0


def _reply(reply: dict[str, Any]) -> bool:
    """Send ``reply`` to the run; False when the run is gone (its end of the
    pipe closed: a ``kill -9`` of its process group, which this process, in a
    session of its own, outlives). The record has landed by then; nothing is
    written into the dead run's output (its stderr is ours), and stdout goes to
    /dev/null so that Python's flush at exit does not complain either."""
    try:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return False
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

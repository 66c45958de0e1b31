"""What a run would redo, remembered until something it depends on changes.

DVC's answer (:func:`fedpipe.observe.status.staleness`: the stale stages and
why, the recorded rounds, the damaged cache objects) costs about 1.5 s on a
30-round project: DVC's import, its repo opened, every stage's deps and outs
checked, every model-stage cache object hashed. It depends on nothing but

- the text of ``dvc.yaml``, ``dvc.lock``, the params files ``dvc.lock`` names,
  ``.dvcignore`` and DVC's project config, and
- the files under every dep and out ``dvc.lock`` (or the answer) names and the
  cache objects of every recorded out.

So each answer is kept in ``.dvc/tmp/fedpipe-staleness.json`` (DVC's own scratch
folder, never versioned) with a digest of those texts and of each file's
``stat`` (size, mtime, ctime, inode, mode). While both digests match, the kept
answer is the answer: no DVC, no hashing. Anything edited, written, deleted,
added, chmod-ed or touched changes a digest (a cache object altered in place
with its mtime put back still changes its ctime), and DVC answers again.
``fedpipe status`` keeps its whole answer the same way
(``.dvc/tmp/fedpipe-status.json``), over the run's files too (:data:`VIEWS`)
and fedpipe's own source.

An answer is kept only when the files did not move while it was worked out,
none was written in the last :data:`SETTLE_S` seconds (a second write in the
same clock tick would keep its stat), and the project's cache is DVC's default
one. Like DVC's own state database, this trusts ``stat``: a change that keeps
size, mtime, ctime and inode (bit rot below the file system) goes unseen until
the record goes (delete ``.dvc/tmp/fedpipe-*.json``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fedpipe.config import layout
from fedpipe.core import atomic
from fedpipe.observe.cachecheck import CACHE, Damaged
from fedpipe.observe.status import (
    Reason,
    Staleness,
    Status,
    collect,
    git_state,
    staleness,
)

FORMAT = 3
SETTLE_S = 1.0
"""Files written this recently are not trusted by their ``stat`` yet."""

TEXTS = ("dvc.yaml", "dvc.lock", ".dvcignore", ".dvc/config", ".dvc/config.local")
"""Files whose bytes an answer depends on (with the params files)."""

VIEWS = (
    "params.yaml",
    "metrics",
    "reports",
    str(layout.PREPARED_DIR),
    str(layout.MANIFEST.parent),
    str(layout.ORACLE_DIR),
)
"""What ``fedpipe status`` reads besides DVC's record (the doctor's files)."""


def remembered_staleness(root: Path, raw: Mapping | None) -> Staleness:
    """:func:`fedpipe.observe.status.staleness` of ``root``, from its record
    when nothing it depends on changed since (see the module); DVC's answer,
    then kept, otherwise."""
    root = Path(root)
    kept = _Memo(root, "staleness").get()
    if kept is not None:
        return _staleness_from(kept)
    inputs = _inputs(root)
    before = None if inputs is None else _snapshot(root, *inputs)
    answer = staleness(root, raw)
    if inputs is not None and not answer.problems:
        texts, paths = inputs
        extra = [str(r.path) for rs in (answer.stale or {}).values() for r in rs]
        value = _staleness_to(answer)
        if _staleness_from(_json_copy(value)) == answer:
            _Memo(root, "staleness").put(texts, paths, value, before, extra=extra)
    return answer


def kept_staleness(root: Path) -> Staleness | None:
    """The kept answer of :func:`remembered_staleness` if it still holds, else
    None (DVC is not asked)."""
    kept = _Memo(Path(root), "staleness").get()
    return None if kept is None else _staleness_from(kept)


def remembered(
    root: Path, name: str, compute: Callable[[], Any], *, also: Iterable[str] = ()
) -> Any:
    """``compute()``'s value (JSON), kept in ``.dvc/tmp/fedpipe-NAME.json``
    while the texts and files DVC's answer depends on, the files ``also``
    names and fedpipe's own source are as they were; a value of None, one
    worked out while they changed (``compute`` may write them) or any
    exception is not kept."""
    root = Path(root)
    memo = _Memo(root, name)
    kept = memo.get()
    if kept is not None:
        return kept
    inputs = _inputs(root)
    if inputs is not None:
        inputs = (inputs[0], [*inputs[1], *also, *_own_source()])
    before = None if inputs is None else _snapshot(root, *inputs)
    value = compute()
    if inputs is not None and value is not None and _json_copy(value) == value:
        memo.put(*inputs, value, before)
    return value


def remembered_status(root: Path) -> Status:
    """:func:`fedpipe.observe.status.collect`'s answer for ``root``, from its
    record when none of the files it reads changed since; its git part and the
    time taken are always fresh."""
    started = time.perf_counter()
    root = Path(root)
    memo = _Memo(root, "status")
    kept = memo.get()
    if kept is not None:
        return dataclasses.replace(
            _status_from(kept),
            git=git_state(root),
            seconds=round(time.perf_counter() - started, 3),
        )
    inputs = _inputs(root)
    if inputs is not None:
        inputs = (inputs[0], [*inputs[1], *VIEWS, *_own_source()])
    before = None if inputs is None else _snapshot(root, *inputs)
    status = collect(root, check=remembered_staleness)
    if inputs is not None and not status.problems:
        value = _status_to(status)
        if _status_from(_json_copy(value)) == _status_from(value):
            memo.put(*inputs, value, before)
    return status


# ---------------------------------------------------------------- the record


class _Memo:
    """A value kept in ``.dvc/tmp/fedpipe-NAME.json`` with the digests of the
    texts and the files' stats it was worked out from."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.path = root / ".dvc" / "tmp" / f"fedpipe-{name}.json"

    def get(self) -> Any | None:
        """The kept value if its texts and files are as they were, else None."""
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            return None
        if _texts_digest(self.root, record["texts"]) != record["texts_digest"]:
            return None
        if _digest(_stats(self.root, record["paths"])[0]) != record["stats_digest"]:
            return None
        return record["value"]

    def put(
        self,
        texts: list[str],
        paths: list[str],
        value: Any,
        before: tuple[str | None, str] | None,
        *,
        extra: Iterable[str] = (),
    ) -> None:
        """Keep ``value``, worked out from ``texts`` and ``paths`` (and the
        files in ``extra`` it names), if they are as they were before it was
        (``before``: :func:`_snapshot`) and settled."""
        if (
            not self.path.parent.is_dir()
            or _snapshot(self.root, texts, paths) != before
        ):
            return
        paths = sorted({*paths, *extra})
        lines, newest = _stats(self.root, paths)
        if newest > time.time() - SETTLE_S:
            return
        record = {
            "format": FORMAT,
            "texts": texts,
            "texts_digest": _texts_digest(self.root, texts),
            "paths": paths,
            "stats_digest": _digest(lines),
            "value": value,
        }
        atomic.write_text(self.path, json.dumps(record), durable=False)


def _snapshot(root: Path, texts: list[str], paths: list[str]) -> tuple[str | None, str]:
    return _texts_digest(root, texts), _digest(_stats(root, paths)[0])


def _inputs(root: Path) -> tuple[list[str], list[str]] | None:
    """The texts and the paths (deps, outs, their cache objects) DVC's answer
    depends on, from ``dvc.lock``; None where it cannot be kept (no dvc.lock, a
    cache elsewhere than ``.dvc/cache``)."""
    lock = _read_lock(root)
    if lock is None or _own_cache_dir(root):
        return None
    params_files = {f for entry in lock.values() for f in entry.get("params") or {}}
    paths: set[str] = set()
    for entry in lock.values():
        for dep in entry.get("deps") or []:
            paths.add(str(dep["path"]))
        for out in entry.get("outs") or []:
            paths.add(str(out["path"]))
            paths.update(_objects(root, out.get("md5")))
    return [*TEXTS, *sorted(params_files)], sorted(paths)


def _read_lock(root: Path) -> dict[str, Any] | None:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load((root / "dvc.lock").read_text(), Loader=loader)  # noqa: S506
    except (OSError, yaml.YAMLError):
        return None
    stages = data.get("stages") if isinstance(data, dict) else None
    return stages if isinstance(stages, dict) else None


def _own_cache_dir(root: Path) -> bool:
    """Whether DVC's project config has a cache section (another cache folder
    or link type): its objects may not be where this looks."""
    for name in (".dvc/config", ".dvc/config.local"):
        try:
            text = (root / name).read_text()
        except OSError:
            continue
        if any(line.strip().startswith("[cache") for line in text.splitlines()):
            return True
    return False


def _objects(root: Path, md5: Any) -> list[str]:
    """The cache objects (paths under ``root``) of a recorded out's ``md5``: a
    directory's listing and the objects it lists."""
    if not isinstance(md5, str) or len(md5) < 3:
        return []
    found = [_object(md5)]
    if md5.endswith(".dir"):
        try:
            listing = json.loads((root / found[0]).read_text())
        except (OSError, ValueError):
            return found
        found += [
            _object(str(e["md5"]))
            for e in listing
            if isinstance(e, dict) and isinstance(e.get("md5"), str)
        ]
    return found


def _object(md5: str) -> str:
    return (CACHE / md5[:2] / md5[2:]).as_posix()


def _own_source() -> list[str]:
    """fedpipe's own modules (absolute paths): a changed checker or doctor
    changes the answer."""
    here = Path(__file__).resolve().parent.parent
    return [str(here / name) for name in ("fedpipe", "orchestration", "fedpipe_app")]


def _texts_digest(root: Path, names: Iterable[str]) -> str | None:
    digest = hashlib.md5()
    for name in names:
        try:
            data = (root / name).read_bytes()
        except FileNotFoundError:
            data = b"\0absent"
        except OSError:
            return None
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _stats(root: Path, paths: Iterable[str]) -> tuple[list[str], float]:
    """One line per file and folder under ``paths``, and the newest mtime or
    ctime among them (seconds)."""
    lines: list[str] = []
    newest = 0.0
    for path in paths:
        for name, st in _walk(root, path):
            if st is None:
                lines.append(f"{name}\0-")
                continue
            lines.append(
                f"{name}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}"
                f"\0{st.st_ino}\0{st.st_mode}"
            )
            newest = max(newest, st.st_mtime, st.st_ctime)
    return lines, newest


def _digest(lines: list[str]) -> str:
    return hashlib.md5("\n".join(lines).encode()).hexdigest()


def _walk(root: Path, path: str) -> Iterable[tuple[str, os.stat_result | None]]:
    """``path`` (under ``root``) and, for a directory, every file and folder
    under it but Python's bytecode caches, sorted; names as given."""
    top = root / path
    try:
        st = top.lstat()
    except OSError:
        yield path, None
        return
    yield path, st
    if not top.is_dir():
        return
    for folder, dirs, files in os.walk(top):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(dirs + files):
            full = os.path.join(folder, name)
            try:
                yield full, os.lstat(full)
            except OSError:
                yield full, None


def _json_copy(value: Any) -> Any:
    return json.loads(json.dumps(value))


# ---------------------------------------------------------------- the answers


def _staleness_to(answer: Staleness) -> dict[str, Any]:
    return {
        "stale": None
        if answer.stale is None
        else {s: [asdict(r) for r in rs] for s, rs in answer.stale.items()},
        "rounds": answer.rounds,
        "damaged": [asdict(d) for d in answer.damaged],
        "problems": answer.problems,
        "pipeline": answer.pipeline,
    }


def _staleness_from(data: Mapping[str, Any]) -> Staleness:
    stale = data["stale"]
    return Staleness(
        stale=None
        if stale is None
        else {s: [Reason(**r) for r in rs] for s, rs in stale.items()},
        rounds=data["rounds"],
        damaged=[Damaged(**d) for d in data["damaged"]],
        problems=list(data["problems"]),
        pipeline=data.get("pipeline"),
    )


def _status_to(status: Status) -> dict[str, Any]:
    out = asdict(status)
    out["stale"] = _staleness_to(Staleness(status.stale, None, [], []))["stale"]
    return out


def _status_from(data: Mapping[str, Any]) -> Status:
    fields = dict(data)
    fields["stale"] = _staleness_from(
        {"stale": data["stale"], "rounds": None, "damaged": [], "problems": []}
    ).stale
    return Status(**fields)

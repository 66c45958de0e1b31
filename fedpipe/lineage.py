"""Lineage audit: from an artifact back to the raw data, verified against dvc.lock.

``dvc.lock`` records, for every stage that ran, its command, the params it read and
the md5 of each input and output. This module reads it (and ``dvc.yaml``) as plain
YAML, walks from a target artifact up through the stages that produced its inputs
to the raw data, and checks the record against the project as it is now:

* **changed** - a file or directory on disk no longer has the md5 ``dvc.lock``
  records for it (directories are compared file by file when DVC's cache holds
  the recorded listing);
* **missing** - a recorded output or input is not on disk;
* **stale** - the record no longer fits together: a stage ran on an input whose
  md5 differs from what the upstream stage now records, a param in
  ``params.yaml`` differs from the value the stage read, or ``dvc.yaml`` now gives
  the stage a different command.

Hashes follow DVC 3: a file's md5 is the plain md5 of its bytes; a directory's is
the md5 of the JSON listing ``[{"md5": ..., "relpath": ...}, ...]`` (sorted by
relpath, ``json.dumps(..., sort_keys=True)``) followed by ``.dir``; the listing
itself is kept in the cache at ``.dvc/cache/files/md5/XX/REST.dir``.

Typical use::

    lineage = audit(Path("."), ["round", "4"])
    print(format_text(lineage))
    raise SystemExit(0 if lineage.verified else 1)

No DVC, Prefect or TensorFlow import: the audit runs in well under a second plus
the time to hash the files.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import subprocess
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from fedpipe import layout

__all__ = [
    "Check",
    "Flag",
    "GitState",
    "Lineage",
    "LineageError",
    "RawData",
    "StageAudit",
    "audit",
    "dir_md5",
    "file_md5",
    "format_json",
    "format_mermaid",
    "format_text",
]

LOCK_FILE = "dvc.lock"
PIPELINE_FILE = "dvc.yaml"
ROUND_PREFIX = f"{layout.ROUND_STAGE}@"
_CHUNK = 1 << 20
_MAX_LISTED = 5


class LineageError(ValueError):
    """The target cannot be resolved (unknown round, path no stage produces, ...)."""


# ---------------------------------------------------------------- hashing


def file_md5(path: Path) -> str:
    """md5 of a file's bytes, as DVC 3 records it (``hash: md5``)."""
    digest = hashlib.md5()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def dir_md5(listing: Sequence[Mapping[str, str]]) -> str:
    """DVC 3's hash of a directory from its listing of ``{"md5", "relpath"}``.

    Parameters
    ----------
    listing : sequence of mapping
        One ``{"md5": ..., "relpath": ...}`` per file (posix relpaths).

    Returns
    -------
    str
        ``md5(json.dumps(sorted listing, sort_keys=True)) + ".dir"``.
    """
    entries = sorted(
        ({"md5": e["md5"], "relpath": e["relpath"]} for e in listing),
        key=lambda e: e["relpath"],
    )
    blob = json.dumps(entries, sort_keys=True).encode("utf-8")
    return hashlib.md5(blob).hexdigest() + ".dir"


def _ignore_patterns(root: Path) -> list[str]:
    """Patterns of ``.dvcignore`` (comments and blank lines dropped)."""
    path = root / ".dvcignore"
    if not path.is_file():
        return []
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _ignored(relpath: str, *, is_dir: bool, patterns: Sequence[str]) -> bool:
    """A simple reading of gitignore patterns (what ``.dvcignore`` holds).

    Supports the forms fedpipe's ``.dvcignore`` uses: ``name``, ``*.ext``,
    ``dir/`` (directories only) and ``/anchored`` (relative to the project).
    """
    name = relpath.rsplit("/", 1)[-1]
    for pattern in patterns:
        dir_only = pattern.endswith("/")
        pat = pattern.rstrip("/")
        if dir_only and not is_dir:
            continue
        if pat.startswith("/"):
            if fnmatch.fnmatch(relpath, pat[1:]):
                return True
        elif "/" in pat:
            if fnmatch.fnmatch(relpath, pat):
                return True
        elif fnmatch.fnmatch(name, pat):
            return True
    return False


class _Disk:
    """Hashes of files and directories under ``root``, each computed once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._patterns = _ignore_patterns(root)
        self._files: dict[str, str | None] = {}
        self._dirs: dict[str, list[dict[str, str]] | None] = {}

    def kind(self, rel: str) -> str | None:
        """``"file"``, ``"dir"`` or None when nothing is at ``rel``."""
        path = self.root / rel
        if path.is_file():
            return "file"
        if path.is_dir():
            return "dir"
        return None

    def file(self, rel: str) -> str | None:
        """md5 of the file at ``rel``; None when it is not a file."""
        if rel not in self._files:
            path = self.root / rel
            self._files[rel] = file_md5(path) if path.is_file() else None
        return self._files[rel]

    def listing(self, rel: str) -> list[dict[str, str]] | None:
        """DVC-style listing of the directory at ``rel``; None when not a dir."""
        if rel not in self._dirs:
            base = self.root / rel
            if not base.is_dir():
                self._dirs[rel] = None
            else:
                self._dirs[rel] = self._walk(base, rel)
        return self._dirs[rel]

    def _walk(self, base: Path, rel: str) -> list[dict[str, str]]:
        entries = []
        for dirpath, dirnames, filenames in os.walk(base):
            here = Path(dirpath).relative_to(self.root).as_posix()
            dirnames[:] = [
                d
                for d in dirnames
                if not _ignored(f"{here}/{d}", is_dir=True, patterns=self._patterns)
            ]
            for name in filenames:
                full = f"{here}/{name}"
                if _ignored(full, is_dir=False, patterns=self._patterns):
                    continue
                entries.append(
                    {"md5": self.file(full) or "", "relpath": full[len(rel) + 1 :]}
                )
        return sorted(entries, key=lambda e: e["relpath"])

    def md5(self, rel: str) -> str | None:
        """md5 of whatever is at ``rel`` (``.dir`` hash for a directory)."""
        kind = self.kind(rel)
        if kind == "file":
            return self.file(rel)
        if kind == "dir":
            return dir_md5(self.listing(rel) or [])
        return None


# ---------------------------------------------------------------- dvc.lock


@dataclass(frozen=True)
class Recorded:
    """One ``deps`` or ``outs`` entry of ``dvc.lock``."""

    path: str
    md5: str | None
    size: int | None = None
    nfiles: int | None = None

    @property
    def is_dir(self) -> bool:
        """True for a directory (its md5 ends in ``.dir``)."""
        return bool(self.md5 and self.md5.endswith(".dir"))


@dataclass(frozen=True)
class LockStage:
    """One stage of ``dvc.lock``."""

    name: str
    cmd: str
    deps: tuple[Recorded, ...]
    outs: tuple[Recorded, ...]
    params: Mapping[str, Mapping[str, Any]]


def _recorded(entry: Mapping[str, Any]) -> Recorded:
    return Recorded(
        path=str(entry["path"]).rstrip("/"),
        md5=entry.get("md5"),
        size=entry.get("size"),
        nfiles=entry.get("nfiles"),
    )


def read_lock(root: Path) -> dict[str, LockStage]:
    """The stages ``dvc.lock`` records, in file order.

    Raises
    ------
    LineageError
        If there is no ``dvc.lock`` or it records no stage.
    """
    path = root / LOCK_FILE
    if not path.is_file():
        raise LineageError(
            f"{path}: not found; nothing has been recorded yet (run `fedpipe run` "
            "or `dvc repro` first)"
        )
    data = yaml.safe_load(path.read_text()) or {}
    stages = data.get("stages") or {}
    if not stages:
        raise LineageError(f"{path}: records no stage")
    out = {}
    for name, spec in stages.items():
        cmd = spec.get("cmd", "")
        out[name] = LockStage(
            name=name,
            cmd=" && ".join(cmd) if isinstance(cmd, list) else str(cmd),
            deps=tuple(_recorded(d) for d in spec.get("deps") or []),
            outs=tuple(_recorded(o) for o in spec.get("outs") or []),
            params=spec.get("params") or {},
        )
    return out


def _cache_dir(root: Path) -> Path:
    """DVC's cache directory (``[cache] dir`` of .dvc/config*, else .dvc/cache)."""
    dvc_dir = root / ".dvc"
    found: str | None = None
    for name in ("config", "config.local"):
        path = dvc_dir / name
        if not path.is_file():
            continue
        section = ""
        for raw in path.read_text().splitlines():
            line = raw.strip()
            if line.startswith("["):
                section = line.strip("[]'\" ")
            elif section == "cache" and "=" in line:
                key, value = (s.strip() for s in line.split("=", 1))
                if key == "dir":
                    found = value
    if found is None:
        return dvc_dir / "cache"
    expanded = Path(os.path.expanduser(found))
    return expanded if expanded.is_absolute() else dvc_dir / expanded


def _cached_listing(root: Path, md5: str) -> list[dict[str, str]] | None:
    """The listing DVC's cache keeps for a ``.dir`` hash; None when absent."""
    path = _cache_dir(root) / "files" / "md5" / md5[:2] / md5[2:]
    if not path.is_file():
        return None
    try:
        return list(json.loads(path.read_text()))
    except (ValueError, OSError):
        return None


# ---------------------------------------------------------------- dvc.yaml


_INTERP = re.compile(r"\$\{\s*([^}]+?)\s*\}")


def _lookup(data: Any, dotted: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"``; KeyError when a key is absent."""
    value = data
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def _interpolate(text: str, context: Mapping[str, Any]) -> str:
    return _INTERP.sub(lambda m: str(_lookup(context, m.group(1))), text)


def expected_commands(
    pipeline: Mapping[str, Any], params: Mapping[str, Any]
) -> dict[str, str | None]:
    """The command ``dvc.yaml`` now gives each stage (``foreach`` expanded).

    Parameters
    ----------
    pipeline : mapping
        ``dvc.yaml`` as loaded.
    params : mapping
        ``params.yaml`` as loaded (DVC's default template variables).

    Returns
    -------
    dict
        Stage name (``round@K`` for foreach stages) to its command; None where
        the template cannot be resolved here (``matrix`` stages, unknown vars).
    """
    out: dict[str, str | None] = {}
    for name, spec in (pipeline.get("stages") or {}).items():
        if "foreach" in spec:
            items = spec["foreach"]
            if isinstance(items, str):
                match = _INTERP.fullmatch(items.strip())
                try:
                    items = _lookup(params, match.group(1)) if match else None
                except KeyError:
                    items = None
            body = spec.get("do") or {}
            if isinstance(items, Mapping):
                pairs = [(str(k), {"key": k, "item": v}) for k, v in items.items()]
            elif isinstance(items, list):
                pairs = [(str(v), {"item": v}) for v in items]
            else:
                continue
            for key, local in pairs:
                out[f"{name}@{key}"] = _command(body.get("cmd"), {**params, **local})
        elif "matrix" not in spec:
            out[name] = _command(spec.get("cmd"), params)
    return out


def _command(cmd: Any, context: Mapping[str, Any]) -> str | None:
    if cmd is None:
        return None
    text = " && ".join(cmd) if isinstance(cmd, list) else str(cmd)
    try:
        return _interpolate(text, context)
    except KeyError:
        return None


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Flag:
    """One problem found: ``kind`` is ``changed``, ``missing`` or ``stale``."""

    kind: str
    stage: str
    subject: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "stage": self.stage,
            "subject": self.subject,
            "message": self.message,
        }


@dataclass(frozen=True)
class Check:
    """An input or output of a stage: what dvc.lock records against what is.

    ``status`` is ``ok``, ``changed``, ``missing`` or ``stale``. For an input,
    ``upstream`` names the stage that produces it (None for raw data) and
    ``upstream_md5`` what that stage now records; ``actual_md5`` is the md5 on
    disk where it was computed.
    """

    path: str
    recorded_md5: str | None
    status: str
    actual_md5: str | None = None
    upstream: str | None = None
    upstream_md5: str | None = None
    nfiles: int | None = None
    detail: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "md5": self.recorded_md5,
            "status": self.status,
            "disk_md5": self.actual_md5,
            "upstream": self.upstream,
            "upstream_md5": self.upstream_md5,
            "nfiles": self.nfiles,
            "detail": list(self.detail),
        }


@dataclass(frozen=True)
class StageAudit:
    """One stage of the chain: its record in dvc.lock and how it checks out."""

    name: str
    cmd: str
    cmd_expected: str | None
    params: Mapping[str, Mapping[str, Any]]
    deps: tuple[Check, ...]
    outs: tuple[Check, ...]
    upstream: tuple[str, ...]
    flags: tuple[Flag, ...]
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``ok`` or the kinds of flag raised, e.g. ``changed, stale``."""
        kinds = sorted({f.kind for f in self.flags})
        return ", ".join(kinds) if kinds else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "cmd": self.cmd,
            "cmd_in_dvc_yaml": self.cmd_expected,
            "upstream": list(self.upstream),
            "params": _plain(self.params),
            "deps": [d.to_dict() for d in self.deps],
            "outs": [o.to_dict() for o in self.outs],
            "info": _plain(self.info),
            "flags": [f.to_dict() for f in self.flags],
        }


class RawData(NamedTuple):
    """Where the chain starts: data no stage in the chain was given as input.

    ``role`` is ``"output"`` for what a stage without inputs produced (the
    built-in ``mnist5k`` digits) and ``"input"`` for an input no stage produces
    (your own data, tracked with ``dvc add`` or not at all).
    """

    stage: str
    path: str
    md5: str | None
    role: str


@dataclass(frozen=True)
class GitState:
    """Where the project stands in git (None fields: not a git repository)."""

    commit: str | None
    subject: str | None
    dirty: tuple[str, ...]
    lock: str  # "committed" | "differs from HEAD" | "not committed" | "no git"
    params: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "subject": self.subject,
            "working_tree_clean": not self.dirty,
            "changed_paths": list(self.dirty),
            "dvc_lock": self.lock,
            "params_yaml": self.params,
        }


@dataclass(frozen=True)
class Lineage:
    """The chain from a target back to the raw data, oldest stage first."""

    target: str
    target_stage: str
    target_path: str | None
    target_md5: str | None
    stages: tuple[StageAudit, ...]
    raw: tuple[RawData, ...]
    git: GitState

    @property
    def flags(self) -> list[Flag]:
        """Every problem found, in chain order."""
        return [f for s in self.stages for f in s.flags]

    @property
    def verified(self) -> bool:
        """True when nothing was flagged."""
        return not self.flags

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": {
                "spec": self.target,
                "stage": self.target_stage,
                "path": self.target_path,
                "md5": self.target_md5,
            },
            "verified": self.verified,
            "flags": [f.to_dict() for f in self.flags],
            "raw_data": [r._asdict() for r in self.raw],
            "git": self.git.to_dict(),
            "stages": [s.to_dict() for s in self.stages],
        }


def _plain(value: Any) -> Any:
    """JSON-ready copy (mappings to dicts, tuples to lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


# ---------------------------------------------------------------- targets


def _round_of(stage: str) -> int | None:
    if stage.startswith(ROUND_PREFIX) and stage[len(ROUND_PREFIX) :].isdigit():
        return int(stage[len(ROUND_PREFIX) :])
    return None


def _rounds(lock: Mapping[str, LockStage]) -> list[int]:
    return sorted(r for r in map(_round_of, lock) if r is not None)


def _accepted(lock: Mapping[str, LockStage]) -> str:
    rounds = _rounds(lock)
    span = f"0..{rounds[-1]}" if rounds else "0"
    paths: list[str] = []
    for stage in lock.values():
        for out in stage.outs:
            shown = re.sub(r"round-\d+", "round-K", out.path)
            shown += "/..." if out.is_dir else ""
            if shown not in paths:
                paths.append(shown)
    names = [n for n in lock if _round_of(n) is None] + ["round@K"]
    return (
        f"accepted: a round number ({span}; 0 = the initial model), a stage "
        f"({', '.join(names)}) or a path a stage produces ({', '.join(paths)})"
    )


def _producer(
    lock: Mapping[str, LockStage], path: str
) -> tuple[LockStage, Recorded] | None:
    """The stage whose output is ``path`` or a directory holding it."""
    for stage in lock.values():
        for out in stage.outs:
            if path == out.path or path.startswith(out.path + "/"):
                return stage, out
    return None


def _normalize(root: Path, raw: str) -> str:
    path = Path(raw)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(root.resolve())
        except ValueError:
            return raw
    return path.as_posix().removeprefix("./").rstrip("/")


def resolve_target(
    root: Path, lock: Mapping[str, LockStage], tokens: Sequence[str]
) -> tuple[str, str, str | None]:
    """Turn the command-line target into ``(spec, stage, path)``.

    Accepted: nothing (the whole pipeline: the last stage recorded), ``round N``
    or ``N`` (round N's global model; 0 = the initial model), a stage name
    (``partition``, ``round@3``), or a path that a stage produces (a file, a
    directory output, or a file inside one).

    Raises
    ------
    LineageError
        Naming what would be accepted.
    """
    words = [t for t in tokens if t]
    if not words:
        last = list(lock)[-1]
        return "the whole pipeline", last, None
    if words == [layout.ROUND_STAGE]:
        raise LineageError(f"round: give the round number; {_accepted(lock)}")
    if len(words) == 2 and words[0] == layout.ROUND_STAGE:
        words = [words[1]]
        if not words[0].isdigit():
            raise LineageError(
                f"round {words[0]!r}: not a round number; {_accepted(lock)}"
            )
    if len(words) != 1:
        raise LineageError(f"{' '.join(tokens)!r}: give one target; {_accepted(lock)}")
    word = words[0]
    if word.isdigit():
        k = int(word)
        rounds = _rounds(lock)
        stage = "init" if k == 0 else f"{ROUND_PREFIX}{k}"
        if stage not in lock:
            have = f"1..{rounds[-1]}" if rounds else "none"
            raise LineageError(
                f"round {k} is not recorded in dvc.lock (rounds recorded: {have}); "
                f"{_accepted(lock)}"
            )
        return f"round {k}", stage, layout.model_weights(k).as_posix()
    if word in lock:
        return word, word, None
    path = _normalize(root, word)
    found = _producer(lock, path)
    if found is None:
        raise LineageError(
            f"{word}: no stage in dvc.lock produces this path; {_accepted(lock)}"
        )
    return path, found[0].name, path


# ---------------------------------------------------------------- checks


def _chain(lock: Mapping[str, LockStage], target: str) -> list[str]:
    """``target`` and every stage upstream of it, in dvc.lock order."""
    seen = {target}
    todo = [target]
    while todo:
        for dep in lock[todo.pop()].deps:
            found = _producer(lock, dep.path)
            if found and found[0].name not in seen:
                seen.add(found[0].name)
                todo.append(found[0].name)
    return [name for name in lock if name in seen]


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return shown + (f" (+{more} more)" if more > 0 else "")


def _dir_detail(
    recorded: list[dict[str, str]] | None, actual: list[dict[str, str]]
) -> tuple[str, ...]:
    """Which files of a directory differ from the recorded listing."""
    if recorded is None:
        return ("the recorded listing is not in DVC's cache; files not compared",)
    was = {e["relpath"]: e["md5"] for e in recorded}
    now = {e["relpath"]: e["md5"] for e in actual}
    changed = sorted(p for p in was if p in now and now[p] != was[p])
    missing = sorted(p for p in was if p not in now)
    added = sorted(p for p in now if p not in was)
    out = []
    if changed:
        out.append(f"changed: {_listed(changed)}")
    if missing:
        out.append(f"missing: {_listed(missing)}")
    if added:
        out.append(f"added: {_listed(added)}")
    return tuple(out)


def _check_out(root: Path, disk: _Disk, rec: Recorded) -> Check:
    kind = disk.kind(rec.path)
    if kind is None:
        return Check(rec.path, rec.md5, "missing", nfiles=rec.nfiles)
    actual = disk.md5(rec.path)
    if actual == rec.md5:
        return Check(rec.path, rec.md5, "ok", actual, nfiles=rec.nfiles)
    detail: tuple[str, ...] = ()
    if rec.is_dir and kind == "dir":
        cached = _cached_listing(root, rec.md5 or "")
        detail = _dir_detail(cached, disk.listing(rec.path) or [])
    elif rec.is_dir != (kind == "dir"):
        detail = (f"recorded as a {'directory' if rec.is_dir else 'file'}",)
    return Check(rec.path, rec.md5, "changed", actual, nfiles=rec.nfiles, detail=detail)


def _upstream_md5(
    root: Path, lock: Mapping[str, LockStage], path: str
) -> tuple[str | None, str | None]:
    """(producing stage, md5 it records for ``path``) - None where unknown."""
    found = _producer(lock, path)
    if found is None:
        return None, None
    stage, out = found
    if out.path == path:
        return stage.name, out.md5
    listing = _cached_listing(root, out.md5 or "") if out.is_dir else None
    inner = path[len(out.path) + 1 :]
    for entry in listing or []:
        if entry.get("relpath") == inner:
            return stage.name, entry.get("md5")
    return stage.name, None


def _dvc_file_md5(root: Path, path: str) -> str | None:
    """md5 that ``PATH.dvc`` (``dvc add``) records for raw data, if any."""
    dvc_file = root / f"{path}.dvc"
    if not dvc_file.is_file():
        return None
    data = yaml.safe_load(dvc_file.read_text()) or {}
    outs = data.get("outs") or []
    return outs[0].get("md5") if outs else None


def _check_dep(
    root: Path,
    disk: _Disk,
    lock: Mapping[str, LockStage],
    stage: str,
    rec: Recorded,
) -> tuple[Check, list[Flag]]:
    producer, up_md5 = _upstream_md5(root, lock, rec.path)
    if producer is not None and up_md5 is not None:
        status = "ok" if up_md5 == rec.md5 else "stale"
        check = Check(rec.path, rec.md5, status, upstream=producer, upstream_md5=up_md5)
        if status == "ok":
            return check, []
        return check, [
            Flag(
                "stale",
                stage,
                rec.path,
                f"{stage} ran on {rec.path} md5 {rec.md5}, but {producer} now "
                f"records {up_md5} (rerun {stage}: `dvc repro {stage}`)",
            )
        ]
    # raw data (no stage produces it), or a file inside a directory output whose
    # listing is not in the cache: compare with the disk
    actual = disk.md5(rec.path)
    source = None if producer else _dvc_file_md5(root, rec.path)
    if actual is None:
        check = Check(rec.path, rec.md5, "missing", upstream=producer)
        return check, [
            Flag("missing", stage, rec.path, f"{rec.path}: input of {stage} is gone")
        ]
    flags = []
    status = "ok"
    if actual != rec.md5:
        status = "changed" if producer is None else "stale"
        flags.append(
            Flag(
                status,
                stage,
                rec.path,
                f"{rec.path}: md5 on disk {actual}, {stage} ran on {rec.md5}",
            )
        )
    if source is not None and source != rec.md5:
        status = "stale"
        flags.append(
            Flag(
                "stale",
                stage,
                rec.path,
                f"{rec.path}.dvc records {source}, {stage} ran on {rec.md5}",
            )
        )
    check = Check(
        rec.path,
        rec.md5,
        status,
        actual,
        upstream=producer,
        upstream_md5=source,
        nfiles=rec.nfiles,
    )
    return check, flags


_MISSING = object()


def _check_params(root: Path, stage: LockStage, files: dict[str, Any]) -> list[Flag]:
    flags = []
    for name, recorded in stage.params.items():
        if name not in files:
            path = root / name
            files[name] = yaml.safe_load(path.read_text()) if path.is_file() else None
        current = files[name]
        for key, value in recorded.items():
            try:
                now = _lookup(current or {}, str(key))
            except KeyError:
                now = _MISSING
            if now is _MISSING:
                flags.append(
                    Flag(
                        "stale",
                        stage.name,
                        key,
                        f"{name}: {key} is gone; {stage.name} ran with {key}="
                        f"{_short(value)}",
                    )
                )
            elif now != value:
                flags.append(
                    Flag(
                        "stale",
                        stage.name,
                        key,
                        f"{name}: {_changed_keys(str(key), value, now)}; "
                        f"{stage.name} ran with the values before "
                        f"(rerun: `fedpipe run` or `dvc repro`)",
                    )
                )
    return flags


def _changed_keys(key: str, was: Any, now: Any) -> str:
    """``a.b: dvc.lock X, now Y`` for each leaf that differs."""
    if isinstance(was, Mapping) and isinstance(now, Mapping):
        parts = [
            _changed_keys(f"{key}.{k}", was.get(k, None), now.get(k, None))
            for k in sorted(set(was) | set(now), key=str)
            if was.get(k, _MISSING) != now.get(k, _MISSING)
        ]
        return "; ".join(parts)
    return f"{key} is {_short(now)}, dvc.lock records {_short(was)}"


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _info(root: Path, disk: _Disk, stage: str) -> dict[str, Any]:
    """What fedpipe's own records add to a stage: validation, partition, clients."""
    if stage == "validate":
        summary = _read_json(root / layout.VALIDATION_DIR / "summary.json")
        if not isinstance(summary, Mapping):
            return {"validation": None}
        return {
            "validation": {
                "success": summary.get("success"),
                "n_rows": summary.get("n_rows"),
                "n_expectations": summary.get("n_expectations"),
                "warnings": summary.get("warnings", []),
                "failures": summary.get("failures", []),
            }
        }
    if stage == "partition":
        manifest = _read_json(root / layout.MANIFEST)
        if not isinstance(manifest, Mapping):
            return {"manifest": None}
        clients = manifest.get("clients") or []
        return {
            "manifest": {
                "path": layout.MANIFEST.as_posix(),
                "md5": disk.file(layout.MANIFEST.as_posix()),
                "method": manifest.get("method"),
                "clients": manifest.get("n_clients", len(clients)),
                "train_sizes": [len(c.get("train", [])) for c in clients],
                "test_sizes": [len(c.get("test", [])) for c in clients],
                "heldout": len(manifest.get("heldout") or []),
                "dropped_duplicates": len(manifest.get("dropped_duplicates") or []),
                "params": manifest.get("params"),
            }
        }
    k = _round_of(stage)
    if k is not None:
        metrics = _read_json(root / layout.round_metrics(k))
        if not isinstance(metrics, Mapping):
            return {"clients_selected": None}
        accuracy = (metrics.get("global") or {}).get("accuracy")
        return {
            "clients_selected": metrics.get("clients_selected"),
            "global_accuracy": accuracy,
        }
    return {}


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def _file_state(root: Path, name: str, has_head: bool) -> str:
    tracked = _git(root, "ls-files", "--error-unmatch", "--", name)
    if tracked is None or tracked.returncode != 0 or not has_head:
        return "not committed"
    diff = _git(root, "diff", "--quiet", "HEAD", "--", name)
    if diff is None:
        return "unknown"
    return "committed" if diff.returncode == 0 else "differs from HEAD"


def git_state(root: Path) -> GitState:
    """HEAD, uncommitted changes under ``root``, and whether dvc.lock is committed."""
    inside = _git(root, "rev-parse", "--is-inside-work-tree")
    if inside is None or inside.returncode != 0:
        return GitState(None, None, (), "no git", "no git")
    head = _git(root, "log", "-1", "--format=%H%n%s")
    commit = subject = None
    if head is not None and head.returncode == 0 and head.stdout.strip():
        commit, _, subject = head.stdout.strip().partition("\n")
    status = _git(root, "status", "--porcelain", "--", ".")
    dirty = tuple(
        line[3:] for line in (status.stdout if status else "").splitlines() if line
    )
    return GitState(
        commit,
        subject or None,
        dirty,
        _file_state(root, LOCK_FILE, commit is not None),
        _file_state(root, "params.yaml", commit is not None),
    )


# ---------------------------------------------------------------- audit


def _load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _audit_stage(
    root: Path,
    disk: _Disk,
    lock: Mapping[str, LockStage],
    stage: LockStage,
    *,
    expected: Mapping[str, str | None] | None,
    params_files: dict[str, Any],
) -> StageAudit:
    flags: list[Flag] = []
    deps = []
    for rec in stage.deps:
        check, found = _check_dep(root, disk, lock, stage.name, rec)
        deps.append(check)
        flags.extend(found)
    flags.extend(_check_params(root, stage, params_files))
    outs = []
    for rec in stage.outs:
        check = _check_out(root, disk, rec)
        outs.append(check)
        if check.status == "missing":
            flags.append(
                Flag("missing", stage.name, rec.path, f"{rec.path}: not on disk")
            )
        elif check.status == "changed":
            more = f" ({'; '.join(check.detail)})" if check.detail else ""
            flags.append(
                Flag(
                    "changed",
                    stage.name,
                    rec.path,
                    f"{rec.path}: md5 on disk {check.actual_md5}, dvc.lock records "
                    f"{rec.md5}{more}",
                )
            )
    cmd_expected = None
    if expected is not None:
        if stage.name not in expected:
            flags.append(
                Flag(
                    "stale",
                    stage.name,
                    PIPELINE_FILE,
                    f"{stage.name} is no longer defined in {PIPELINE_FILE}",
                )
            )
        else:
            cmd_expected = expected[stage.name]
            if cmd_expected is not None and cmd_expected != stage.cmd:
                flags.append(
                    Flag(
                        "stale",
                        stage.name,
                        "cmd",
                        f"{PIPELINE_FILE} now runs `{cmd_expected}`, dvc.lock "
                        f"recorded `{stage.cmd}`",
                    )
                )
    upstream = []
    for rec in stage.deps:
        found = _producer(lock, rec.path)
        if found and found[0].name not in upstream:
            upstream.append(found[0].name)
    return StageAudit(
        name=stage.name,
        cmd=stage.cmd,
        cmd_expected=cmd_expected,
        params=stage.params,
        deps=tuple(deps),
        outs=tuple(outs),
        upstream=tuple(upstream),
        flags=tuple(flags),
        info=_info(root, disk, stage.name),
    )


def _raw(stages: Iterable[StageAudit]) -> tuple[RawData, ...]:
    """The chain's roots: outputs of stages without inputs, and inputs no stage
    produces."""
    raw = []
    for stage in stages:
        if not stage.deps:
            raw.extend(
                RawData(stage.name, o.path, o.recorded_md5, "output")
                for o in stage.outs
            )
        raw.extend(
            RawData(stage.name, d.path, d.recorded_md5, "input")
            for d in stage.deps
            if not d.upstream
        )
    return tuple(raw)


def audit(root: Path, target: Sequence[str] = ()) -> Lineage:
    """Trace ``target`` back to the raw data and verify every step.

    Parameters
    ----------
    root : Path
        The project directory (holding ``dvc.lock``, ``dvc.yaml``, ``params.yaml``).
    target : sequence of str, optional
        Command-line words: ``()`` (the whole pipeline), ``("round", "4")``,
        ``("4",)``, a stage name, or a path a stage produces. Default ``()``.

    Returns
    -------
    Lineage
        ``verified`` is True when nothing was flagged.

    Raises
    ------
    LineageError
        No ``dvc.lock``, or a target that names no recorded round, stage or output.
    """
    lock = read_lock(root)
    spec, stage_name, path = resolve_target(root, lock, target)
    params_files: dict[str, Any] = {}
    pipeline = _load_yaml(root / PIPELINE_FILE)
    expected = None
    if isinstance(pipeline, Mapping):
        params_files["params.yaml"] = _load_yaml(root / "params.yaml")
        expected = expected_commands(pipeline, params_files["params.yaml"] or {})
    disk = _Disk(root)
    stages = tuple(
        _audit_stage(
            root,
            disk,
            lock,
            lock[name],
            expected=expected,
            params_files=params_files,
        )
        for name in _chain(lock, stage_name)
    )
    return Lineage(
        target=spec,
        target_stage=stage_name,
        target_path=path,
        target_md5=disk.md5(path) if path else None,
        stages=stages,
        raw=_raw(stages),
        git=git_state(root),
    )


# ---------------------------------------------------------------- formats


def format_json(lineage: Lineage) -> str:
    """The audit as JSON (see ``Lineage.to_dict``)."""
    return json.dumps(lineage.to_dict(), indent=2, default=str)


def _flat_params(params: Mapping[str, Mapping[str, Any]]) -> list[str]:
    out = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Mapping) and value:
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out.append(f"{prefix}={_short(value)}")

    for values in params.values():
        walk("", values)
    return out


def _git_line(git: GitState) -> str:
    if git.lock == "no git":
        return "git: not a git repository"
    head = f"HEAD {git.commit[:12]} ({git.subject})" if git.commit else "no commit yet"
    tree = (
        "working tree clean"
        if not git.dirty
        else f"working tree differs in {len(git.dirty)} path(s)"
    )
    return f"git: {head}; {tree}; dvc.lock {git.lock}; params.yaml {git.params}"


def _check_line(label: str, check: Check) -> str:
    md5 = check.recorded_md5 or "-"
    files = f" ({check.nfiles} files)" if check.nfiles else ""
    origin = ""
    if label == "in":
        origin = f"  <- {check.upstream}" if check.upstream else "  (raw data)"
    mark = "ok" if check.status == "ok" else check.status.upper()
    return f"  {label:<4}{check.path}  md5 {md5}{files}{origin}  {mark}"


def _info_lines(info: Mapping[str, Any]) -> list[str]:
    lines = []
    if "validation" in info:
        v = info["validation"]
        if v is None:
            lines.append("  validation: no reports/validation/summary.json")
        else:
            verdict = "passed" if v["success"] else "FAILED"
            lines.append(
                f"  validation: {verdict} ({v['n_expectations']} expectations on "
                f"{v['n_rows']} rows; {len(v['warnings'])} warning(s), "
                f"{len(v['failures'])} failure(s))"
            )
            lines.extend(f"    warning: {w}" for w in v["warnings"][:_MAX_LISTED])
    if "manifest" in info:
        m = info["manifest"]
        if m is None:
            lines.append(f"  manifest: no {layout.MANIFEST.as_posix()}")
        else:
            lines.append(
                f"  manifest: {m['method']}, {m['clients']} clients, train sizes "
                f"{m['train_sizes']}, test sizes {m['test_sizes']}, held out "
                f"{m['heldout']}, md5 {m['md5']}"
            )
    if "clients_selected" in info:
        selected = info["clients_selected"]
        shown = "unknown" if selected is None else ", ".join(map(str, selected))
        acc = info.get("global_accuracy")
        lines.append(
            f"  clients: {shown}" + (f"  (global accuracy {acc})" if acc else "")
        )
    return lines


def format_text(lineage: Lineage) -> str:
    """A readable report: one block per stage, oldest first, then the verdict."""
    head = f"lineage of {lineage.target} (stage {lineage.target_stage})"
    if lineage.target_path:
        head += f"\ntarget: {lineage.target_path}  md5 {lineage.target_md5 or '-'}"
    lines = [head, _git_line(lineage.git)]
    for raw in lineage.raw:
        how = "written by" if raw.role == "output" else "read by"
        lines.append(f"raw data: {raw.path}  md5 {raw.md5}  ({how} {raw.stage})")
    previous: list[str] | None = None
    for stage in lineage.stages:
        lines += ["", f"{stage.name}  [{stage.status}]", f"  cmd {stage.cmd}"]
        flat = _flat_params(stage.params)
        if flat and flat == previous:
            lines.append("  params: as the stage before")
        elif flat:
            wrapped = textwrap.wrap(
                " ".join(flat),
                width=86,
                initial_indent="  params: ",
                subsequent_indent="    ",
            )
            lines.extend(wrapped)
        previous = flat or previous
        lines.extend(_check_line("in", d) for d in stage.deps)
        lines.extend(_check_line("out", o) for o in stage.outs)
        lines.extend(_info_lines(stage.info))
    flags = lineage.flags
    lines.append("")
    n_files = sum(len(s.outs) for s in lineage.stages)
    if not flags:
        lines.append(
            f"verified: {len(lineage.stages)} stage(s), {n_files} output(s) match "
            "dvc.lock; no input or param is stale"
        )
    else:
        lines.append(f"FLAGGED: {len(flags)} problem(s)")
        lines.extend(f"  {f.kind:<8}{f.stage}: {f.message}" for f in flags)
    return "\n".join(lines)


def _node(name: str) -> str:
    return "s_" + re.sub(r"\W", "_", name)


def _label(text: str) -> str:
    return text.replace('"', "#quot;")


def format_mermaid(lineage: Lineage) -> str:
    """A Mermaid flowchart of the chain; flagged stages styled red, raw data as
    cylinders, the target as a stadium."""
    lines = ["flowchart TD"]
    for i, raw in enumerate(lineage.raw):
        md5 = (raw.md5 or "-")[:12]
        lines.append(f'  raw_{i}[("{_label(raw.path)}<br/>md5 {md5}")]')
    for stage in lineage.stages:
        label = f"{stage.name}<br/>{stage.status}"
        lines.append(f'  {_node(stage.name)}["{_label(label)}"]')
    for i, raw in enumerate(lineage.raw):
        if raw.role == "output":
            lines.append(f"  {_node(raw.stage)} --> raw_{i}")
        else:
            lines.append(f"  raw_{i} --> {_node(raw.stage)}")
    for stage in lineage.stages:
        by_upstream: dict[str, list[str]] = {}
        for dep in stage.deps:
            if dep.upstream:
                by_upstream.setdefault(dep.upstream, []).append(dep.path)
        for up, paths in by_upstream.items():
            shown = _label(", ".join(p.rsplit("/", 1)[-1] for p in paths))
            lines.append(f'  {_node(up)} -->|"{shown}"| {_node(stage.name)}')
    if lineage.target_path:
        md5 = (lineage.target_md5 or "-")[:12]
        lines.append(f'  target(["{_label(lineage.target_path)}<br/>md5 {md5}"])')
        lines.append(f"  {_node(lineage.target_stage)} --> target")
    lines.append("  classDef ok fill:#e8f5e9,stroke:#2e7d32")
    lines.append("  classDef flagged fill:#ffebee,stroke:#c62828,stroke-width:3px")
    ok = [_node(s.name) for s in lineage.stages if not s.flags]
    bad = [_node(s.name) for s in lineage.stages if s.flags]
    if ok:
        lines.append(f"  class {','.join(ok)} ok")
    if bad:
        lines.append(f"  class {','.join(bad)} flagged")
    return "\n".join(lines)

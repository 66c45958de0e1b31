"""The DVC cache objects of the recorded rounds, checked against their md5.

DVC trusts a cache file it has made read-only (mode 0444) without hashing it again
(``dvc_data``'s ``LocalHashFileDB.check``): a file altered in place that keeps its
mode (bit rot, a root process, a restore from a bad backup) is reused as it is by
``dvc status``, ``dvc checkout`` and the next run. A file deleted from the cache, or
altered with its mode changed, DVC does see ("not in cache").

:func:`damaged_objects` hashes every cache object that ``dvc.lock`` records for
the outputs of the model stages (``init`` and every ``round@K``: about 100 KB a
round here) and names the missing and altered ones; :func:`remove_damaged` takes
the altered ones out of the cache, as DVC does with a corrupted object it finds,
so that DVC sees the stage's output "not in cache" and the run rebuilds it. Data
stages are not hashed (their outputs can be gigabytes); DVC's own check covers
them. The cache is the project's default one, ``.dvc/cache``. An object whose
``stat`` (size, mtime, ctime, inode, mode) is what it was when it was last hashed
is not hashed again (:class:`Verified`, ``.dvc/tmp/fedpipe-verified.json``).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

from fedpipe.core import atomic

__all__ = [
    "CACHE", "Damaged", "damaged_objects", "damaged_outs", "model_stage",
    "remove_damaged",
]  # fmt: skip

CACHE = Path(".dvc/cache/files/md5")
"""Where DVC keeps its md5-named objects, under a project."""

_CHUNK = 1 << 20


@dataclass(frozen=True)
class Damaged:
    """A recorded output whose cache object is ``missing`` or ``altered``."""

    stage: str
    path: str
    md5: str
    problem: str
    actual: str | None = None

    def text(self, *, stage: bool = True) -> str:
        """One line: which output (and ``stage``: of which stage), what is
        wrong."""
        where = f"{self.path} ({self.stage})" if stage else self.path
        if self.problem == "missing":
            return f"{where}: md5 {self.md5} missing from DVC's cache"
        return (
            f"{where}: DVC's cache object {self.md5} is altered "
            f"(its md5 is {self.actual})"
        )


def _object(root: Path, md5: str) -> Path:
    return root / CACHE / md5[:2] / md5[2:]


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def model_stage(name: str) -> bool:
    """Whether ``name`` is a stage whose cache objects are checked (``init``,
    ``round@K``)."""
    return name == "init" or name.startswith("round@")


VERIFIED = Path(".dvc/tmp/fedpipe-verified.json")
"""What was hashed, by stat (DVC's scratch folder, never versioned)."""

SETTLE_S = 1.0
"""An object written this recently is hashed again next time."""


class Verified:
    """The md5 of each cache object hashed before, kept with its ``stat``
    (size, mtime, ctime, inode, mode) in :data:`VERIFIED`: an object whose stat
    is unchanged is not hashed again. An object altered in place changes its
    ctime even when its mode and mtime are put back."""

    def __init__(self, root: Path) -> None:
        self.path = root / VERIFIED
        try:
            kept = json.loads(self.path.read_text())
        except (OSError, ValueError):
            kept = {}
        self.kept: dict[str, list[Any]] = kept if isinstance(kept, dict) else {}
        self.seen: set[str] = set()
        self.changed = False

    def md5(self, obj: Path) -> str:
        """``obj``'s md5, from the record while its stat is unchanged."""
        st = obj.stat()
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode]
        name = obj.as_posix()
        self.seen.add(name)
        kept = self.kept.get(name)
        if isinstance(kept, list) and kept[:-1] == key:
            return str(kept[-1])
        actual = _md5(obj)
        if max(st.st_mtime, st.st_ctime) < time.time() - SETTLE_S:
            self.kept[name] = [*key, actual]
            self.changed = True
        return actual

    def save(self) -> None:
        """Write the record back (where DVC's scratch folder is), with only
        the objects looked at this time."""
        kept = {name: v for name, v in self.kept.items() if name in self.seen}
        if (self.changed or kept != self.kept) and self.path.parent.is_dir():
            atomic.write_text(self.path, json.dumps(kept), durable=False)


def _check(
    root: Path, stage: str, path: str, md5: str, verified: Verified | None = None
) -> Damaged | None:
    obj = _object(root, md5)
    if not obj.is_file():
        return Damaged(stage, path, md5, "missing")
    actual = _md5(obj) if verified is None else verified.md5(obj)
    if actual != md5.removesuffix(".dir"):
        return Damaged(stage, path, md5, "altered", actual)
    return None


def uncached(root: Path) -> list[str]:
    """Patterns (``fnmatch``) of the outputs ``dvc.yaml`` keeps out of the cache
    (``cache: false``: metrics, reports); a template's ``${...}`` matches
    anything."""
    pipeline = root / "dvc.yaml"
    if not pipeline.is_file():
        return []
    stages = (yaml.safe_load(pipeline.read_text()) or {}).get("stages") or {}
    found = []
    for definition in stages.values():
        body = (definition or {}).get("do", definition) or {}
        for key in ("outs", "metrics", "plots"):
            entries = [e for e in body.get(key) or [] if isinstance(e, dict)]
            for entry in entries:
                for path, settings in entry.items():
                    if (settings or {}).get("cache") is False:
                        found.append(re.sub(r"\$\{[^}]*\}", "*", path))
    return found


def damaged_objects(root: Path) -> list[Damaged]:
    """The recorded model stages' outputs whose cache objects are missing or
    not their md5 (a directory: its listing and each file in it); [] without a
    ``dvc.lock``. Outputs ``dvc.yaml`` keeps out of the cache are left out."""
    lock = root / "dvc.lock"
    if not lock.is_file():
        return []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    lock_data = yaml.load(lock.read_text(), Loader=loader)  # noqa: S506
    stages = (lock_data or {}).get("stages") or {}
    skip = uncached(root)
    found: list[Damaged] = []
    verified = Verified(root)
    for name, record in stages.items():
        outs = [
            (o["path"], o.get("md5"))
            for o in record.get("outs") or []
            if not any(fnmatch(o["path"], pattern) for pattern in skip)
        ]
        found += damaged_outs(root, name, outs, verified=verified)
    verified.save()
    return found


def damaged_outs(
    root: Path,
    stage: str,
    outs: Iterable[tuple[str, str | None]],
    *,
    verified: Verified | None = None,
) -> list[Damaged]:
    """Of ``stage``'s recorded outputs (path, md5), the ones whose cache objects
    are missing or altered; [] for a data stage (see the module). ``verified``:
    objects hashed before and unchanged since are not hashed again."""
    if not model_stage(stage):
        return []
    found: list[Damaged] = []
    for path, md5 in outs:
        if not md5:
            continue
        bad = _check(root, stage, path, md5, verified)
        if bad is not None or not md5.endswith(".dir"):
            found.extend([bad] if bad else [])
            continue
        for entry in json.loads(_object(root, md5).read_text()):
            bad = _check(
                root, stage, f"{path}/{entry['relpath']}", entry["md5"], verified
            )
            found.extend([bad] if bad else [])
    return found


def remove_damaged(root: Path, damaged: list[Damaged]) -> None:
    """Take the altered objects out of the cache (as DVC does with a corrupted
    object it finds): DVC then sees their outputs "not in cache" and the run
    rebuilds those stages."""
    for bad in damaged:
        if bad.problem == "altered":
            _object(root, bad.md5).unlink(missing_ok=True)

"""A full disk (or an exhausted quota), said in one line.

The operating system says ``OSError(ENOSPC)`` (``EDQUOT`` over a quota), often
without the file's name (``zipfile`` closing an archive), and the libraries below
(DVC, Prefect) may wrap it in errors of their own. :class:`DiskFullError` says
what an operator needs instead: the file being written, the free space left on its
filesystem, and about how much more that write needed. fedpipe's own writes
(:mod:`fedpipe.core.atomic`) raise it where they know the file and its size;
:func:`disk_full_in` finds a full disk anywhere in an exception's chain, for the
CLI to say in one line whatever raised it.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from fedpipe.core.errors import FedpipeError

__all__ = ["DiskFullError", "disk_full_in", "free_bytes", "human_bytes", "is_full"]

FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errors a full disk or an exhausted quota raise."""


def human_bytes(n: int) -> str:
    """``n`` bytes for people: ``812 B``, ``84.0 KiB``, ``1.2 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on ``path``'s filesystem (its
    nearest existing folder's); None when that cannot be asked."""
    here = Path(os.path.abspath(path))
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        st = os.statvfs(here)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` itself is a full disk or quota."""
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


class DiskFullError(FedpipeError, OSError):
    """No space left to write ``path`` (exit status 1): the free space there and
    about how much more the write needed, and that the run resumes once space is
    freed.

    Parameters
    ----------
    path : Path
        The file being written (or, when the system did not say, the project).
    needed : int or None
        Bytes the write needed beyond what was free, when known.
    """

    def __init__(self, path: Path, *, needed: int | None = None) -> None:
        self.path = Path(path)
        self.free = free_bytes(self.path)
        self.needed = needed
        free = "?" if self.free is None else human_bytes(self.free)
        need = "" if needed is None else f", about {human_bytes(needed)} needed"
        super().__init__(
            errno.ENOSPC,
            f"disk full: no space left writing {self.path} ({free} free there"
            f"{need}); free some space and run again: what is recorded in "
            "dvc.lock is kept",
        )

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> tuple[object, ...]:  # through Prefect and Dask intact
        return (_rebuild, (str(self.path), self.needed))


def _rebuild(path: str, needed: int | None) -> DiskFullError:
    return DiskFullError(Path(path), needed=needed)


def disk_full_in(exc: BaseException, *, where: Path) -> DiskFullError | None:
    """The full disk in ``exc``'s chain (itself, its causes and contexts), as a
    :class:`DiskFullError`; ``where`` names the write when the system did not.
    None when no full disk is in the chain."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    found: OSError | None = None
    while todo:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, DiskFullError):
            return current
        if found is None and is_full(current):
            found = current  # type: ignore[assignment]
        todo.extend(e for e in (current.__cause__, current.__context__) if e)
    if found is None:
        return None
    named = found.filename
    return DiskFullError(Path(os.fsdecode(named)) if named else where)

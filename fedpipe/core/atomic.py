"""Files replaced whole: a kill at any moment leaves the old file or the new one.

A file is written beside its target (``name.tmp``) and moved onto it with one
``os.replace``, which POSIX makes atomic: a reader, or a run resumed after a
``kill -9``, never sees half of it. That is all a killed process needs. A machine
that loses power may still have the rename on disk before the bytes it names;
``durable=True`` (the default) also flushes the bytes (``fsync``) before the
rename and the folder's entry after it. That costs a few milliseconds a file, so
files DVC versions skip it: files written by the hundred (a round's client
files), and every output of a federation round (:func:`unflushed`: 5-6 ms a file
on this project's machine, 30 ms of a 0.1-0.15 s round of 10 small clients). DVC's
hashes (``dvc.lock``, itself written durably) catch a file the power took and
rerun its stage.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path

from fedpipe.core.diskspace import DiskFullError, is_full

_live: set[Path] = set()  # temporary files being written now, by any thread
_live_lock = threading.Lock()
_durable: ContextVar[bool] = ContextVar("fedpipe_atomic_durable", default=True)


@contextmanager
def unflushed() -> Iterator[None]:
    """Within the block (this thread or task), writes that do not say
    ``durable=`` skip the flushes: outputs DVC versions and checks by hash
    (see the module)."""
    token = _durable.set(False)
    try:
        yield
    finally:
        _durable.reset(token)


def discard_partial() -> list[Path]:
    """Remove the temporary files still being written (a process that ends on
    an error raised elsewhere, such as a full disk met by another thread or by
    the ``dvc.lock`` recorder, may leave one mid-write): they hold space and
    are never read. Returns those removed."""
    with _live_lock:
        left = list(_live)
        _live.clear()
    removed = []
    for tmp in sorted(left):
        with suppress(OSError):
            tmp.unlink()
            removed.append(tmp)
    return removed


def temp_path(path: Path) -> Path:
    """Where ``path`` is written before it is moved into place."""
    return path.with_name(path.name + ".tmp")


def sync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename into it) to disk."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace(tmp: Path, path: Path, *, durable: bool | None = None) -> None:
    """Move the finished file ``tmp`` onto ``path`` in one step (``os.replace``);
    ``durable`` (default: True, but within :func:`unflushed`): its bytes flushed
    first and the folder's entry after."""
    durable = _durable.get() if durable is None else durable
    if durable:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, path)
    if durable:
        sync_dir(path.parent)


@contextmanager
def writing(
    path: Path, *, durable: bool | None = None, size: int | None = None
) -> Iterator[Path]:
    """The temporary path to write ``path``'s new content to; moved onto ``path``
    when the block ends, removed when it raises (``path`` is then untouched).

    A full disk raises :class:`~fedpipe.core.diskspace.DiskFullError` naming
    ``path``, the space then free and ``size`` (the bytes being written, when
    the caller knows them)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temp_path(path)
        with _live_lock:
            _live.add(tmp)
        try:
            yield tmp
            replace(tmp, path, durable=durable)
        except BaseException:
            with suppress(OSError):
                tmp.unlink()
            raise
        finally:
            with _live_lock:
                _live.discard(tmp)
    except OSError as exc:
        if is_full(exc) and not isinstance(exc, DiskFullError):
            raise DiskFullError(path, needed=size) from exc
        raise


def write_bytes(path: Path, data: bytes, *, durable: bool | None = None) -> None:
    """``path.write_bytes(data)``, atomically (see the module)."""
    with writing(path, durable=durable, size=len(data)) as tmp:
        tmp.write_bytes(data)


def write_text(path: Path, text: str, *, durable: bool | None = None) -> None:
    """``path.write_text(text)`` (UTF-8), atomically (see the module)."""
    write_bytes(path, text.encode("utf-8"), durable=durable)


def remove_paths(paths: Iterator[Path] | list[Path]) -> list[Path]:
    """Remove each file or folder of ``paths`` that exists (a folder with what
    it holds); the ones removed, in order."""
    import shutil

    removed = []
    for path in map(Path, paths):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        else:
            continue
        removed.append(path)
    return removed

"""Model weights on disk: a NumPy ``.npz`` archive with deterministic bytes.

``numpy.savez`` stamps each member with the current time, so two saves of the same
weights differ. :func:`save_weights` writes the same archive format with a fixed
timestamp and order, so identical weights give identical files (and DVC hashes).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedpipe.core import atomic

_EPOCH = (1980, 1, 1, 0, 0, 0)
_MEMBER_OVERHEAD = 256  # a member's .npy header and zip entries, about (bytes)


def save_weights(path: Path, weights: Sequence[np.ndarray]) -> None:
    """Write a list of arrays as ``w000, w001, ...`` in a deterministic ``.npz``,
    atomically and durably (:mod:`fedpipe.core.atomic`)."""
    size = sum(np.asarray(a).nbytes + _MEMBER_OVERHEAD for a in weights)
    with (
        atomic.writing(path, size=size) as tmp,
        zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf,
    ):
        for i, array in enumerate(weights):
            buf = io.BytesIO()
            # C order keeps bytes layout-independent; unlike ascontiguousarray,
            # asarray(order="C") keeps 0-d arrays 0-d
            np.lib.format.write_array(buf, np.asarray(array, order="C"))
            info = zipfile.ZipInfo(f"w{i:03d}.npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def load_weights(path: Path) -> list[np.ndarray]:
    """Read weights written by :func:`save_weights`, in their original order."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: model weights not found")
    with np.load(path) as archive:
        names = sorted(archive.files, key=lambda name: int(name.lstrip("w")))
        return [archive[name] for name in names]


def save_state(
    path: Path, state: dict[str, np.ndarray], *, durable: bool | None = None
) -> None:
    """Write named arrays (a strategy's server state) as a deterministic ``.npz``.

    Names are written in sorted order with a fixed timestamp, so the same state
    gives the same bytes. An empty state writes an empty archive. Atomic;
    ``durable``: flushed to disk too (default: yes, but within
    :func:`fedpipe.core.atomic.unflushed`).
    """
    with (
        atomic.writing(path, durable=durable) as tmp,
        zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zf,
    ):
        for name in sorted(state):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(state[name], order="C"))
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue())


def load_state(path: Path) -> dict[str, np.ndarray]:
    """Read named arrays written by :func:`save_state`."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: server state not found")
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}

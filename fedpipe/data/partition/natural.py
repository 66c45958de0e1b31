"""Natural-id partitioner: one client per distinct value of a per-sample key.

For data with a natural client (a writer in FEMNIST, a hospital, a device),
``groups`` holds that key per sample; client ``k`` gets every sample of the
``k``-th distinct key in sorted order. No randomness is involved.

Where the key comes from (:meth:`NaturalIdPartitioner.sample_groups`): a table's
``data.client_column`` (the ``client_key`` column of the prepared samples), a
mapping file (``partition.natural_mapping``: a CSV of ``path,client`` rows, the
path of each image under ``data.path``), or a folder level of each image's path
(``partition.natural_level``: ``0`` is the top folder, so with
``data.class_level: 1`` the images in ``data.path/<writer>/<class>/x.png`` get the
writer at level 0).
"""

from __future__ import annotations

import csv
import hashlib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar

import numpy as np

from fedpipe.core.component import Setting
from fedpipe.data.partition.base import (
    MIN_SAMPLES,
    Partitioner,
    PartitionError,
    as_python,
    check_min_samples_feasible,
    validate_inputs,
)

NATURAL_MAPPING = Setting(
    "natural_mapping",
    str,
    default=None,
    help="natural: a CSV of path,client rows (image path under data.path)",
)
NATURAL_LEVEL = Setting(
    "natural_level",
    int,
    default=None,
    ge=0,
    help="natural: the folder level of each image's path naming its client",
)
MAPPING_COLUMNS = ("path", "client")
"""The header of a ``partition.natural_mapping`` file."""
_SHOWN = 3  # paths quoted in an error


class NaturalIdPartitioner(Partitioner):
    """One client per distinct group key, in sorted key order; deterministic.

    Parameters
    ----------
    min_samples : int, optional
        Minimum samples per client (``partition.min_samples``), ``>= 0``.
        Default ``0``. Groups are never split or merged, so a smaller group is
        an error.
    natural_mapping : str, optional
        ``partition.natural_mapping``: a CSV file (relative to the project root)
        with the header ``path,client`` and one row per sample: its path under
        ``data.path`` (the sample id, e.g. ``"3/img-0001.png"``) and its client
        key. Default ``None``.
    natural_level : int, optional
        ``partition.natural_level``: the client key of a sample is the folder at
        this level of its path under ``data.path`` (``0`` = the top folder).
        Default ``None``. At most one of the two may be set; with neither, the
        keys are the table's ``data.client_column``.

    Raises
    ------
    PartitionError
        If ``min_samples < 0``, ``natural_level < 0``, or both a mapping and a
        level are given.
    """

    name: ClassVar[str] = "natural"
    settings: ClassVar[tuple[str, ...]] = (MIN_SAMPLES, NATURAL_MAPPING, NATURAL_LEVEL)

    def __init__(
        self,
        *,
        min_samples: int = 0,
        natural_mapping: str | None = None,
        natural_level: int | None = None,
    ) -> None:
        self.min_samples = self.checked(MIN_SAMPLES, min_samples)
        if natural_mapping is not None and natural_level is not None:
            raise PartitionError(
                "partition.natural_mapping and partition.natural_level are both "
                "set; a sample's client comes from one of them: set the other to "
                "null"
            )
        if natural_mapping is not None and (
            not isinstance(natural_mapping, str) or not natural_mapping.strip()
        ):
            raise PartitionError(
                "partition.natural_mapping must name a CSV file (path,client rows), "
                f"got {natural_mapping!r}"
            )
        if natural_level is not None:
            natural_level = self.checked(NATURAL_LEVEL, natural_level)
        self.natural_mapping = natural_mapping
        self.natural_level = natural_level

    def sample_groups(self, samples: Any) -> np.ndarray | None:
        """Every sample's client key (str), from the setting that names them.

        Parameters
        ----------
        samples : DataFrame
            The prepared ``samples.parquet``: ``sample_id`` (an image's path
            under ``data.path``) and, for a table with ``data.client_column``,
            ``client_key``.

        Returns
        -------
        np.ndarray or None
            One key per row of ``samples``; ``None`` when no source of keys is
            set (then :meth:`partition` says what to set).

        Raises
        ------
        PartitionError
            A mapping file that is missing or malformed, names images that do not
            exist (the file and the first paths) or leaves an image without a
            client; a level deeper than an image's folders.
        """
        ids = [str(i) for i in samples["sample_id"].tolist()]
        if self.natural_mapping is not None:
            return mapped_groups(ids, read_mapping(Path(self.natural_mapping)))
        if self.natural_level is not None:
            return level_groups(ids, self.natural_level)
        if "client_key" in samples:
            return samples["client_key"].to_numpy(dtype=str)
        return None

    def provenance(self) -> dict[str, Any]:
        """What the manifest records of the keys' source beyond the settings:
        the mapping file's SHA-256 (so an edited file shows in the manifest)."""
        if self.natural_mapping is None:
            return {}
        digest = hashlib.sha256(Path(self.natural_mapping).read_bytes()).hexdigest()
        return {"natural_mapping_sha256": digest}

    @staticmethod
    def client_keys(groups: np.ndarray) -> np.ndarray:
        """The group key of each client: the sorted distinct values of ``groups``.

        Parameters
        ----------
        groups : np.ndarray
            1-D per-sample group keys without missing values.

        Returns
        -------
        np.ndarray
            Sorted distinct keys; client ``k`` holds the samples of entry ``k``.

        Raises
        ------
        PartitionError
            If ``groups`` is not 1-D, has missing values or unorderable keys.
        """
        return _group_codes(groups)[0]

    def partition(
        self,
        labels: np.ndarray,
        n_clients: int,
        rng: np.random.Generator,
        *,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Give client ``k`` the samples of the ``k``-th sorted group key.

        See :meth:`Partitioner.partition`. ``rng`` is accepted for the common
        interface but never used: the partition depends on ``groups`` only.

        Raises
        ------
        PartitionError
            If ``groups`` is ``None`` (names ``data.client_column``), is
            misaligned with ``labels`` or has missing values; if ``n_clients``
            differs from the number of distinct groups (names
            ``federation.clients`` and the number to set); or if a group is
            smaller than ``min_samples`` (names ``partition.min_samples``).
        """
        labels = validate_inputs(labels, n_clients)
        if groups is None:
            raise PartitionError(
                "partition.method=natural needs each sample's client: set "
                "data.client_column (a table's column), partition.natural_mapping "
                "(a CSV of path,client rows) or partition.natural_level (the "
                "folder level of an image's path, e.g. 0 for data.path/<writer>/)"
            )
        n = labels.shape[0]
        group_arr = np.asarray(groups)
        if group_arr.shape != (n,):
            raise PartitionError(
                f"groups (data.client_column) must be 1-D with one key per "
                f"sample ({n}), got shape {group_arr.shape}"
            )
        keys, inverse = _group_codes(group_arr)
        if n_clients != len(keys):
            raise PartitionError(
                f"federation.clients={n_clients} does not match the {len(keys)} "
                f"distinct groups in data.client_column; partition.method=natural "
                f"makes one client per group: set federation.clients to {len(keys)}"
            )
        check_min_samples_feasible(n, n_clients, self.min_samples)
        order = np.argsort(inverse, kind="stable").astype(np.int64)
        sizes = np.bincount(inverse, minlength=len(keys))
        shares = np.split(order, np.cumsum(sizes)[:-1])
        smallest = int(sizes.min()) if len(sizes) else 0
        if smallest < self.min_samples:
            client = int(np.argmin(sizes))
            raise PartitionError(
                f"partition.min_samples={self.min_samples} cannot be met with "
                f"partition.method=natural: client {client} (group "
                f"{as_python(keys[client])!r}) has {smallest} samples; use "
                f"partition.min_samples <= {smallest}"
            )
        return list(shares)


def _group_codes(groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct keys and each sample's key index; reject missing keys."""
    arr = np.asarray(groups)
    if arr.ndim != 1:
        raise PartitionError(
            f"groups (data.client_column) must be 1-D, got shape {arr.shape}"
        )
    if arr.dtype.kind == "f":
        missing = np.isnan(arr)
    elif arr.dtype.kind == "O":
        missing = np.array([v is None or v != v for v in arr.tolist()], dtype=bool)
    else:
        missing = np.zeros(arr.shape, dtype=bool)
    if missing.any():
        raise PartitionError(
            f"groups (data.client_column) has {int(missing.sum())} missing "
            f"values (first at position {int(np.flatnonzero(missing)[0])}); "
            f"every sample needs a client key"
        )
    try:
        keys, inverse = np.unique(arr, return_inverse=True)
    except TypeError as exc:
        raise PartitionError(
            f"groups (data.client_column) keys cannot be sorted: {exc}"
        ) from None
    return keys, inverse.reshape(-1).astype(np.int64)


def read_mapping(path: Path) -> dict[str, str]:
    """A ``partition.natural_mapping`` file as ``{path under data.path: client}``.

    The file is a CSV with the header ``path,client`` (further columns are
    ignored); paths are compared as POSIX paths (``./a/b.png`` is ``a/b.png``,
    a backslash is a separator).

    Raises
    ------
    PartitionError
        The file is missing or unreadable, lacks the header, has a row with an
        empty path or client, or gives one path two different clients (each names
        the file and the row).
    """
    where = f"partition.natural_mapping: {path}"
    if not path.is_file():
        raise PartitionError(
            f"{where} does not exist; give a CSV file (relative to the project "
            "root) with the header path,client"
        )
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip() for h in reader.fieldnames or []]
            if not set(MAPPING_COLUMNS) <= set(header):
                raise PartitionError(
                    f"{where}: the header is {','.join(header) or '(empty)'}; "
                    f"expected the columns {','.join(MAPPING_COLUMNS)} (one row per "
                    "image: its path under data.path and its client)"
                )
            reader.fieldnames = header
            mapping: dict[str, str] = {}
            for row_number, row in enumerate(reader, start=2):
                key = _normal_path(row.get("path") or "")
                client = (row.get("client") or "").strip()
                if not key or not client:
                    empty = "path" if not key else "client"
                    raise PartitionError(
                        f"{where}, row {row_number}: the {empty} is empty; every "
                        "row needs an image path and a client"
                    )
                if mapping.setdefault(key, client) != client:
                    raise PartitionError(
                        f"{where}, row {row_number}: {key!r} is given client "
                        f"{client!r} but an earlier row gives it {mapping[key]!r}; "
                        "an image belongs to one client"
                    )
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise PartitionError(f"{where} cannot be read as CSV: {exc}") from None
    if not mapping:
        raise PartitionError(f"{where} has no rows; one row per image is needed")
    return mapping


def mapped_groups(ids: Sequence[str], mapping: dict[str, str]) -> np.ndarray:
    """Each sample's client from ``mapping`` (:func:`read_mapping`).

    Raises
    ------
    PartitionError
        Paths in the mapping that are no sample (the first few named) or samples
        the mapping does not name (the first few named).
    """
    known = set(ids)
    unknown = [p for p in mapping if p not in known]
    if unknown:
        raise PartitionError(
            f"partition.natural_mapping: {len(unknown)} path(s) name no image in "
            f"data.path ({_first(unknown)}); paths are relative to data.path, as "
            f"the sample ids are (e.g. {ids[0]!r})"
        )
    missing = [i for i in ids if i not in mapping]
    if missing:
        raise PartitionError(
            f"partition.natural_mapping: {len(missing)} image(s) have no client "
            f"({_first(missing)}); add a path,client row for each"
        )
    return np.array([mapping[i] for i in ids], dtype=str)


def level_groups(ids: Sequence[str], level: int) -> np.ndarray:
    """Each sample's folder at ``level`` of its path (``0`` = the top folder).

    Raises
    ------
    PartitionError
        A sample whose path has no folder at ``level`` (names it and the levels
        its path has).
    """
    keys = []
    for sample_id in ids:
        folders = PurePosixPath(sample_id).parts[:-1]
        if level >= len(folders):
            allowed = f"0..{len(folders) - 1}" if folders else "none"
            raise PartitionError(
                f"partition.natural_level={level} is deeper than the folder tree: "
                f"sample {sample_id!r} has {len(folders)} folder level(s) under "
                f"data.path (allowed levels: {allowed}; data.class_level puts the "
                "class folders below e.g. data.path/<writer>/)"
            )
        keys.append(folders[level])
    return np.array(keys, dtype=str)


def _normal_path(text: str) -> str:
    parts = PurePosixPath(text.strip().replace("\\", "/")).parts
    return "/".join(p for p in parts if p not in (".", ""))


def _first(paths: Sequence[str]) -> str:
    shown = ", ".join(repr(p) for p in paths[:_SHOWN])
    return f"first: {shown}" + (", ..." if len(paths) > _SHOWN else "")

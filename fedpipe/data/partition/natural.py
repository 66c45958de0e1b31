"""Natural-id partitioner: one client per distinct value of a per-sample key.

For data with a natural client (a writer in FEMNIST, a hospital, a device),
``groups`` holds that key per sample; client ``k`` gets every sample of the
``k``-th distinct key in sorted order. No randomness is involved.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from fedpipe.data.partition.base import (
    MIN_SAMPLES,
    Partitioner,
    PartitionError,
    as_python,
    check_min_samples_feasible,
    validate_inputs,
    validate_min_samples,
)


class NaturalIdPartitioner(Partitioner):
    """One client per distinct group key, in sorted key order; deterministic.

    Parameters
    ----------
    min_samples : int, optional
        Minimum samples per client (``partition.min_samples``), ``>= 0``.
        Default ``0``. Groups are never split or merged, so a smaller group is
        an error.

    Raises
    ------
    PartitionError
        If ``min_samples < 0``.
    """

    name: ClassVar[str] = "natural"
    settings: ClassVar[tuple[str, ...]] = (MIN_SAMPLES,)

    def __init__(self, *, min_samples: int = 0) -> None:
        self.min_samples = validate_min_samples(min_samples)

    def __repr__(self) -> str:
        return f"NaturalIdPartitioner(min_samples={self.min_samples})"

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
                "data.client_column must be set for partition.method=natural: "
                "it names the column holding each sample's natural client "
                "(e.g. a writer or hospital id)"
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

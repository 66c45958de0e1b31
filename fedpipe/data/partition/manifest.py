"""Held-out split, partition checks, the client manifest and a label-skew metric.

Typical flow::

    train_pos, test_pos = split_heldout(len(ids), test_fraction=0.2, rng=rng,
                                        labels=labels)
    shares = partitioner.partition(labels[train_pos], n_clients, rng,
                                   groups=groups[train_pos])  # groups: natural only
    check_partition(shares, len(train_pos), min_samples=min_samples,
                    labels=labels[train_pos], min_classes=min_classes)
    manifest = build_manifest(sample_ids=ids[train_pos], labels=labels[train_pos],
                              client_indices=shares, heldout_ids=ids[test_pos], ...)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from fedpipe.data.partition.base import PartitionError

__all__ = ["build_manifest", "check_partition", "label_skew", "split_heldout"]

_MAX_LISTED = 5  # how many offending indices an error message lists


def _listed(values: np.ndarray) -> str:
    shown = ", ".join(str(int(v)) for v in values[:_MAX_LISTED])
    more = len(values) - _MAX_LISTED
    return shown + (f" (+{more} more)" if more > 0 else "")


def check_partition(
    client_indices: Sequence[np.ndarray],
    n_samples: int,
    *,
    min_samples: int,
    labels: np.ndarray | None = None,
    min_classes: int = 1,
) -> None:
    """Verify that a partition covers ``0 .. n_samples - 1`` exactly once.

    Parameters
    ----------
    client_indices : sequence of np.ndarray
        One integer position array per client.
    n_samples : int
        Size of the partitioned pool.
    min_samples : int
        Required minimum number of samples per client
        (``partition.min_samples``). No default.
    labels : np.ndarray or None, optional
        1-D labels of the pool (length ``n_samples``). Default ``None``: the
        per-client class check is skipped.
    min_classes : int, optional
        Required minimum number of distinct classes per client
        (``partition.min_classes``), ``>= 0``; checked only when ``labels``
        is given. Default ``1`` (no client without samples).

    Raises
    ------
    PartitionError
        If an array is not 1-D integer, a position is out of range, a position
        appears more than once (within or across clients), a position is
        missing, a client holds fewer than ``min_samples`` positions (the
        message names the client id, its size and ``partition.min_samples``),
        or, with ``labels``, a client holds fewer than ``min_classes``
        distinct classes (the message names the client id, the classes it has
        and ``partition.min_classes``); also if ``labels`` is misshapen or
        ``min_classes`` is not an integer ``>= 0``.
    """
    if (
        isinstance(min_classes, bool)
        or not isinstance(min_classes, numbers.Integral)
        or min_classes < 0
    ):
        raise PartitionError(
            f"partition.min_classes must be an integer >= 0, got {min_classes!r}"
        )
    lab = None if labels is None else np.asarray(labels)
    if lab is not None and lab.shape != (n_samples,):
        raise PartitionError(
            f"labels must be 1-D with length n_samples={n_samples}, got shape "
            f"{lab.shape}"
        )

    arrays = []
    for client, idx in enumerate(client_indices):
        arr = np.asarray(idx)
        if arr.ndim != 1 or not (arr.size == 0 or np.issubdtype(arr.dtype, np.integer)):
            raise PartitionError(
                f"client {client}: indices must be a 1-D integer array, got "
                f"dtype {arr.dtype} and shape {arr.shape}"
            )
        arrays.append(arr.astype(np.int64, copy=False))

    if arrays:
        flat = np.concatenate(arrays)
        owners = np.repeat(np.arange(len(arrays)), [len(a) for a in arrays])
    else:
        flat = owners = np.empty(0, dtype=np.int64)

    bad = (flat < 0) | (flat >= n_samples)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise PartitionError(
            f"partition: indices out of range [0, {n_samples}): {_listed(flat[bad])} "
            f"(first in client {int(owners[first])})"
        )

    counts = np.bincount(flat, minlength=n_samples)
    duplicated = np.flatnonzero(counts > 1)
    if duplicated.size:
        holders = sorted({int(c) for c in owners[flat == duplicated[0]]})
        raise PartitionError(
            f"partition: indices assigned more than once: {_listed(duplicated)} "
            f"(index {int(duplicated[0])} is held by clients {holders})"
        )
    missing = np.flatnonzero(counts == 0)
    if missing.size:
        raise PartitionError(
            f"partition: indices assigned to no client: {_listed(missing)} "
            f"({missing.size} of {n_samples} missing)"
        )

    for client, arr in enumerate(arrays):
        if len(arr) < min_samples:
            raise PartitionError(
                f"partition.min_samples={min_samples} violated: client {client} "
                f"has {len(arr)} samples"
            )

    if lab is None:
        return
    for client, arr in enumerate(arrays):
        held = np.unique(lab[arr])
        if len(held) < min_classes:
            raise PartitionError(
                f"partition.min_classes={min_classes} violated: client {client} "
                f"has {len(held)} distinct classes {held.tolist()} in "
                f"{len(arr)} samples"
            )


def _round_half_up(x: float) -> int:
    return int(math.floor(x + 0.5))


def _allocate(counts: np.ndarray, total: int) -> np.ndarray:
    """Split ``total`` over groups proportionally to ``counts``.

    Largest-remainder method: each group gets the floor or ceiling of its
    exact quota and the result sums to ``total``; ties go to the earlier group.
    """
    n = int(counts.sum())
    if n == 0:
        return np.zeros_like(counts)
    quota = counts * (total / n)
    base = np.floor(quota).astype(np.int64)
    remainder = quota - base
    extra = total - int(base.sum())
    # stable sort on -remainder: larger remainder first, then lower group id
    order = np.argsort(-remainder, kind="stable")
    base[order[:extra]] += 1
    return base


def split_heldout(
    n_samples: int,
    *,
    test_fraction: float,
    rng: np.random.Generator,
    labels: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Split positions ``0 .. n_samples - 1`` into a train pool and a held-out test set.

    The held-out size is ``round(test_fraction * n_samples)`` (half rounds up),
    clamped to ``[1, n_samples - 1]`` when ``n_samples >= 2``. With ``labels``
    the split is stratified: each class contributes the floor or ceiling of
    its proportional share (largest-remainder allocation, so the total is
    exact), drawn uniformly from that class; classes are visited in
    ``np.unique`` order.

    Parameters
    ----------
    n_samples : int
        Number of samples, ``>= 0``.
    test_fraction : float
        Fraction held out (``data.test_fraction``), strictly in ``(0, 1)``.
        No default.
    rng : np.random.Generator
        Source of randomness.
    labels : np.ndarray or None, optional
        Length-``n_samples`` 1-D label array to stratify by. Default ``None``
        (plain uniform split).

    Returns
    -------
    train_positions, test_positions : np.ndarray
        Sorted, disjoint ``int64`` position arrays that together cover
        ``0 .. n_samples - 1``.

    Raises
    ------
    PartitionError
        If ``test_fraction`` is not in ``(0, 1)`` (names ``data.test_fraction``),
        ``n_samples < 0``, or ``labels`` has the wrong shape.
    """
    if (
        isinstance(test_fraction, bool)
        or not isinstance(test_fraction, numbers.Real)
        or not 0.0 < float(test_fraction) < 1.0
    ):
        raise PartitionError(
            f"data.test_fraction must be in (0, 1), got {test_fraction!r}"
        )
    if (
        isinstance(n_samples, bool)
        or not isinstance(n_samples, numbers.Integral)
        or n_samples < 0
    ):
        raise PartitionError(f"n_samples must be an integer >= 0, got {n_samples!r}")
    n = int(n_samples)
    n_test = _round_half_up(float(test_fraction) * n)
    if n >= 2:
        n_test = min(max(n_test, 1), n - 1)

    if labels is None:
        test = rng.permutation(n)[:n_test]
    else:
        lab = np.asarray(labels)
        if lab.shape != (n,):
            raise PartitionError(
                f"labels must be 1-D with length n_samples={n}, got shape {lab.shape}"
            )
        classes, inverse = np.unique(lab, return_inverse=True)
        per_class = _allocate(np.bincount(inverse, minlength=len(classes)), n_test)
        chosen = [
            rng.permutation(np.flatnonzero(inverse == k))[: per_class[k]]
            for k in range(len(classes))
        ]
        test = np.concatenate(chosen) if chosen else np.empty(0, dtype=np.int64)

    is_test = np.zeros(n, dtype=bool)
    is_test[test] = True
    positions = np.arange(n, dtype=np.int64)
    return positions[~is_test], positions[is_test]


def _jsonable(value: object, key: str) -> object:
    """Convert a params value to plain JSON types (numpy scalars, tuples...)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise PartitionError(f"params[{key!r}] must be finite, got {value!r}")
        return value
    if isinstance(value, Mapping):
        return {
            str(k): _jsonable(v, f"{key}.{k}")
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        }
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, key) for v in value]
    raise PartitionError(
        f"params[{key!r}] is not JSON-serialisable: {type(value).__name__}"
    )


def build_manifest(
    *,
    sample_ids: np.ndarray,
    labels: np.ndarray,
    client_indices: Sequence[np.ndarray],
    heldout_ids: np.ndarray,
    local_test_fraction: float,
    rng: np.random.Generator,
    classes: Sequence[int],
    method: str,
    params: Mapping[str, object],
) -> dict:
    """Describe a partition as a JSON-serialisable manifest.

    Each client's share is shuffled with ``rng`` and split into a local train
    and local test part. The local test size is
    ``round(local_test_fraction * n_k)`` (half rounds up), clamped to
    ``[1, n_k - 1]`` when ``n_k >= 2`` and ``local_test_fraction > 0``; clients
    with fewer than 2 samples, and every client when ``local_test_fraction``
    is 0, get no local test samples. Clients consume ``rng`` in order 0..K-1.

    Parameters
    ----------
    sample_ids : np.ndarray
        1-D array of unique sample ids of the partitioned pool (held-out
        samples excluded). Ids are written as ``str(id)``.
    labels : np.ndarray
        1-D labels aligned with ``sample_ids``; every label must be in
        ``classes``.
    client_indices : sequence of np.ndarray
        Output of :meth:`Partitioner.partition` on ``labels``: positions into
        ``sample_ids``, covering each exactly once (checked).
    heldout_ids : np.ndarray
        Ids of the global held-out test set; must not overlap ``sample_ids``.
    local_test_fraction : float
        Fraction of each client's share kept for local testing, in ``[0, 1)``.
        No default.
    rng : np.random.Generator
        Source of randomness for the local splits.
    classes : sequence of int
        Class order used for the ``*_class_counts`` vectors.
    method : str
        Partitioning method name, recorded verbatim.
    params : mapping
        Partitioning parameters, recorded with keys sorted and numpy values
        converted to plain JSON types.

    Returns
    -------
    dict
        ``{"method", "params", "classes", "n_clients", "heldout", "clients"}``
        where ``clients`` is a list of ``{"client", "train", "test",
        "train_class_counts", "test_class_counts"}``. All id lists are sorted
        strings; the dict survives ``json.loads(json.dumps(m)) == m``.

    Raises
    ------
    PartitionError
        On malformed inputs: bad ``local_test_fraction``, misaligned or
        duplicate ids, labels outside ``classes``, a partition that does not
        cover ``sample_ids`` exactly once, overlapping held-out ids, or
        non-JSON ``params``.
    """
    if (
        isinstance(local_test_fraction, bool)
        or not isinstance(local_test_fraction, numbers.Real)
        or not 0.0 <= float(local_test_fraction) < 1.0
    ):
        raise PartitionError(
            "partition.local_test_fraction must be in [0, 1), "
            f"got {local_test_fraction!r}"
        )
    ids = np.asarray(sample_ids)
    lab = np.asarray(labels)
    if ids.ndim != 1 or lab.shape != ids.shape:
        raise PartitionError(
            f"sample_ids and labels must be 1-D of equal length, got shapes "
            f"{ids.shape} and {lab.shape}"
        )
    id_strs = [str(x) for x in ids.tolist()]
    if len(set(id_strs)) != len(id_strs):
        raise PartitionError("sample_ids must be unique")
    heldout = sorted(str(x) for x in np.asarray(heldout_ids).ravel().tolist())
    overlap = set(heldout) & set(id_strs)
    if overlap:
        raise PartitionError(
            f"heldout_ids overlap the partitioned sample_ids: {sorted(overlap)[:5]}"
        )

    class_list = [int(c) for c in classes]
    if len(set(class_list)) != len(class_list):
        raise PartitionError(f"classes must be unique, got {class_list}")
    class_pos = {c: i for i, c in enumerate(class_list)}
    try:
        label_pos = np.array([class_pos[int(x)] for x in lab.tolist()], dtype=np.int64)
    except KeyError as exc:
        raise PartitionError(
            f"label {exc.args[0]} is not in classes {class_list}"
        ) from None

    check_partition(client_indices, len(id_strs), min_samples=0)

    frac = float(local_test_fraction)
    n_classes = len(class_list)
    clients = []
    for client, idx in enumerate(client_indices):
        share = rng.permutation(np.asarray(idx, dtype=np.int64))
        n_k = len(share)
        n_test = 0
        if frac > 0 and n_k >= 2:
            n_test = min(max(_round_half_up(frac * n_k), 1), n_k - 1)
        test, train = share[:n_test], share[n_test:]
        clients.append(
            {
                "client": client,
                "train": sorted(id_strs[i] for i in train.tolist()),
                "test": sorted(id_strs[i] for i in test.tolist()),
                "train_class_counts": np.bincount(
                    label_pos[train], minlength=n_classes
                ).tolist(),
                "test_class_counts": np.bincount(
                    label_pos[test], minlength=n_classes
                ).tolist(),
            }
        )

    return {
        "method": str(method),
        "params": _jsonable(dict(params), "params"),
        "classes": class_list,
        "n_clients": len(clients),
        "heldout": heldout,
        "clients": clients,
    }


def label_skew(manifest: dict) -> float:
    """Mean total-variation distance of client train labels from the pooled mix.

    For each client ``k`` with a non-empty train split,
    ``TV_k = 0.5 * sum_c |q_k(c) - p(c)|`` where ``q_k`` is the client's train
    label distribution and ``p`` the distribution of all clients' train
    samples pooled. The result is the mean of ``TV_k``: 0 means every client
    mirrors the pool, 1 means client label sets are disjoint from the pool
    (in practice bounded by ``1 - max_c p(c)``). Clients with no train
    samples are skipped; returns ``0.0`` if there are none (or no clients).

    Parameters
    ----------
    manifest : dict
        Output of :func:`build_manifest`.

    Returns
    -------
    float
        The skew, in ``[0, 1]``.
    """
    if not manifest["clients"]:
        return 0.0
    counts = np.array(
        [c["train_class_counts"] for c in manifest["clients"]], dtype=float
    ).reshape(len(manifest["clients"]), -1)
    sizes = counts.sum(axis=1)
    counts, sizes = counts[sizes > 0], sizes[sizes > 0]
    if sizes.size == 0:
        return 0.0
    pooled = counts.sum(axis=0) / sizes.sum()
    tv = 0.5 * np.abs(counts / sizes[:, None] - pooled).sum(axis=1)
    return float(tv.mean())

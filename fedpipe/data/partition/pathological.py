"""Pathological label-skew partitioner: each client holds exactly a few classes.

The McMahan et al. (2017) style of label skew by class assignment. The classes
(``np.unique`` order) are shuffled once with the generator; the resulting
sequence is repeated and dealt round-robin, ``classes_per_client`` consecutive
entries per client, so every class is held by some client (given enough slots)
and no client holds a class twice. Each class's shuffled samples are then split
near-equally (as ``np.array_split``) among the clients holding it.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from fedpipe.core.component import REQUIRED, Setting
from fedpipe.data.partition.base import (
    MIN_SAMPLES,
    Partitioner,
    PartitionError,
    as_python,
    as_shares,
)

CLASSES_PER_CLIENT = Setting(
    "classes_per_client",
    int,
    default=REQUIRED,
    ge=1,
    params_default=2,
    help="classes each client holds",
)


class PathologicalPartitioner(Partitioner):
    """Every client gets samples of exactly ``classes_per_client`` classes.

    With ``C`` classes and ``K`` clients there are ``K * classes_per_client``
    class slots; slot ``j`` holds class ``perm[j % C]`` of a seeded class
    permutation ``perm`` and client ``k`` takes slots
    ``k * classes_per_client .. (k + 1) * classes_per_client - 1``. Each class
    is therefore held by ``floor`` or ``ceil`` of ``K * classes_per_client / C``
    clients, and clients whose slots line up with the same stretch of ``perm``
    share the same class set.

    Parameters
    ----------
    classes_per_client : int
        Number of distinct classes per client (``partition.classes_per_client``),
        ``>= 1``. No default.
    min_samples : int, optional
        Minimum samples per client (``partition.min_samples``), ``>= 0``.
        Default ``0``.

    Raises
    ------
    PartitionError
        If ``classes_per_client < 1`` or ``min_samples < 0``.
    """

    name: ClassVar[str] = "pathological"
    settings: ClassVar[tuple[str, ...]] = (CLASSES_PER_CLIENT, MIN_SAMPLES)

    def __init__(self, *, classes_per_client: int, min_samples: int = 0) -> None:
        self.classes_per_client = self.checked(CLASSES_PER_CLIENT, classes_per_client)
        self.min_samples = self.checked(MIN_SAMPLES, min_samples)

    def partition(
        self,
        labels: np.ndarray,
        n_clients: int,
        rng: np.random.Generator,
        *,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Deal classes round-robin, then split each class among its holders.

        See :meth:`Partitioner.partition`; ``groups`` is ignored. The
        generator is used for one class permutation, then one shuffle per
        class in ``np.unique`` order.

        Raises
        ------
        PartitionError
            Naming ``partition.classes_per_client`` if it exceeds the number of
            classes, if ``n_clients * classes_per_client`` slots cannot cover
            every class, or if a class has fewer samples than clients holding
            it; naming ``partition.min_samples`` if it cannot be met.
        """
        labels = self.checked_labels(labels, n_clients)
        classes, inverse = np.unique(labels, return_inverse=True)
        n_classes = len(classes)
        k = self.classes_per_client
        if k > n_classes:
            raise PartitionError(
                f"partition.classes_per_client={k} exceeds the {n_classes} classes "
                f"in the data; use partition.classes_per_client <= {n_classes}"
            )
        if k * n_clients < n_classes:
            need = math.ceil(n_classes / n_clients)
            raise PartitionError(
                f"partition.classes_per_client={k} x federation.clients={n_clients} "
                f"= {k * n_clients} class slots cannot cover all {n_classes} "
                f"classes (every sample must go to a client); use "
                f"partition.classes_per_client >= {need} or more clients"
            )

        order = rng.permutation(n_classes)
        slots = order[np.arange(n_clients * k) % n_classes].reshape(n_clients, k)
        pieces: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for c in range(n_classes):
            holders = np.flatnonzero((slots == c).any(axis=1))
            positions = np.flatnonzero(inverse == c)
            if len(positions) < len(holders):
                raise PartitionError(
                    f"partition.classes_per_client={k} cannot be met: class "
                    f"{as_python(classes[c])!r} has {len(positions)} samples but "
                    f"{len(holders)} clients must share it; lower "
                    f"partition.classes_per_client or use fewer clients"
                )
            shuffled = rng.permutation(positions)
            for client, chunk in zip(
                holders, np.array_split(shuffled, len(holders)), strict=True
            ):
                pieces[client].append(chunk)
        shares = as_shares(pieces)

        sizes = np.array([len(s) for s in shares])
        smallest = int(sizes.min())
        if smallest < self.min_samples:
            client = int(np.argmin(sizes))
            raise PartitionError(
                f"partition.min_samples={self.min_samples} cannot be met with "
                f"partition.classes_per_client={k}: client {client} gets "
                f"{smallest} samples (classes {classes[slots[client]].tolist()}); "
                f"use partition.min_samples <= {smallest} or raise "
                f"partition.classes_per_client"
            )
        return shares

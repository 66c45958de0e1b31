"""Shards partitioner: the label-sorted shard scheme of the FedAvg paper.

McMahan et al. (2017) sort the samples by label, cut them into
``n_clients * shards_per_client`` equal shards and give each client
``shards_per_client`` random shards, so a client sees only a few classes.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from fedpipe.core.component import REQUIRED, Setting
from fedpipe.data.partition.base import (
    MIN_SAMPLES,
    Partitioner,
    PartitionError,
    as_shares,
)

SHARDS_PER_CLIENT = Setting(
    "shards_per_client",
    int,
    default=REQUIRED,
    ge=1,
    params_default=2,
    help="label-sorted shards per client",
)


class ShardsPartitioner(Partitioner):
    """Sort by label, cut into equal shards, deal ``shards_per_client`` to each.

    Positions are shuffled before a stable sort by label, so which samples of a
    class share a shard is random. Shards are cut as with ``np.array_split``
    (sizes differ by at most one). The deck of shard ids is shuffled, with the
    one-larger shards shuffled among themselves and placed first, and dealt
    round-robin, so client sizes differ by at most one (the first
    ``len(labels) % n_clients`` clients get the extra sample, as with
    ``iid``) and ``min_samples`` fails only when ``len(labels) // n_clients``
    is smaller. A shard spans at most two classes when every class has at
    least a shard's worth of samples, so a client then holds at most
    ``2 * shards_per_client`` classes.

    Parameters
    ----------
    shards_per_client : int
        Shards dealt to each client (``partition.shards_per_client``), ``>= 1``.
        No default; the FedAvg paper uses ``2``.
    min_samples : int, optional
        Minimum samples per client (``partition.min_samples``), ``>= 0``.
        Default ``0``.

    Raises
    ------
    PartitionError
        If ``shards_per_client < 1`` or ``min_samples < 0``.
    """

    name: ClassVar[str] = "shards"
    settings: ClassVar[tuple[str, ...]] = (SHARDS_PER_CLIENT, MIN_SAMPLES)

    def __init__(self, *, shards_per_client: int, min_samples: int = 0) -> None:
        self.shards_per_client = self.checked(SHARDS_PER_CLIENT, shards_per_client)
        self.min_samples = self.checked(MIN_SAMPLES, min_samples)

    def partition(
        self,
        labels: np.ndarray,
        n_clients: int,
        rng: np.random.Generator,
        *,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Deal label-sorted shards; see :meth:`Partitioner.partition`.

        ``groups`` is ignored. The generator is used for one shuffle of the
        positions, then one permutation each of the larger and the smaller
        shard ids.

        Raises
        ------
        PartitionError
            Naming ``partition.min_samples`` if
            ``min_samples * n_clients > len(labels)``; naming
            ``partition.shards_per_client`` if there are more shards than
            samples.
        """
        labels = self.checked_labels(labels, n_clients)
        n = labels.shape[0]
        s = self.shards_per_client
        n_shards = n_clients * s
        if n_shards > n:
            fix = (
                f"use partition.shards_per_client <= {n // n_clients}"
                if n >= n_clients
                else f"use at most {n} clients"
            )
            raise PartitionError(
                f"partition.shards_per_client={s} x federation.clients={n_clients} "
                f"= {n_shards} shards exceeds the {n} samples (every shard needs "
                f"one); {fix}"
            )
        shuffled = rng.permutation(n)
        by_label = shuffled[np.argsort(labels[shuffled], kind="stable")]
        shards = np.array_split(by_label.astype(np.int64), n_shards)
        # np.array_split makes the first n % n_shards shards one larger; dealing
        # the shuffled large shards first, round-robin, spreads them evenly
        n_large = n % n_shards
        deck = np.concatenate(
            [rng.permutation(n_large), n_large + rng.permutation(n_shards - n_large)]
        )
        dealt = deck.reshape(s, n_clients).T
        return as_shares([[shards[j] for j in row] for row in dealt])

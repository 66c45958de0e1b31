"""IID partitioner: uniform random assignment with near-equal client sizes."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from fedpipe.data.partition.base import (
    MIN_SAMPLES,
    Partitioner,
)


class IidPartitioner(Partitioner):
    """Shuffle all positions, then cut them into ``n_clients`` near-equal parts.

    Client sizes differ by at most one (the first ``n % n_clients`` clients
    get the extra sample, as with ``np.array_split``). Labels are ignored
    apart from their count, so each client's label mix matches the pool's up
    to sampling noise.

    Parameters
    ----------
    min_samples : int, optional
        Minimum samples per client (``partition.min_samples``). Default ``0``.
        Checked up front: it fails only when ``len(labels) // n_clients`` is
        smaller.
    """

    name: ClassVar[str] = "iid"
    settings: ClassVar[tuple[str, ...]] = (MIN_SAMPLES,)

    def __init__(self, *, min_samples: int = 0) -> None:
        self.min_samples = self.checked(MIN_SAMPLES, min_samples)

    def partition(
        self,
        labels: np.ndarray,
        n_clients: int,
        rng: np.random.Generator,
        *,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Partition uniformly at random; see :meth:`Partitioner.partition`.

        ``groups`` is ignored.
        """
        labels = self.checked_labels(labels, n_clients)
        n = labels.shape[0]
        order = rng.permutation(n).astype(np.int64)
        return [np.sort(part) for part in np.array_split(order, n_clients)]

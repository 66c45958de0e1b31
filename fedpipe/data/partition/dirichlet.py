"""Dirichlet label-skew partitioner (Hsu et al., 2019; as in flwr-datasets).

For each class, client proportions ``p ~ Dir(alpha * 1_K)`` are drawn and the
class's shuffled positions are cut accordingly. Small ``alpha`` concentrates
each class on few clients (strong label skew); large ``alpha`` approaches IID.
Unlike flwr-datasets there is no "self-balancing" step.
"""

from __future__ import annotations

import numbers
from typing import ClassVar

import numpy as np

from fedpipe.core.component import REQUIRED, Setting
from fedpipe.data.partition.base import (
    MIN_SAMPLES,
    Partitioner,
    PartitionError,
    as_shares,
)

ALPHA = Setting(
    "alpha",
    float,
    default=REQUIRED,
    gt=0.0,
    params_default=0.5,
    help="concentration (lower = more label skew)",
)


class DirichletPartitioner(Partitioner):
    """Label-skewed partition with per-class Dirichlet client proportions.

    Parameters
    ----------
    alpha : float
        Symmetric Dirichlet concentration (``partition.alpha``), ``> 0``.
        No default.
    min_samples : int
        Minimum samples every client must receive (``partition.min_samples``),
        ``>= 0``. No default.
    max_tries : int, optional
        Number of full Dirichlet draws attempted before giving up on
        ``min_samples``. Default ``100``.

    Raises
    ------
    PartitionError
        If ``alpha <= 0`` (or not finite), ``min_samples < 0`` or
        ``max_tries < 1``.
    """

    name: ClassVar[str] = "dirichlet"
    settings: ClassVar[tuple[str, ...]] = (
        ALPHA,
        MIN_SAMPLES.but(default=REQUIRED),
    )

    def __init__(self, *, alpha: float, min_samples: int, max_tries: int = 100) -> None:
        self.alpha = self.checked(ALPHA, alpha)
        if (
            isinstance(max_tries, bool)
            or not isinstance(max_tries, numbers.Integral)
            or max_tries < 1
        ):
            raise PartitionError(
                f"DirichletPartitioner max_tries must be an integer >= 1, "
                f"got {max_tries!r}"
            )
        self.min_samples = self.checked(MIN_SAMPLES, min_samples)
        self.max_tries = int(max_tries)

    def __repr__(self) -> str:
        return (
            f"DirichletPartitioner(alpha={self.alpha}, "
            f"min_samples={self.min_samples}, max_tries={self.max_tries})"
        )

    def partition(
        self,
        labels: np.ndarray,
        n_clients: int,
        rng: np.random.Generator,
        *,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Partition with Dirichlet label skew; see :meth:`Partitioner.partition`.

        ``groups`` is ignored. Classes are processed in ``np.unique`` order.
        If a draw leaves some client with fewer than ``min_samples`` samples
        the whole draw is repeated, up to ``max_tries`` times.

        Raises
        ------
        PartitionError
            If ``min_samples * n_clients > len(labels)`` (impossible for any
            draw), or if no draw within ``max_tries`` meets ``min_samples``;
            the message names ``partition.alpha`` / ``partition.min_samples``
            and values that would work.
        """
        labels = self.checked_labels(labels, n_clients)
        n = labels.shape[0]
        classes = np.unique(labels)
        class_positions = [np.flatnonzero(labels == c) for c in classes]
        concentration = np.full(n_clients, self.alpha)

        best_smallest = -1
        for _ in range(self.max_tries):
            shares = self._draw(class_positions, concentration, rng)
            smallest = min(len(s) for s in shares)
            if smallest >= self.min_samples:
                return shares
            best_smallest = max(best_smallest, smallest)

        raise PartitionError(
            f"partition.min_samples={self.min_samples} cannot be met with "
            f"partition.alpha={self.alpha} after {self.max_tries} Dirichlet draws "
            f"({n} samples, {n_clients} clients; the best draw's smallest client "
            f"had {best_smallest} samples); lower partition.min_samples to "
            f"<= {best_smallest} or raise partition.alpha (larger alpha gives "
            f"more even client sizes)"
        )

    @staticmethod
    def _draw(
        class_positions: list[np.ndarray],
        concentration: np.ndarray,
        rng: np.random.Generator,
    ) -> list[np.ndarray]:
        """One full draw: split every class by fresh Dirichlet proportions."""
        n_clients = concentration.shape[0]
        pieces: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for positions in class_positions:
            proportions = rng.dirichlet(concentration)
            shuffled = rng.permutation(positions)
            cuts = np.floor(np.cumsum(proportions)[:-1] * len(shuffled)).astype(int)
            cuts = np.clip(cuts, 0, len(shuffled))
            for client, chunk in enumerate(np.split(shuffled, cuts)):
                pieces[client].append(chunk)
        return as_shares(pieces)

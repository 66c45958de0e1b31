"""Quantity-skew partitioner: IID labels, log-normal client sizes.

Client sizes follow a log-normal with ``sigma = partition.quantity_sigma``
(``sigma = 0`` gives equal sizes), normalised to the pool and floored at
``partition.min_samples``; the samples themselves are dealt uniformly at random,
so each client's label mix matches the pool's up to sampling noise. The skew
shows in the coefficient of variation of client sizes (see
:func:`fedpipe.data.partition.diagnostics.skew_summary`).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from fedpipe.core.component import REQUIRED, Setting
from fedpipe.data.partition.base import (
    MIN_SAMPLES,
    Partitioner,
)

QUANTITY_SIGMA = Setting(
    "quantity_sigma",
    float,
    default=REQUIRED,
    ge=0.0,
    params_default=0.5,
    help="log-normal sigma of client sizes (0 = equal)",
)


class QuantitySkewPartitioner(Partitioner):
    """IID label mix with log-normally distributed client sizes.

    Client weights are ``w_k = exp(sigma * z_k)`` with ``z_k ~ N(0, 1)``
    (log-normal; computed relative to the largest weight, so large ``sigma``
    cannot overflow). Sizes are proportional to the weights and sum to the
    pool; clients whose share falls below ``min_samples`` are raised to it and
    the rest is re-shared among the others in proportion to their weights
    (water-filling), then rounded by largest remainder.

    Parameters
    ----------
    quantity_sigma : float
        Log-normal sigma (``partition.quantity_sigma``), finite and ``>= 0``.
        ``0`` gives sizes differing by at most one. No default.
    min_samples : int, optional
        Minimum samples per client (``partition.min_samples``), ``>= 0``.
        Default ``0``.

    Raises
    ------
    PartitionError
        If ``quantity_sigma`` is negative or not finite, or ``min_samples < 0``.
    """

    name: ClassVar[str] = "quantity"
    settings: ClassVar[tuple[str, ...]] = (QUANTITY_SIGMA, MIN_SAMPLES)

    def __init__(self, *, quantity_sigma: float, min_samples: int = 0) -> None:
        self.quantity_sigma = self.checked(QUANTITY_SIGMA, quantity_sigma)
        self.min_samples = self.checked(MIN_SAMPLES, min_samples)

    def partition(
        self,
        labels: np.ndarray,
        n_clients: int,
        rng: np.random.Generator,
        *,
        groups: np.ndarray | None = None,
    ) -> list[np.ndarray]:
        """Draw client sizes, then deal a random permutation in that order.

        See :meth:`Partitioner.partition`; ``groups`` is ignored. The
        generator is used for ``n_clients`` standard normals, then one
        permutation of the pool.

        Raises
        ------
        PartitionError
            Naming ``partition.min_samples`` if
            ``min_samples * n_clients > len(labels)``.
        """
        labels = self.checked_labels(labels, n_clients)
        n = labels.shape[0]
        log_w = self.quantity_sigma * rng.standard_normal(n_clients)
        weights = np.exp(log_w - log_w.max())
        sizes = client_sizes(weights, n, self.min_samples)
        order = rng.permutation(n).astype(np.int64)
        return [np.sort(part) for part in np.split(order, np.cumsum(sizes)[:-1])]


def _quota(weights: np.ndarray, total: int) -> np.ndarray:
    return weights / weights.sum() * total


def client_sizes(weights: np.ndarray, total: int, minimum: int) -> np.ndarray:
    """Integer sizes proportional to ``weights``, summing to ``total``, ``>= minimum``.

    Parameters
    ----------
    weights : np.ndarray
        Positive 1-D weights, one per client.
    total : int
        Number of samples to share out.
    minimum : int
        Floor for every size; ``minimum * len(weights) <= total`` is required.

    Returns
    -------
    np.ndarray
        ``int64`` sizes. Clients whose proportional share is below ``minimum``
        get exactly ``minimum``; the others share the rest in proportion to
        their weights, rounded by largest remainder (ties to the lower index).
    """
    k = len(weights)
    fixed = np.zeros(k, dtype=bool)
    while True:
        free = np.flatnonzero(~fixed)
        remaining = total - minimum * (k - len(free))
        quota = _quota(weights[free], remaining)
        low = quota < minimum
        if not low.any():
            break
        # the largest weight is never low (quotas average >= minimum), so
        # ``free`` never empties
        fixed[free[low]] = True
    sizes = np.full(k, minimum, dtype=np.int64)
    base = np.floor(quota).astype(np.int64)
    extra = remaining - int(base.sum())
    order = np.argsort(-(quota - base), kind="stable")
    base[order[:extra]] += 1
    sizes[free] = base
    return sizes

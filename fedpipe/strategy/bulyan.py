"""Bulyan (El Mhamdi et al., 2018): Krum's picks, then a trimmed mean around the
coordinate-wise median."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.strategy.aggregate import (
    AggregationError,
    Weights,
    cast_like,
    check_same_layout,
    pairwise_squared_distances,
)
from fedpipe.strategy.base import ClientUpdate, State
from fedpipe.strategy.krum import ByzantineTolerant


def bulyan_selection(updates: Sequence[Weights], f: int) -> list[int]:
    """Indices (sorted) of the ``θ = n - 2f`` updates recursive Krum picks.

    Each step scores the remaining ``m`` updates by the summed squared distance
    to their ``max(1, m - f - 2)`` closest remaining neighbours (Flower's
    ``aggregate_bulyan``), takes the lowest (ties to the lowest index) and removes
    it from the pool.
    """
    n = len(updates)
    theta = n - 2 * f
    dist = pairwise_squared_distances(updates)
    remaining, chosen = list(range(n)), []
    while len(chosen) < theta:
        closest = max(1, len(remaining) - f - 2)
        scores = [
            float(np.sort(dist[i, [j for j in remaining if j != i]])[:closest].sum())
            for i in remaining
        ]
        best = remaining[int(np.argmin(scores))]
        chosen.append(best)
        remaining.remove(best)
    return sorted(chosen)


def mean_around_median(updates: Sequence[Weights], beta: int) -> Weights:
    """Per coordinate, the mean of the ``beta`` values closest to the median
    (float64). Ties in closeness go to the earlier update; the mean is taken
    around the closest value, so identical updates come back bit for bit."""
    check_same_layout(updates)
    if not 1 <= beta <= len(updates):
        raise AggregationError(f"cannot average {beta} of {len(updates)} values")
    out = []
    for k in range(len(updates[0])):
        stacked = np.stack([np.asarray(u[k], dtype=np.float64) for u in updates])
        median = np.median(stacked, axis=0)
        order = np.argsort(np.abs(stacked - median), axis=0, kind="stable")[:beta]
        kept = np.take_along_axis(stacked, order, axis=0)
        out.append(kept[0] + (kept - kept[0]).sum(axis=0) / beta)
    return out


class Bulyan(ByzantineTolerant):
    """Recursive Krum selection, then a coordinate-wise trimmed mean.

    With :math:`n` updates and :math:`f` Byzantine ones: pick
    :math:`\\theta = n - 2f` updates by Krum, one at a time
    (:func:`bulyan_selection`); then, per coordinate, average the
    :math:`\\beta = \\theta - 2f` of their values closest to their median
    (:func:`mean_around_median`). Unweighted; needs :math:`n \\ge 4f + 3`.
    No state. Paper: El Mhamdi, Guerraoui and Rouault (ICML 2018), "The Hidden
    Vulnerability of Distributed Learning in Byzantium",
    https://arxiv.org/abs/1802.07927; Flower: ``bulyan.py`` /
    ``aggregate.aggregate_bulyan``.

    Parameters
    ----------
    num_byzantine : int, default 0
        :math:`f \\ge 0`; every round must bring at least :math:`4f + 3` updates.
        With :math:`f = 0` this is the plain unweighted mean.
    """

    name = "bulyan"
    per_byzantine = 4

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        n, f = len(updates), self.num_byzantine
        if n < 4 * f + 3:
            raise AggregationError(
                f"strategy.num_byzantine = {f}: Bulyan needs at least 4 * {f} + 3 = "
                f"{4 * f + 3} client updates per round; got {n} (lower "
                "strategy.num_byzantine or sample more clients per round)"
            )
        weights = [u.weights for u in updates]
        chosen = bulyan_selection(weights, f)
        theta = len(chosen)
        aggregated = mean_around_median([weights[i] for i in chosen], theta - 2 * f)
        return cast_like(aggregated, global_weights), {}

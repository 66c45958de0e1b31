"""FedMedian (Yin et al., 2018): the coordinate-wise median of client weights."""

from __future__ import annotations

from collections.abc import Sequence

from fedpipe.strategy.aggregate import Weights, cast_like, coordinate_median
from fedpipe.strategy.base import ClientUpdate, State, Strategy


class FedMedian(Strategy):
    """Coordinate-wise median of the client weights, unweighted.

    .. math:: w_{t+1}[k] = \\operatorname{median}_{i \\in S} \\, w_i[k]

    for every coordinate :math:`k`; with an even number of clients, the mean of
    the two middle values. Sample counts are ignored (as Flower's
    ``fedmedian.py``), which is what makes it robust to a client lying about them.
    No settings, no state. Paper: https://arxiv.org/abs/1803.01498
    """

    name = "fedmedian"
    robust_share = 0.5

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        median = coordinate_median([u.weights for u in updates])
        return cast_like(median, global_weights), {}

"""FedAvg (McMahan et al., 2017): the mean of client weights, weighted by samples."""

from __future__ import annotations

from collections.abc import Sequence

from fedpipe.strategy.aggregate import Weights, cast_like, weighted_average
from fedpipe.strategy.base import ClientUpdate, State, Strategy


class FedAvg(Strategy):
    """Average client weights weighted by their number of training samples.

    .. math:: w_{t+1} = \\sum_{i \\in S} \\frac{n_i}{\\sum_{j \\in S} n_j} w_i

    No settings, no state. Paper: https://arxiv.org/abs/1602.05629
    """

    name = "fedavg"
    linear = True

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        averaged = weighted_average(
            [u.weights for u in updates], [u.n_samples for u in updates], cast=False
        )
        return cast_like(averaged, global_weights), {}

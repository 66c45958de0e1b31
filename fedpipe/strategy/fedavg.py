"""FedAvg (McMahan et al., 2017): the mean of client weights, weighted by samples."""

from __future__ import annotations

from collections.abc import Sequence

from fedpipe.strategy.aggregate import Weights, weighted_average
from fedpipe.strategy.base import ClientUpdate, Strategy


class FedAvg(Strategy):
    """Average client weights weighted by their number of training samples."""

    name = "fedavg"

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate]
    ) -> Weights:
        return weighted_average(
            [u.weights for u in updates], [u.n_samples for u in updates]
        )

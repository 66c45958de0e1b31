"""The strategy contract: how the server turns client updates into new weights."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from fedpipe.strategy.aggregate import AggregationError, Weights, first_non_finite


@dataclass(frozen=True)
class ClientUpdate:
    """What one client sends back after local training.

    Attributes
    ----------
    client : int
        Client id (0-based).
    weights : list of ndarray
        The client's full weight list after local training.
    n_samples : int
        Number of local training samples (FedAvg's weight).
    """

    client: int
    weights: Weights
    n_samples: int


class Strategy(abc.ABC):
    """A server strategy.

    Subclasses implement :meth:`aggregate`. Implementations must be deterministic
    for a fixed seed and must not depend on the order updates arrive in: the
    caller passes updates sorted by client id, and :meth:`aggregate_round` refuses
    non-finite updates before aggregation, naming the client that sent them.
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate]
    ) -> Weights:
        """Return the new global weights from the current ones and client updates."""

    def aggregate_round(
        self, global_weights: Weights, updates: Sequence[ClientUpdate]
    ) -> Weights:
        """Check updates, order them by client id, and aggregate."""
        if not updates:
            raise AggregationError("no client updates to aggregate")
        for update in updates:
            layer = first_non_finite(update.weights)
            if layer is not None:
                raise AggregationError(
                    f"client {update.client} sent non-finite values in layer {layer}; "
                    "refusing to aggregate (lower train.lr or check its data)"
                )
        ordered = sorted(updates, key=lambda u: u.client)
        return self.aggregate(global_weights, ordered)

"""Server strategies, one per file, behind :class:`~fedpipe.strategy.base.Strategy`."""

from __future__ import annotations

from fedpipe.strategy.aggregate import AggregationError, weighted_average
from fedpipe.strategy.base import ClientUpdate, Strategy
from fedpipe.strategy.fedavg import FedAvg

STRATEGIES: dict[str, type[Strategy]] = {FedAvg.name: FedAvg}


def make_strategy(name: str) -> Strategy:
    """The strategy registered under ``strategy.name``."""
    try:
        return STRATEGIES[name]()
    except KeyError:
        allowed = ", ".join(sorted(STRATEGIES))
        raise ValueError(
            f"strategy.name: unknown {name!r}; allowed: {allowed}"
        ) from None


__all__ = [
    "STRATEGIES",
    "AggregationError",
    "ClientUpdate",
    "FedAvg",
    "Strategy",
    "make_strategy",
    "weighted_average",
]

"""Server strategies, one per file, behind :class:`~fedpipe.strategy.base.Strategy`.

Pure NumPy: the math is in :mod:`fedpipe.strategy.aggregate`, the contract in
:mod:`fedpipe.strategy.base`, and :func:`make_strategy` builds the one named by
``strategy.name`` from the ``strategy.*`` settings.
"""

from __future__ import annotations

from typing import Any

from fedpipe.strategy.aggregate import AggregationError, Weights, weighted_average
from fedpipe.strategy.base import ClientUpdate, State, Strategy
from fedpipe.strategy.bulyan import Bulyan
from fedpipe.strategy.clipping import Clipping
from fedpipe.strategy.fedadagrad import FedAdagrad
from fedpipe.strategy.fedadam import FedAdam
from fedpipe.strategy.fedavg import FedAvg
from fedpipe.strategy.fedavgm import FedAvgM
from fedpipe.strategy.fedmedian import FedMedian
from fedpipe.strategy.fedopt import FedOpt
from fedpipe.strategy.fedprox import FedProx
from fedpipe.strategy.fedtrimmedavg import FedTrimmedAvg
from fedpipe.strategy.fedyogi import FedYogi
from fedpipe.strategy.krum import Krum
from fedpipe.strategy.multikrum import MultiKrum
from fedpipe.strategy.scaffold import Scaffold

STRATEGIES: dict[str, type[Strategy]] = {
    cls.name: cls
    for cls in (
        FedAvg,
        FedProx,
        FedAvgM,
        FedAdagrad,
        FedAdam,
        FedYogi,
        FedMedian,
        FedTrimmedAvg,
        Krum,
        MultiKrum,
        Scaffold,
        Bulyan,
        Clipping,
    )
}


def make_strategy(name: str, **settings: Any) -> Strategy:
    """The strategy registered under ``strategy.name``, built from its settings.

    Parameters
    ----------
    name : str
        A key of :data:`STRATEGIES`.
    **settings
        ``strategy.*`` settings; each strategy takes the keys it reads (see its
        ``settings``) and ignores the rest; ``None`` means the default.

    Raises
    ------
    ValueError
        Unknown name (``strategy.name: unknown 'x'; allowed: ...``) or a bad
        setting (naming ``strategy.<key>`` and the allowed range).
    """
    try:
        cls = STRATEGIES[name]
    except KeyError:
        allowed = ", ".join(sorted(STRATEGIES))
        raise ValueError(
            f"strategy.name: unknown {name!r}; allowed: {allowed}"
        ) from None
    return cls.from_params(**settings)


__all__ = [
    "STRATEGIES",
    "AggregationError",
    "Bulyan",
    "ClientUpdate",
    "Clipping",
    "FedAdagrad",
    "FedAdam",
    "FedAvg",
    "FedAvgM",
    "FedMedian",
    "FedOpt",
    "FedProx",
    "FedTrimmedAvg",
    "FedYogi",
    "Krum",
    "MultiKrum",
    "Scaffold",
    "State",
    "Strategy",
    "Weights",
    "make_strategy",
    "weighted_average",
]

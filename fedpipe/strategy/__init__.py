"""Server strategies, one per file, behind :class:`~fedpipe.strategy.base.Strategy`.

Pure NumPy: the math is in :mod:`fedpipe.strategy.aggregate`, the contract in
:mod:`fedpipe.strategy.base`. Built-ins are registered by name in
:data:`fedpipe.core.registry.STRATEGIES` (one line each); :func:`make_strategy`
builds the one ``strategy.name`` picks, built in or the user's, from the
``strategy.*`` settings.
"""

from __future__ import annotations

from typing import Any

from fedpipe.core import registry
from fedpipe.core.plugins import is_reference
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

STRATEGIES: dict[str, type[Strategy]] = registry.classes("strategy")
"""The built-in strategies by name (the registry's table, resolved)."""


def strategy_class(name: str) -> type[Strategy]:
    """The class ``strategy.name`` stands for: a built-in, or the user's
    (``path/to/file.py:ClassName``, a subclass of :class:`Strategy`).

    Raises
    ------
    ParamsError
        An unknown name (``strategy.name: unknown 'x'; allowed: ...``) or a
        reference that does not resolve to a strategy.
    """
    if is_reference(name):
        return registry.resolve("strategy", name)
    return registry.get("strategy", name)


def make_strategy(name: str, **settings: Any) -> Strategy:
    """The strategy ``strategy.name`` picks, built from its settings: the one
    factory of strategies.

    Parameters
    ----------
    name : str
        A registered name or a reference to the user's class.
    **settings
        ``strategy.*`` settings; each strategy takes the keys it reads (see its
        ``settings``) and ignores the rest; ``None`` means the default.

    Raises
    ------
    ValueError
        Unknown name (``strategy.name: unknown 'x'; allowed: ...``, a
        :class:`~fedpipe.core.errors.ParamsError`) or a bad setting (naming
        ``strategy.<key>`` and the allowed range).
    """
    return strategy_class(name).from_params(**settings)


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
    "strategy_class",
    "weighted_average",
]

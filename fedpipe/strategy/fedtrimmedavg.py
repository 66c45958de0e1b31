"""FedTrimmedAvg (Yin et al., 2018): the coordinate-wise trimmed mean."""

from __future__ import annotations

from collections.abc import Sequence

from fedpipe.core.component import Setting
from fedpipe.strategy.aggregate import Weights, cast_like, trimmed_mean
from fedpipe.strategy.base import ClientUpdate, State, Strategy

BETA = Setting(
    "beta", float, default=0.2, ge=0.0, lt=0.5, help="share trimmed at each end"
)


class FedTrimmedAvg(Strategy):
    """Coordinate-wise mean after cutting the extremes, unweighted.

    For every coordinate, sort the :math:`n` client values, drop the
    :math:`\\lfloor \\beta n \\rfloor` smallest and as many largest, and average
    the rest (as Flower's ``fedtrimmedavg.py`` / ``scipy.stats.trim_mean``).
    With few clients :math:`\\lfloor \\beta n \\rfloor` may be 0 (e.g. 4 clients at
    :math:`\\beta = 0.2`): then it is the plain unweighted mean.
    No state. Paper: https://arxiv.org/abs/1803.01498

    Parameters
    ----------
    beta : float, default 0.2
        Share cut from each end, ``0 <= beta < 0.5`` (Flower: 0.2).
    """

    name = "fedtrimmedavg"
    settings = (BETA,)
    robust_share = 0.5

    def __init__(self, *, beta: float = 0.2) -> None:
        self.beta = self.checked(BETA, beta)

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        trimmed = trimmed_mean([u.weights for u in updates], self.beta)
        return cast_like(trimmed, global_weights), {}

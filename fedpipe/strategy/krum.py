"""Krum (Blanchard et al., 2017): keep the one update closest to the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from fedpipe.core.component import Setting
from fedpipe.strategy.aggregate import (
    AggregationError,
    Weights,
    cast_like,
    krum_scores,
    lowest,
)
from fedpipe.strategy.base import ClientUpdate, State, Strategy

NUM_BYZANTINE = Setting(
    "num_byzantine", int, default=0, ge=0, help="tolerated malicious clients"
)
"""``strategy.num_byzantine``: f, of Krum, Multi-Krum and Bulyan."""


class ByzantineTolerant(Strategy):
    """A robust strategy that tolerates ``strategy.num_byzantine`` (f) malicious
    updates in a round of at least ``per_byzantine * f + 3``: Krum's and
    Bulyan's settings, constructor and :meth:`min_updates`.

    Attributes
    ----------
    per_byzantine : int
        Updates a round needs per tolerated Byzantine one (beyond 3).
    """

    settings = (NUM_BYZANTINE,)
    robust_share = 0.5
    per_byzantine: ClassVar[int]

    def __init__(self, *, num_byzantine: int = 0) -> None:
        self.num_byzantine = self.checked(NUM_BYZANTINE, num_byzantine)

    @classmethod
    def min_updates(cls, values: Mapping[str, Any]) -> tuple[int, str]:
        """At least ``per_byzantine * strategy.num_byzantine + 3`` updates."""
        f, k = values.get("num_byzantine") or 0, cls.per_byzantine
        return (
            k * f + 3,
            f"{k} * strategy.num_byzantine + 3 = {k} * {f} + 3 = {k * f + 3}",
        )


class Krum(ByzantineTolerant):
    """The client update with the lowest Krum score becomes the global model.

    .. math:: s(i) = \\sum_{j \\in N_i} \\lVert w_i - w_j \\rVert^2, \\qquad
        w_{t+1} = w_{i^*}, \\quad i^* = \\arg\\min_i s(i)

    where :math:`N_i` are the :math:`n - f - 2` updates closest to :math:`w_i`
    (itself excluded). Ties go to the lowest client id. Tolerates up to
    :math:`f` Byzantine clients when :math:`n > 2f + 2`.
    No state. Paper: https://papers.nips.cc/paper/6617 (Blanchard et al., 2017);
    Flower: ``krum.py`` / ``aggregate.aggregate_krum``.

    Parameters
    ----------
    num_byzantine : int, default 0
        :math:`f \\ge 0`, Byzantine clients to tolerate; every round must then
        bring more than :math:`2f + 2` updates.
    """

    name = "krum"
    per_byzantine = 2  # more than 2f + 2 updates

    def ranked(self, updates: Sequence[ClientUpdate]) -> list[int]:
        """Indices into ``updates`` from lowest (best) to highest Krum score."""
        n, f = len(updates), self.num_byzantine
        if n <= 2 * f + 2:
            raise AggregationError(
                f"strategy.num_byzantine = {f} needs more than 2 * {f} + 2 = "
                f"{2 * f + 2} client updates per round; got {n} (lower "
                "strategy.num_byzantine or sample more clients per round)"
            )
        scores = krum_scores([u.weights for u in updates], f)
        return lowest(scores, n)

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        best = self.ranked(updates)[0]
        return cast_like(updates[best].weights, global_weights), {}

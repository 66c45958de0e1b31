"""Multi-Krum (Blanchard et al., 2017): average the updates Krum trusts most."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fedpipe.core.component import Setting
from fedpipe.strategy.aggregate import (
    AggregationError,
    Weights,
    cast_like,
    weighted_average,
)
from fedpipe.strategy.base import ClientUpdate, State
from fedpipe.strategy.krum import NUM_BYZANTINE, Krum

NUM_SELECTED = Setting(
    "num_selected", int, default=None, ge=1, help="updates averaged (null: n - f)"
)


class MultiKrum(Krum):
    """Sample-weighted mean of the ``num_selected`` lowest-scoring updates.

    Scores as :class:`~fedpipe.strategy.krum.Krum`; the :math:`m` updates with the
    lowest scores (ties to the lowest client id) are averaged weighted by
    ``n_samples``, in client-id order, as Flower's ``multikrum.py``. With
    :math:`m = 1` this is Krum. No state.

    Parameters
    ----------
    num_byzantine : int, default 0
        :math:`f \\ge 0`; every round must bring more than :math:`2f + 2` updates.
    num_selected : int or None, default None
        :math:`m \\ge 1` updates to average; None means :math:`n - f` for the
        round's :math:`n` updates (Blanchard et al.'s choice; Flower's default
        is 1). Must not exceed :math:`n`.
    """

    name = "multikrum"
    settings = (NUM_BYZANTINE, NUM_SELECTED)

    def __init__(
        self, *, num_byzantine: int = 0, num_selected: int | None = None
    ) -> None:
        super().__init__(num_byzantine=num_byzantine)
        self.num_selected = self.checked(NUM_SELECTED, num_selected)

    @classmethod
    def min_updates(cls, values: Mapping[str, Any]) -> tuple[int, str]:
        """Krum's ``2f + 3``, and at least ``strategy.num_selected``."""
        need, why = super().min_updates(values)
        m = values.get("num_selected")
        if m is not None and m > need:
            return m, f"strategy.num_selected = {m}"
        return need, why

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        n = len(updates)
        m = n - self.num_byzantine if self.num_selected is None else self.num_selected
        if m > n:
            raise AggregationError(
                f"strategy.num_selected = {m} but only {n} client updates this "
                f"round; allowed: 1 <= num_selected <= {n}"
            )
        chosen = sorted(self.ranked(updates)[:m])
        averaged = weighted_average(
            [updates[i].weights for i in chosen],
            [updates[i].n_samples for i in chosen],
            cast=False,
        )
        return cast_like(averaged, global_weights), {}

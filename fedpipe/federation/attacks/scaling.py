"""Scaling / model replacement: the client boosts its update."""

from __future__ import annotations

import numpy as np

from fedpipe.federation.attacks.base import SCALE, Attack, Weights


class Scaling(Attack):
    """Send ``γ Δ_i``: the update boosted so it survives averaging.

    Model replacement (Bagdasaryan et al., 2020, "How To Backdoor Federated
    Learning", https://arxiv.org/abs/1807.00459): with ``γ = n`` (the updates
    averaged this round) FedAvg's new global model is, to first order, the
    attacker's own. FedML's "model replacement" attack.

    Parameters
    ----------
    scale : float or None, default None
        ``γ > 0`` (``attack.scale``); None means ``n``, the updates received
        this round.
    """

    name = "scaling"
    settings = (SCALE.but(help="boost (null: n, the updates of the round)"),)

    def __init__(self, *, scale: float | None = None) -> None:
        self.scale = self.checked(SCALE, scale)

    def forge_one(
        self, delta: Weights, rng: np.random.Generator, *, n_updates: int
    ) -> Weights:
        gamma = float(n_updates) if self.scale is None else self.scale
        return [gamma * d for d in delta]

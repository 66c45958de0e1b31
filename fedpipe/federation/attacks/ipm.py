"""Inner product manipulation: the negated, shrunk mean of the benign updates."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.core.component import Setting
from fedpipe.federation.attacks.base import Attack, Weights, check_positive

EPSILON = Setting(
    "epsilon", float, default=0.5, gt=0.0, help="sends -epsilon x the benign mean"
)


class Ipm(Attack):
    """Every malicious client sends ``-ε μ`` (omniscient).

    ``μ`` is the mean of the round's benign updates: the aggregate's inner
    product with the true direction turns negative while each forged update
    stays small. Xie, Koyejo and Gupta (UAI 2019), "Fall of Empires: Breaking
    Byzantine-tolerant SGD by Inner Product Manipulation",
    https://arxiv.org/abs/1903.03936 (they use ε = 0.1 against Krum-like rules
    and large ε against the mean).

    Parameters
    ----------
    epsilon : float, default 0.5
        ``ε > 0`` (``attack.epsilon``).
    """

    name = "ipm"
    settings = (EPSILON,)
    omniscient = True

    def __init__(self, *, epsilon: float = 0.5) -> None:
        self.epsilon = check_positive(EPSILON, epsilon)

    def forge(
        self,
        own: Sequence[Weights],
        benign: Sequence[Weights],
        *,
        n_updates: int,
        rngs: Sequence[np.random.Generator],
    ) -> list[Weights]:
        forged = [
            -self.epsilon * np.stack([b[layer] for b in benign]).mean(axis=0)
            for layer in range(len(benign[0]))
        ]
        return [[f.copy() for f in forged] for _ in own]

"""Sign flipping: the client sends its update reversed."""

from __future__ import annotations

import numpy as np

from fedpipe.federation.attacks.base import SCALE, Attack, Weights

FLIP_SCALE = SCALE.but(default=1.0, help="sends -scale x the update")


class SignFlip(Attack):
    """Send ``-s Δ_i`` instead of the honest update ``Δ_i``.

    The Byzantine "sign flip" of FedML and of Damaskinos et al. / Li et al.
    (RSA, https://arxiv.org/abs/1811.03761): a gradient-ascent direction.

    Parameters
    ----------
    scale : float, default 1.0
        ``s > 0`` (``attack.scale``).
    """

    name = "sign_flip"
    settings = (FLIP_SCALE,)

    def __init__(self, *, scale: float = 1.0) -> None:
        self.scale = self.checked(FLIP_SCALE, scale)

    def forge_one(
        self, delta: Weights, rng: np.random.Generator, *, n_updates: int
    ) -> Weights:
        return [-self.scale * d for d in delta]

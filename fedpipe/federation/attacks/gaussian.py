"""Gaussian noise: the client sends random noise as its update."""

from __future__ import annotations

import numpy as np

from fedpipe.core.component import Setting
from fedpipe.federation.attacks.base import Attack, Weights

NOISE_STD = Setting(
    "noise_std", float, default=1.0, gt=0.0, help="std of the noise update"
)


class Gaussian(Attack):
    """Send ``Δ_i ~ N(0, σ² I)``, independent of any training.

    A random Byzantine update in the manner of the Gaussian attack of
    Blanchard et al. (NeurIPS 2017, "Machine Learning with Adversaries:
    Byzantine Tolerant Gradient Descent"): zero-mean, with no training behind
    it. The scale is ``attack.noise_std`` here; other libraries' attacks of the
    same name (FedML, Flower's baselines) differ in mean, scale or what they
    replace, and this one is not claimed to equal any of them. Noise is drawn
    per client and round from ``rng_for(seed, "attack", round, client)``,
    layer by layer.

    Parameters
    ----------
    noise_std : float, default 1.0
        ``σ > 0`` (``attack.noise_std``), per coordinate.
    """

    name = "gaussian"
    settings = (NOISE_STD,)

    def __init__(self, *, noise_std: float = 1.0) -> None:
        self.noise_std = self.checked(NOISE_STD, noise_std)

    def forge_one(
        self, delta: Weights, rng: np.random.Generator, *, n_updates: int
    ) -> Weights:
        return [rng.normal(0.0, self.noise_std, size=np.shape(d)) for d in delta]

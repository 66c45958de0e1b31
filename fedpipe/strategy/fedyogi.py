"""FedYogi (Reddi et al., 2021): Yogi as the server optimizer."""

from __future__ import annotations

import numpy as np

from fedpipe.strategy.base import SERVER_LR
from fedpipe.strategy.fedopt import BETA_1, BETA_2, TAU, FedOpt


class FedYogi(FedOpt):
    """FedOpt with the Yogi second moment.

    .. math:: v_t = v_{t-1} - (1 - \\beta_2) \\Delta_t^2
        \\operatorname{sign}(v_{t-1} - \\Delta_t^2)

    (the rest as :class:`~fedpipe.strategy.fedopt.FedOpt`); :math:`v` grows at
    most additively, unlike Adam's multiplicative forgetting. As Flower's
    ``fedyogi.py``. Paper: https://arxiv.org/abs/2003.00295

    Parameters
    ----------
    server_lr : float, default 0.01
        Server learning rate :math:`\\eta > 0` (Flower: ``eta = 1e-2``).
    beta_1 : float, default 0.9
        First-moment decay, ``0 <= beta_1 < 1`` (Flower: 0.9).
    beta_2 : float, default 0.99
        Second-moment decay, ``0 <= beta_2 < 1`` (Flower: 0.99).
    tau : float, default 1e-3
        Adaptivity :math:`\\tau > 0` (Flower and Reddi et al.: 1e-3).
    """

    name = "fedyogi"
    settings = (
        SERVER_LR.but(default=0.01),
        BETA_1.but(default=0.9),
        BETA_2.but(default=0.99),
        TAU.but(default=1e-3),
    )

    def __init__(
        self,
        *,
        server_lr: float = 0.01,
        beta_1: float = 0.9,
        beta_2: float = 0.99,
        tau: float = 1e-3,
    ) -> None:
        super().__init__(server_lr=server_lr, beta_1=beta_1, tau=tau)
        self.beta_2 = self.checked(BETA_2, beta_2)

    def second_moment(self, v: np.ndarray, delta_sq: np.ndarray) -> np.ndarray:
        return v - (1.0 - self.beta_2) * delta_sq * np.sign(v - delta_sq)

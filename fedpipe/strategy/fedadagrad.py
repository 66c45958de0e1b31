"""FedAdagrad (Reddi et al., 2021): Adagrad as the server optimizer."""

from __future__ import annotations

import numpy as np

from fedpipe.strategy.base import SERVER_LR
from fedpipe.strategy.fedopt import BETA_1, TAU, FedOpt


class FedAdagrad(FedOpt):
    """FedOpt with the Adagrad second moment.

    .. math:: v_t = v_{t-1} + \\Delta_t^2

    (the rest as :class:`~fedpipe.strategy.fedopt.FedOpt`). As Flower's
    ``server/strategy/fedadagrad.py``, where :math:`\\beta_1` is fixed to 0 so that
    :math:`m_t = \\Delta_t`; here ``beta_1`` may be set, default 0.0.
    Paper: https://arxiv.org/abs/2003.00295

    Parameters
    ----------
    server_lr : float, default 0.1
        Server learning rate :math:`\\eta > 0` (Flower: ``eta = 1e-1``).
    beta_1 : float, default 0.0
        First-moment decay, ``0 <= beta_1 < 1`` (Flower: fixed 0.0).
    tau : float, default 1e-9
        Adaptivity :math:`\\tau > 0` (Flower ``flwr.server.strategy``: 1e-9; the
        2025 ``flwr.serverapp.strategy`` uses 1e-3).
    """

    name = "fedadagrad"
    settings = (
        SERVER_LR.but(default=0.1),
        BETA_1.but(default=0.0),
        TAU.but(default=1e-9),
    )

    def __init__(
        self, *, server_lr: float = 0.1, beta_1: float = 0.0, tau: float = 1e-9
    ) -> None:
        super().__init__(server_lr=server_lr, beta_1=beta_1, tau=tau)

    def second_moment(self, v: np.ndarray, delta_sq: np.ndarray) -> np.ndarray:
        return v + delta_sq

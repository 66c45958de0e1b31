"""FedAvgM (Hsu et al., 2019): FedAvg with server momentum."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.core.component import Setting
from fedpipe.strategy.aggregate import (
    Weights,
    cast_like,
    pseudo_gradient,
    weighted_average,
)
from fedpipe.strategy.base import (
    SERVER_LR,
    ClientUpdate,
    State,
    Strategy,
    pack_state,
    state_arrays,
)

SERVER_MOMENTUM = Setting(
    "server_momentum", float, default=0.9, ge=0.0, lt=1.0, help="momentum"
)


class FedAvgM(Strategy):
    """Heavy-ball momentum on the pseudo-gradient of FedAvg.

    .. math::

        \\Delta_t &= w_t - \\bar w_t, \\qquad
            \\bar w_t = \\textstyle\\sum_i \\frac{n_i}{\\sum_j n_j} w_i \\\\
        v_t &= \\beta v_{t-1} + \\Delta_t, \\qquad v_0 = 0 \\\\
        w_{t+1} &= w_t - \\eta_s v_t

    With ``server_momentum = 0`` and ``server_lr = 1`` this is FedAvg. As Flower's
    ``fedavgm.py``, except that the default momentum here is 0.9 (Hsu et al.'s
    usual value; Flower's default is 0.0) and the first round needs no special
    case because :math:`v_0 = 0`.
    Paper: https://arxiv.org/abs/1909.06335

    Parameters
    ----------
    server_lr : float, default 1.0
        Server learning rate :math:`\\eta_s > 0`.
    server_momentum : float, default 0.9
        Momentum :math:`\\beta`, ``0 <= beta < 1``.

    Notes
    -----
    Server state: ``momentum/<layer>`` holds :math:`v_t` per layer (float64).
    """

    name = "fedavgm"
    settings = (SERVER_LR.but(default=1.0), SERVER_MOMENTUM)
    state_names = ("momentum",)
    linear = True
    weight_sum_setting = "server_lr"

    def __init__(self, *, server_lr: float = 1.0, server_momentum: float = 0.9) -> None:
        self.server_lr = self.checked(SERVER_LR, server_lr)
        self.server_momentum = self.checked(SERVER_MOMENTUM, server_momentum)

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        averaged = weighted_average(
            [u.weights for u in updates], [u.n_samples for u in updates], cast=False
        )
        grad = pseudo_gradient(global_weights, averaged)
        previous = state_arrays(state, "momentum", len(global_weights))
        momentum = [
            self.server_momentum * v + g for v, g in zip(previous, grad, strict=True)
        ]
        new = [
            w.astype(np.float64) - self.server_lr * v
            for w, v in zip(global_weights, momentum, strict=True)
        ]
        return cast_like(new, global_weights), pack_state(momentum=momentum)

"""FedOpt (Reddi et al., 2021): adaptive server optimizers on FedAvg's update.

The shared part of :mod:`~fedpipe.strategy.fedadagrad`,
:mod:`~fedpipe.strategy.fedadam` and :mod:`~fedpipe.strategy.fedyogi`, as in
Flower's ``strategy/fedopt.py``. Paper: https://arxiv.org/abs/2003.00295
(Algorithm 2).
"""

from __future__ import annotations

import abc
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

BETA_1 = Setting("beta_1", float, ge=0.0, lt=1.0, help="first-moment decay")
BETA_2 = Setting("beta_2", float, ge=0.0, lt=1.0, help="second-moment decay")
TAU = Setting("tau", float, gt=0.0, help="adaptivity")
"""The server optimizers' shared settings; each sets its own defaults."""


class FedOpt(Strategy):
    """Adaptive Federated Optimization, Algorithm 2 of Reddi et al. (2021).

    Each round, with :math:`\\bar w_t` the sample-weighted mean of client weights:

    .. math::

        \\Delta_t &= \\bar w_t - w_t \\\\
        m_t &= \\beta_1 m_{t-1} + (1 - \\beta_1) \\Delta_t \\\\
        v_t &= \\text{second\\_moment}(v_{t-1}, \\Delta_t^2)
            \\quad\\text{(per subclass)} \\\\
        w_{t+1} &= w_t + \\eta \\, \\frac{m_t}{\\sqrt{v_t} + \\tau}

    element-wise, in float64, with :math:`m_0 = v_0 = 0` as Flower initialises
    them (the paper allows any :math:`v_{-1} \\ge \\tau^2`). No bias correction,
    as in the paper's Algorithm 2 (Flower's FedAdam adds one; see
    :class:`~fedpipe.strategy.fedadam.FedAdam`).

    Notes
    -----
    Server state: ``m/<layer>`` (:math:`m_t`) and ``v/<layer>`` (:math:`v_t`),
    float64.
    """

    state_names = ("m", "v")
    linear = True

    def __init__(self, *, server_lr: float, beta_1: float, tau: float) -> None:
        self.server_lr = self.checked(SERVER_LR, server_lr)
        self.beta_1 = self.checked(BETA_1, beta_1)
        self.tau = self.checked(TAU, tau)

    @abc.abstractmethod
    def second_moment(self, v: np.ndarray, delta_sq: np.ndarray) -> np.ndarray:
        """:math:`v_t` from :math:`v_{t-1}` and :math:`\\Delta_t^2` (float64)."""

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        averaged = weighted_average(
            [u.weights for u in updates], [u.n_samples for u in updates], cast=False
        )
        deltas = [-g for g in pseudo_gradient(global_weights, averaged)]
        n = len(global_weights)
        ms, vs, new = [], [], []
        for w, delta, m_prev, v_prev in zip(
            global_weights,
            deltas,
            state_arrays(state, "m", n),
            state_arrays(state, "v", n),
            strict=True,
        ):
            m = self.beta_1 * m_prev + (1.0 - self.beta_1) * delta
            v = self.second_moment(v_prev, delta * delta)
            ms.append(m)
            vs.append(v)
            new.append(
                w.astype(np.float64) + self.server_lr * m / (np.sqrt(v) + self.tau)
            )
        return cast_like(new, global_weights), pack_state(m=ms, v=vs)

"""SCAFFOLD (Karimireddy et al., 2020): the server side, with control variates."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.core.component import Setting
from fedpipe.core.errors import SettingError
from fedpipe.strategy.aggregate import (
    AggregationError,
    Weights,
    cast_like,
    differences,
    mean,
)
from fedpipe.strategy.base import (
    SERVER_LR,
    ClientUpdate,
    State,
    Strategy,
    pack_state,
    state_arrays,
)

CONTROL_DELTA = "control_delta"
"""The :attr:`ClientUpdate.extras` key holding a client's :math:`\\Delta c_i`."""
SERVER_CONTROL = "c"
"""The :meth:`Strategy.broadcast` key of the server control variate :math:`c`."""
TOTAL_CLIENTS = Setting(
    "total_clients",
    int,
    default=None,
    ge=1,
    source="federation.clients",
    help="N, the clients in the federation",
)


class Scaffold(Strategy):
    """SCAFFOLD's server update (Algorithm 1 of Karimireddy et al., 2020).

    With :math:`S` the clients of the round, :math:`N` all clients, :math:`y_i`
    the weights client :math:`i` sends back and :math:`\\Delta c_i` its control
    delta (``extras["control_delta"]``):

    .. math::

        w_{t+1} &= w_t + \\eta_g \\, \\frac{1}{|S|} \\sum_{i \\in S} (y_i - w_t) \\\\
        c_{t+1} &= c_t + \\frac{|S|}{N} \\, \\frac{1}{|S|} \\sum_{i \\in S} \\Delta c_i

    Unweighted means, as in the paper; :math:`c_0 = 0`.

    What clients do (option II of the paper;
    :class:`fedpipe.client.scaffold.ScaffoldClient`, which this strategy names as
    its :attr:`client_algorithm`; updates without ``control_delta`` are refused):
    each client keeps its own control variate :math:`c_i`
    (zeros at first) across rounds, and in a round

    1. receives :math:`x = w_t` and :math:`c =` :meth:`server_control` (state);
    2. starts from :math:`y = x` and takes :math:`K` local steps
       :math:`y \\leftarrow y - \\eta_l (g_i(y) - c_i + c)`;
    3. sets :math:`c_i^+ = c_i - c + (x - y) / (K \\eta_l)`;
    4. sends :math:`y` as ``weights`` and
       :math:`\\Delta c_i = c_i^+ - c_i` as ``extras["control_delta"]``,
       then keeps :math:`c_i \\leftarrow c_i^+`.

    Paper: https://arxiv.org/abs/1910.06378

    Parameters
    ----------
    server_lr : float, default 1.0
        Global step size :math:`\\eta_g > 0`.
    total_clients : int
        :math:`N \\ge 1`, the number of clients in the federation (required).
        Client ids must be in ``0 .. N-1``.

    Notes
    -----
    Server state: ``c/<layer>`` holds :math:`c_t` per layer (float64).
    """

    name = "scaffold"
    settings = (SERVER_LR.but(default=1.0), TOTAL_CLIENTS)
    state_names = ("c",)
    required_extras = (CONTROL_DELTA,)
    client_algorithm = "scaffold"
    no_privacy = "its control variates leave each client unclipped and unnoised"
    weight_sum_setting = "server_lr"

    def __init__(
        self, *, server_lr: float = 1.0, total_clients: int | None = None
    ) -> None:
        self.server_lr = self.checked(SERVER_LR, server_lr)
        if total_clients is None:
            raise SettingError(
                "strategy.total_clients: required for scaffold (N, the number of "
                "clients in the federation); allowed: an integer total_clients >= 1"
            )
        self.total_clients = self.checked(TOTAL_CLIENTS, total_clients)

    def server_control(self, state: State) -> Weights:
        """The server control variate :math:`c_t` that clients need (float64)."""
        n_layers = sum(1 for k in state if k.startswith("c/"))
        return [
            np.array(c, dtype=np.float64) for c in state_arrays(state, "c", n_layers)
        ]

    def broadcast(self, state: State) -> dict[str, Weights]:
        """:math:`c_t` for the clients, as ``{"c": [...]}``."""
        return {SERVER_CONTROL: self.server_control(state)}

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        n = self.total_clients
        for u in updates:
            if not 0 <= u.client < n:
                raise AggregationError(
                    f"client {u.client} is outside strategy.total_clients = {n} "
                    f"(ids 0 .. {n - 1})"
                )
        step = mean(differences([u.weights for u in updates], global_weights))
        new = [
            w.astype(np.float64) + self.server_lr * s
            for w, s in zip(global_weights, step, strict=True)
        ]
        share = len(updates) / n
        control_step = mean([u.extras[CONTROL_DELTA] for u in updates])
        control = [
            c + share * d
            for c, d in zip(
                state_arrays(state, "c", len(global_weights)), control_step, strict=True
            )
        ]
        return cast_like(new, global_weights), pack_state(c=control)

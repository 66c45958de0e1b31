"""SCAFFOLD (Karimireddy et al., 2020): the server side, with control variates."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedpipe.strategy.aggregate import (
    AggregationError,
    Weights,
    cast_like,
    differences,
    mean,
)
from fedpipe.strategy.base import (
    ClientUpdate,
    State,
    Strategy,
    check_float,
    check_int,
    pack_state,
    state_arrays,
)

CONTROL_DELTA = "control_delta"
"""The :attr:`ClientUpdate.extras` key holding a client's :math:`\\Delta c_i`."""


class Scaffold(Strategy):
    """SCAFFOLD's server update (Algorithm 1 of Karimireddy et al., 2020).

    With :math:`S` the clients of the round, :math:`N` all clients, :math:`y_i`
    the weights client :math:`i` sends back and :math:`\\Delta c_i` its control
    delta (``extras["control_delta"]``):

    .. math::

        w_{t+1} &= w_t + \\eta_g \\, \\frac{1}{|S|} \\sum_{i \\in S} (y_i - w_t) \\\\
        c_{t+1} &= c_t + \\frac{|S|}{N} \\, \\frac{1}{|S|} \\sum_{i \\in S} \\Delta c_i

    Unweighted means, as in the paper; :math:`c_0 = 0`.

    What clients must do (option II of the paper; not implemented in
    ``fedpipe.training`` yet, so this strategy refuses updates without
    ``control_delta``): each client keeps its own control variate :math:`c_i`
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
    settings = ("server_lr", "total_clients")
    state_names = ("c",)
    required_extras = (CONTROL_DELTA,)

    def __init__(
        self, *, server_lr: float = 1.0, total_clients: int | None = None
    ) -> None:
        self.server_lr = check_float("server_lr", server_lr, gt=0.0)
        if total_clients is None:
            raise ValueError(
                "strategy.total_clients: required for scaffold (N, the number of "
                "clients in the federation); allowed: an integer total_clients >= 1"
            )
        self.total_clients = check_int("total_clients", total_clients, ge=1)

    def server_control(self, state: State) -> Weights:
        """The server control variate :math:`c_t` that clients need (float64)."""
        n_layers = sum(1 for k in state if k.startswith("c/"))
        return [
            np.array(c, dtype=np.float64) for c in state_arrays(state, "c", n_layers)
        ]

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


def client_control_update(
    *,
    x: Weights,
    y: Weights,
    c: Weights,
    c_i: Weights,
    steps: int,
    lr: float,
    trainable: Sequence[int],
) -> tuple[Weights, Weights]:
    """A client's new control variate and its delta (option II of the paper).

    ``c_i+ = c_i - c + (x - y) / (K * lr)`` on the trainable layers; the other
    layers (batch-norm statistics) carry no control variate and stay zero.

    Parameters
    ----------
    x, y : Weights
        The global weights the client started from and its trained weights.
    c, c_i : Weights
        The server's and the client's control variates (all layers).
    steps : int
        K, the local SGD steps taken (>= 1).
    lr : float
        The local learning rate.
    trainable : sequence of int
        Indices of the trainable layers in the weight lists.

    Returns
    -------
    (c_i_new, delta)
        The client's new control variate and ``c_i_new - c_i``, both float32.
    """
    if steps < 1:
        raise AggregationError("SCAFFOLD needs at least one local step per client")
    keep = set(trainable)
    new: Weights = []
    for j, (xj, yj, cj, cij) in enumerate(zip(x, y, c, c_i, strict=True)):
        if j in keep:
            value = (
                cij.astype(np.float64)
                - cj.astype(np.float64)
                + (xj.astype(np.float64) - yj.astype(np.float64)) / (steps * lr)
            )
        else:
            value = np.zeros(xj.shape, np.float64)
        new.append(value.astype(np.float32))
    delta = [
        (n - o.astype(np.float32)).astype(np.float32)
        for n, o in zip(new, c_i, strict=True)
    ]
    return new, delta

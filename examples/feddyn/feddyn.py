"""FedDyn (Acar et al., ICLR 2021, "Federated Learning Based on Dynamic
Regularization") as a user's plugin: a server strategy and a client algorithm in
one file, outside the fedpipe package.

Use it from a project's ``params.yaml``::

    strategy:
      name: examples/feddyn/feddyn.py:FedDyn
      options: {alpha: 0.01}

The strategy names its client (:attr:`FedDyn.client_algorithm`) and passes it
``alpha``; set ``client.algorithm`` only if this file lives somewhere else.

Notation of the paper's Algorithm 1: :math:`\\theta^{t-1}` the global model a
round starts from, :math:`P_t` the clients of round t, :math:`m` all clients,
:math:`g_k = \\nabla L_k(\\theta_k)` the gradient state client k keeps (zeros
before its first round), :math:`h` the server state (zeros at first).

Client k in round t
    minimizes :math:`L_k(\\theta) - \\langle g_k, \\theta\\rangle +
    \\frac{\\alpha}{2}\\|\\theta - \\theta^{t-1}\\|^2` from :math:`\\theta^{t-1}`
    (``trainer.fit`` with ``gradient_offset = -g_k``, ``proximal_mu = alpha``,
    ``anchor = theta^{t-1}``), then sets
    :math:`g_k \\leftarrow g_k - \\alpha(\\theta_k^t - \\theta^{t-1})`.
Server
    :math:`h \\leftarrow h - \\frac{\\alpha}{m}\\sum_{k \\in P_t}
    (\\theta_k^t - \\theta^{t-1})`, then
    :math:`\\theta^t = \\frac{1}{|P_t|}\\sum_{k \\in P_t}\\theta_k^t -
    \\frac{1}{\\alpha} h`.

Layers that do not train (batch-norm moving statistics) carry no gradient state:
clients keep zeros there and the server averages them plainly. The server cannot
tell which positions train, so each client sends its change of state,
:math:`\\Delta g_k = -\\alpha(\\theta_k^t - \\theta^{t-1})` on its trainable
positions and 0 elsewhere, as ``extras["feddyn_grad_delta"]``; the server's
update is then :math:`h \\leftarrow h + \\frac{1}{m}\\sum_{k \\in P_t}\\Delta
g_k`, which is the paper's on every trainable position. So at any time ``h`` is
the mean of all m clients' gradient states.

Paper: https://openreview.net/forum?id=B7v4QMR6Z9w (arXiv 2111.04263)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpipe.client.base import (
    ClientAlgorithm,
    ClientReply,
    ClientTask,
    LocalTrainer,
    Weights,
    pack,
    unpack,
)
from fedpipe.strategy.aggregate import AggregationError, cast_like, mean
from fedpipe.strategy.base import ClientUpdate, State, Strategy, pack_state

GRAD_STATE = "grad"
"""Client state name prefix of :math:`g_k`: ``feddyn/grad/003`` in its file."""
GRAD_DELTA = "feddyn_grad_delta"
"""The :attr:`ClientUpdate.extras` key of a client's :math:`\\Delta g_k`."""


def _alpha(value: Any, where: str) -> float:
    """``alpha`` as a positive float, or ValueError naming where it is set."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not math.isfinite(float(value)) or float(value) <= 0:
        raise ValueError(f"{where}: {value!r}; allowed: a number alpha > 0")
    return float(value)


# ---------------------------------------------------------------- the client


class FedDynClient(ClientAlgorithm):
    """The FedDyn client: dynamically regularized local training, and the
    gradient state :math:`g_k` kept between rounds (see the module docstring).

    Parameters
    ----------
    alpha : float, default 0.01
        :math:`\\alpha > 0`, from the strategy (``strategy.options.alpha``) or
        ``client.options.alpha``.
    """

    name = "feddyn"
    settings = ("alpha",)
    proximal_setting = "alpha"  # its local step's proximal weight (the doctor)

    def __init__(self, *, alpha: float = 0.01) -> None:
        self.alpha = _alpha(alpha, "alpha (strategy.options or client.options)")

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        theta = task.global_weights
        grad = unpack(task.own(self.name), GRAD_STATE, theta)
        fit = trainer.fit(
            theta,
            seed=task.seed_for("train"),
            proximal_mu=self.alpha,
            anchor=theta,
            gradient_offset=[-g for g in grad],
        )
        delta = grad_delta(theta, fit.weights, self.alpha, trainer.trainable)
        new_grad = [
            (g.astype(np.float64) + d).astype(w.dtype)
            for g, d, w in zip(grad, delta, theta, strict=True)
        ]
        return ClientReply(
            fit.weights,
            train_loss=fit.loss,
            extras={GRAD_DELTA: delta},
            state={self.name: pack(GRAD_STATE, new_grad)},
        )


def grad_delta(
    start: Sequence[np.ndarray],
    trained: Sequence[np.ndarray],
    alpha: float,
    trainable: Sequence[int],
) -> Weights:
    """:math:`\\Delta g_k = -\\alpha(\\theta_k^t - \\theta^{t-1})` on the trainable
    positions, zeros elsewhere (float64)."""
    keep = set(trainable)
    return [
        -alpha * (np.asarray(y, np.float64) - np.asarray(x, np.float64))
        if j in keep
        else np.zeros(np.shape(x), np.float64)
        for j, (x, y) in enumerate(zip(start, trained, strict=True))
    ]


# ---------------------------------------------------------------- the server


class FedDyn(Strategy):
    """The FedDyn server: state ``h`` and the corrected average (see the module
    docstring). Unweighted means over the round's clients, as in the paper.

    Parameters
    ----------
    alpha : float, default 0.01
        :math:`\\alpha > 0` (``strategy.options.alpha``); passed to the clients.
    total_clients : int
        :math:`m`, all clients of the federation (fedpipe passes
        ``federation.clients``).

    Notes
    -----
    Server state: ``h/<position>`` per weight array (float64), zeros at first.
    """

    name = "feddyn"
    settings = ("alpha", "total_clients")
    state_names = ("h",)
    required_extras = (GRAD_DELTA,)
    client_algorithm = FedDynClient  # the class itself: the file can move

    def __init__(
        self, *, alpha: float = 0.01, total_clients: int | None = None
    ) -> None:
        self.alpha = _alpha(alpha, "strategy.options.alpha")
        integer = isinstance(total_clients, numbers.Integral)
        if isinstance(total_clients, bool) or not integer or total_clients < 1:
            raise ValueError(
                f"total_clients: {total_clients!r}; allowed: an integer >= 1, the "
                "number of clients in the federation (federation.clients)"
            )
        self.total_clients = int(total_clients)

    def client_settings(self) -> dict[str, float]:
        """``{"alpha": alpha}`` for :class:`FedDynClient`."""
        return {"alpha": self.alpha}

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        m = self.total_clients
        for u in updates:
            if not 0 <= u.client < m:
                raise AggregationError(
                    f"client {u.client} is outside the federation of "
                    f"total_clients = {m} (ids 0 .. {m - 1})"
                )
        h = [
            np.asarray(state[f"h/{j:03d}"], np.float64)
            + sum(np.asarray(u.extras[GRAD_DELTA][j], np.float64) for u in updates) / m
            for j in range(len(global_weights))
        ]
        average = mean([u.weights for u in updates])
        new = [a - hj / self.alpha for a, hj in zip(average, h, strict=True)]
        return cast_like(new, global_weights), pack_state(h=h)

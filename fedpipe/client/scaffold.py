"""SCAFFOLD's client (Karimireddy et al., 2020, option II): corrected local steps
and a control variate kept on each client."""

from __future__ import annotations

from collections.abc import Sequence

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
from fedpipe.strategy.aggregate import AggregationError
from fedpipe.strategy.scaffold import CONTROL_DELTA, SERVER_CONTROL

CLIENT_CONTROL = "c_i"
"""The state name of a client's control variate ``c_i``."""


class ScaffoldClient(ClientAlgorithm):
    """A SCAFFOLD client (Algorithm 1 of Karimireddy et al., 2020, option II).

    Keeps its control variate :math:`c_i` (zeros at first) between rounds; in a
    round it receives :math:`x = w_t` and :math:`c` (``broadcast["c"]``), takes
    :math:`K` local steps :math:`y \\leftarrow y - \\eta_l (g_i(y) - c_i + c)`,
    sets :math:`c_i^+ = c_i - c + (x - y) / (K \\eta_l)` on the trainable layers
    (other layers, e.g. batch-norm statistics, carry no control variate), sends
    :math:`y` and :math:`\\Delta c_i = c_i^+ - c_i` (``extras["control_delta"]``),
    and keeps :math:`c_i^+`. Paper: https://arxiv.org/abs/1910.06378
    """

    name = "scaffold"

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        if SERVER_CONTROL not in task.broadcast:
            raise AggregationError(
                "the SCAFFOLD client needs the server control variate "
                f"broadcast[{SERVER_CONTROL!r}]; use it with strategy.name: scaffold"
            )
        x = task.global_weights
        c = task.broadcast[SERVER_CONTROL]
        c_i = unpack(task.own(self.name), CLIENT_CONTROL, x)
        fit = trainer.fit(
            x,
            seed=task.seed_for("train"),
            gradient_offset=[
                (cj - cij).astype(np.float32) for cj, cij in zip(c, c_i, strict=True)
            ],
        )
        new, delta = client_control_update(
            x=x,
            y=fit.weights,
            c=c,
            c_i=c_i,
            steps=fit.steps,
            lr=trainer.training.lr,
            trainable=trainer.trainable,
        )
        return ClientReply(
            fit.weights,
            train_loss=fit.loss,
            extras={CONTROL_DELTA: delta},
            state={self.name: pack(CLIENT_CONTROL, new)},
            steps=fit.steps,
        )


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

"""FedProx's client (Li et al., 2020): local SGD with a proximal term."""

from __future__ import annotations

from fedpipe.client.base import ClientAlgorithm, ClientReply, ClientTask, LocalTrainer
from fedpipe.strategy.fedprox import PROXIMAL_MU


class FedProxClient(ClientAlgorithm):
    """Minimize ``L_k(w) + mu/2 ||w - w_global||^2`` locally (Li et al., 2020,
    eq. 2); ``mu = 0`` is plain local SGD.

    Parameters
    ----------
    proximal_mu : float, default 0.01
        ``strategy.proximal_mu`` (FedProx passes it on), >= 0.
    """

    name = "fedprox"
    settings = (PROXIMAL_MU,)
    proximal_setting = PROXIMAL_MU

    def __init__(self, *, proximal_mu: float = 0.01) -> None:
        # strategy.proximal_mu: FedProx passes it on
        self.proximal_mu = PROXIMAL_MU.check(proximal_mu, "strategy")

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        fit = trainer.fit(
            task.global_weights,
            seed=task.seed_for("train"),
            proximal_mu=self.proximal_mu,
        )
        return ClientReply(fit.weights, train_loss=fit.loss, steps=fit.steps)

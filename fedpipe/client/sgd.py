"""Plain local SGD (FedAvg's client, McMahan et al., 2017)."""

from __future__ import annotations

from fedpipe.client.base import ClientAlgorithm, ClientReply, ClientTask, LocalTrainer


class LocalSGD(ClientAlgorithm):
    """Train ``train.epochs`` on the local data from the global weights; send the
    result. Keeps nothing between rounds."""

    name = "sgd"

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        fit = trainer.fit(task.global_weights, seed=task.seed_for("train"))
        return ClientReply(fit.weights, train_loss=fit.loss, steps=fit.steps)

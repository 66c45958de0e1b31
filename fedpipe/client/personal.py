"""Personalization as client algorithms that wrap another one.

Each wraps the client algorithm the strategy needs (plain SGD, FedProx,
SCAFFOLD, a user's own), so every personalization method combines with every
strategy:

- :class:`FedPer` (Arivazhagan et al., 2019, "Federated Learning with
  Personalization Layers") and :class:`FedBN` (Li et al., 2021, "FedBN"): chosen
  layers (FedBN: every normalization layer) stay on each client. A client trains
  from the global shared layers plus its own personal layers and sends only the
  shared ones (its personal layers replaced by the global ones: a zero update, so
  no strategy moves them); the server keeps those positions as they were
  (:attr:`frozen`).
- :class:`FineTune`: the new global model trained further for k epochs on the
  client's training split before it is evaluated there. Nothing is kept.
- :class:`Ditto` (Li et al., 2021, "Ditto: Fair and Robust Federated Learning
  Through Personalization"): besides its usual update, each selected client trains
  a personal model ``v_k`` on ``L_k(v) + lambda/2 ||v - w_global||^2``, kept
  between rounds.

A client that has never trained uses the global model's layers until it does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from fedpipe.client.base import (
    ClientAlgorithm,
    ClientReply,
    ClientTask,
    LocalTrainer,
    Weights,
    pack,
)

LAYER = "layer"
"""State name prefix of a kept layer: ``layer/005`` (position in the weights)."""
PERSONAL = "personal"
"""State name prefix of Ditto's personal model."""


class Personalized(ClientAlgorithm):
    """A personalization method around ``inner``, the client algorithm the
    strategy needs. Settings of the wrapper are its own constructor arguments."""

    def __init__(self, inner: ClientAlgorithm) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    @property
    def personalized(self) -> bool:
        return True

    @property
    def frozen(self) -> tuple[int, ...]:
        return self.inner.frozen

    @property
    def fits_per_round(self) -> int:
        return self.inner.fits_per_round


def _positions(state: Mapping[str, np.ndarray], prefix: str) -> dict[int, np.ndarray]:
    """State entries ``prefix/JJJ`` by position J."""
    return {
        int(key.rpartition("/")[2]): np.asarray(value)
        for key, value in state.items()
        if key.startswith(f"{prefix}/")
    }


def _overlay(
    weights: Sequence[np.ndarray], arrays: Mapping[int, np.ndarray]
) -> Weights:
    """``weights`` with the arrays at the given positions replaced."""
    return [arrays.get(j, w) for j, w in enumerate(weights)]


class KeptLayers(Personalized):
    """Layers at ``positions`` stay on each client (FedPer, FedBN)."""

    def __init__(self, inner: ClientAlgorithm, *, positions: Sequence[int]) -> None:
        super().__init__(inner)
        self.positions = tuple(sorted(int(j) for j in positions))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r}, positions={self.positions})"

    @property
    def frozen(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.positions) | set(self.inner.frozen)))

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        start = self.personal_model(task, trainer)
        reply = self.inner.train(replace(task, global_weights=start), trainer)
        trained = reply.weights
        keep = set(self.positions)
        sent = [
            task.global_weights[j] if j in keep else w for j, w in enumerate(trained)
        ]
        kept = {f"{LAYER}/{j:03d}": np.asarray(trained[j]) for j in self.positions}
        return replace(
            reply,
            weights=sent,
            state={**reply.state, self.name: kept},
            local_model=trained if reply.local_model is None else reply.local_model,
        )

    def personal_model(self, task: ClientTask, trainer: LocalTrainer) -> Weights:
        return _overlay(task.global_weights, _positions(task.own(self.name), LAYER))


class FedPer(KeptLayers):
    """FedPer: the layers named in ``personalization.layers`` (or the last
    ``last_k``) stay on each client."""

    name = "fedper"


class FedBN(KeptLayers):
    """FedBN: every normalization layer (scale, offset, moving statistics) stays
    on each client."""

    name = "fedbn"


class FineTune(Personalized):
    """The new global model fine-tuned ``epochs`` on the client before it is
    evaluated there (``personalization.finetune_epochs``)."""

    name = "finetune"

    def __init__(self, inner: ClientAlgorithm, *, epochs: int = 1) -> None:
        super().__init__(inner)
        self.epochs = int(epochs)

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        return self.inner.train(task, trainer)

    def personal_model(self, task: ClientTask, trainer: LocalTrainer) -> Weights:
        fit = trainer.fit(
            task.global_weights, seed=task.seed_for("finetune"), epochs=self.epochs
        )
        return fit.weights


class Ditto(Personalized):
    """Ditto: a personal model per client, pulled to the global one with weight
    ``lam`` (``personalization.ditto_lambda``), trained after the usual update."""

    name = "ditto"

    def __init__(self, inner: ClientAlgorithm, *, lam: float = 0.1) -> None:
        super().__init__(inner)
        self.lam = float(lam)

    @property
    def fits_per_round(self) -> int:
        """The inner algorithm's fits and the personal model's."""
        return self.inner.fits_per_round + 1

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        reply = self.inner.train(task, trainer)
        fit = trainer.fit(
            self.personal_model(task, trainer),
            seed=task.seed_for("ditto"),
            proximal_mu=self.lam,
            anchor=task.global_weights,
        )
        return replace(
            reply, state={**reply.state, self.name: pack(PERSONAL, fit.weights)}
        )

    def personal_model(self, task: ClientTask, trainer: LocalTrainer) -> Weights:
        return _overlay(task.global_weights, _positions(task.own(self.name), PERSONAL))

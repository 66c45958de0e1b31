"""Personalized federated learning: ``personalization.*`` resolved for one model.

Four methods, combinable with any server strategy (``personalization.method``):
``fedper`` (layers by name, or the last k weight-bearing layers, stay on each
client), ``fedbn`` (every normalization layer stays local), ``finetune`` (the global
model trained k more epochs on the client before it is evaluated there) and
``ditto`` (a personal model per client, pulled to the global one). What each does
in a round is a client algorithm that wraps the one the strategy needs
(:mod:`fedpipe.client.personal`); this module checks the settings against the
model's layers and builds that wrapper (:meth:`Personalization.wrap`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fedpipe.client.base import ClientAlgorithm, Weights
from fedpipe.client.personal import Ditto, FedBN, FedPer, FineTune
from fedpipe.config.params import ParamsError
from fedpipe.federation.steps import RoundStep

DEFAULT_LAST_K = 1
DEFAULT_FINETUNE_EPOCHS = 1
DEFAULT_DITTO_LAMBDA = 0.1


@dataclass(frozen=True)
class Personalization:
    """A resolved personalization method for one model.

    Attributes
    ----------
    method : str
        ``none``, ``fedper``, ``fedbn``, ``finetune`` or ``ditto``.
    personal : tuple of int
        fedper, fedbn: positions in ``model.get_weights()`` that stay on clients.
    finetune_epochs : int
        finetune: local epochs before each client's evaluation.
    ditto_lambda : float
        ditto: weight of the proximal pull of the personal model to the global one.
    """

    method: str = "none"
    personal: tuple[int, ...] = ()
    finetune_epochs: int = DEFAULT_FINETUNE_EPOCHS
    ditto_lambda: float = DEFAULT_DITTO_LAMBDA

    @property
    def enabled(self) -> bool:
        """Whether clients get a personalized model at all."""
        return self.method != "none"

    def wrap(self, inner: ClientAlgorithm) -> ClientAlgorithm:
        """The client algorithm of this method around ``inner`` (``inner`` itself
        for ``none``)."""
        if self.method == "fedper":
            return FedPer(inner, positions=self.personal)
        if self.method == "fedbn":
            return FedBN(inner, positions=self.personal)
        if self.method == "finetune":
            return FineTune(inner, epochs=self.finetune_epochs)
        if self.method == "ditto":
            return Ditto(inner, lam=self.ditto_lambda)
        return inner


NO_PERSONALIZATION = Personalization()


class KeptLayers(RoundStep):
    """The layers a client algorithm keeps on the clients
    (:attr:`~fedpipe.client.base.ClientAlgorithm.frozen`: fedper's, fedbn's) as
    a step of every round: after aggregation they hold their global values from
    before the round (:meth:`~fedpipe.client.base.ClientAlgorithm.after_aggregation`;
    the new weights as they are when nothing is kept).

    Parameters
    ----------
    algorithm : ClientAlgorithm
        The round's (composed) client algorithm.
    """

    def __init__(self, algorithm: ClientAlgorithm) -> None:
        self.algorithm = algorithm

    def __repr__(self) -> str:
        return f"KeptLayers({self.algorithm!r})"

    def after_aggregate(self, before: Weights, weights: Weights) -> Weights:
        return self.algorithm.after_aggregation(before, weights)


def resolve(
    method: str,
    groups: Sequence[tuple[str, Sequence[int]]],
    norm_layers: Sequence[str],
    *,
    layers: Sequence[str] | None = None,
    last_k: int | None = None,
    finetune_epochs: int | None = None,
    ditto_lambda: float | None = None,
) -> Personalization:
    """The personalization for a model, from ``personalization.*``.

    Parameters
    ----------
    groups : sequence of (str, sequence of int)
        The model's weight-bearing layers in order, with the positions of their
        variables (:func:`fedpipe.model.zoo.layer_groups`).
    norm_layers : sequence of str
        Names of the model's normalization layers (fedbn keeps these).

    Raises
    ------
    ParamsError
        Naming the param key: a layer name the model does not have (with the names
        it has), a last_k that would keep every layer, fedbn on a model without
        normalization layers.
    """
    personal: tuple[int, ...] = ()
    names = [name for name, _ in groups]
    if method == "fedper":
        if layers is not None:
            unknown = [n for n in layers if n not in names]
            if unknown:
                raise ParamsError(
                    f"params.yaml: personalization.layers names {unknown} that the "
                    f"model does not have; its weight-bearing layers: {names}"
                )
            chosen = [g for g in groups if g[0] in set(layers)]
        else:
            k = last_k or DEFAULT_LAST_K
            if k >= len(groups):
                raise ParamsError(
                    f"params.yaml: personalization.last_k={k} would keep all "
                    f"{len(groups)} weight-bearing layers on the clients; allowed: "
                    f"1..{len(groups) - 1}"
                )
            chosen = list(groups[-k:])
        if len(chosen) == len(groups):
            raise ParamsError(
                "params.yaml: personalization.layers lists every layer of the model; "
                "keep at least one layer shared"
            )
        personal = tuple(sorted(j for _, idx in chosen for j in idx))
    elif method == "fedbn":
        if not norm_layers:
            raise ParamsError(
                "params.yaml: personalization.method=fedbn keeps normalization layers "
                "local, but the model has none; use model.name cnn or resnet with "
                "model.batch_norm: true, or another method"
            )
        wanted = set(norm_layers)
        personal = tuple(sorted(j for n, idx in groups if n in wanted for j in idx))
    return Personalization(
        method=method,
        personal=personal,
        finetune_epochs=finetune_epochs or DEFAULT_FINETUNE_EPOCHS,
        ditto_lambda=DEFAULT_DITTO_LAMBDA if ditto_lambda is None else ditto_lambda,
    )

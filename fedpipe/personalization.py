"""Personalized federated learning: what each client keeps of its own model.

Four methods, combinable with any server strategy (``personalization.method``):

- ``fedper`` (Arivazhagan et al., 2019, "Federated Learning with Personalization
  Layers"): chosen layers (by name, or the last k weight-bearing layers) stay on
  each client. A client trains from the global shared layers plus its own personal
  layers; the server never averages personal layers (the global model keeps its
  initial ones).
- ``fedbn`` (Li et al., 2021, "FedBN"): the same mechanism with every normalization
  layer (scale, offset and moving statistics) kept local.
- ``finetune``: the global model, trained further for k epochs on the client's own
  training split before it is evaluated there. Nothing is kept between rounds.
- ``ditto`` (Li et al., 2021, "Ditto: Fair and Robust Federated Learning Through
  Personalization"): besides its usual global update, each selected client trains a
  personal model v_k on loss + lambda/2 * ||v_k - w_global||^2, kept between rounds.

The personalized model of a client is what it would deploy: shared layers of the
new global model with its personal layers (fedper, fedbn), the fine-tuned global
model (finetune), or its personal model (ditto). Clients that have never trained
use the global model's layers until they do.

Per-client arrays are kept in the round's ``client_state.npz`` under
``personal/client-CCCC/JJJ`` (J: position in ``model.get_weights()``), beside
SCAFFOLD's control variates, so a resumed or reproduced round continues exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedpipe.config import ParamsError

DEFAULT_LAST_K = 1
DEFAULT_FINETUNE_EPOCHS = 1
DEFAULT_DITTO_LAMBDA = 0.1
_PREFIX = "personal/client-"


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

    @property
    def keeps_layers(self) -> bool:
        """fedper and fedbn: some layers never leave the client."""
        return self.method in ("fedper", "fedbn")

    def start_weights(
        self, global_weights: Sequence[np.ndarray], kept: Mapping[int, np.ndarray]
    ) -> list[np.ndarray]:
        """What a client trains from: the global weights with its kept layers."""
        if not self.keeps_layers:
            return list(global_weights)
        return self.personal_model(global_weights, kept)

    def personal_model(
        self, global_weights: Sequence[np.ndarray], kept: Mapping[int, np.ndarray]
    ) -> list[np.ndarray]:
        """A client's personalized model before any fine-tuning: the global weights
        with whatever the client keeps (fedper, fedbn: its layers; ditto: its whole
        personal model). The global model itself for a client that keeps nothing."""
        return [kept.get(j, w) for j, w in enumerate(global_weights)]

    def shared_part(
        self, trained: Sequence[np.ndarray], global_weights: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        """What a client sends: its trained weights with personal layers replaced by
        the global ones (a zero update there, so no strategy moves them)."""
        if not self.keeps_layers:
            return list(trained)
        keep = set(self.personal)
        return [global_weights[j] if j in keep else w for j, w in enumerate(trained)]

    def kept_part(self, trained: Sequence[np.ndarray]) -> dict[int, np.ndarray]:
        """What a client keeps after training (fedper, fedbn: its personal layers)."""
        return {j: np.asarray(trained[j]) for j in self.personal}

    def restore_personal(
        self, new_global: Sequence[np.ndarray], old_global: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        """The new global model with personal layers exactly as before aggregation
        (server optimizers with momentum could otherwise still move them)."""
        if not self.keeps_layers:
            return list(new_global)
        keep = set(self.personal)
        return [old_global[j] if j in keep else w for j, w in enumerate(new_global)]


NO_PERSONALIZATION = Personalization()


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
        variables (:func:`fedpipe.models.layer_groups`).
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


def kept_arrays(states: Mapping[str, np.ndarray], client: int) -> dict[int, np.ndarray]:
    """Client ``client``'s kept arrays from a round's client state, by position."""
    prefix = f"{_PREFIX}{client:04d}/"
    return {
        int(key[len(prefix) :]): np.asarray(value)
        for key, value in states.items()
        if key.startswith(prefix)
    }


def with_kept_arrays(
    states: Mapping[str, np.ndarray], updates: Mapping[int, Mapping[int, np.ndarray]]
) -> dict[str, np.ndarray]:
    """A copy of ``states`` with the given clients' kept arrays replaced."""
    out = dict(states)
    for client, arrays in updates.items():
        prefix = f"{_PREFIX}{client:04d}/"
        for key in [k for k in out if k.startswith(prefix)]:
            del out[key]
        for j, array in arrays.items():
            out[f"{prefix}{j:03d}"] = np.asarray(array)
    return out

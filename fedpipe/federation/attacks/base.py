"""The attack contract: what a malicious client does to its data or its update.

An attack is a small, stateless object built from its ``attack.*`` settings.
Data poisoning (:meth:`Attack.poison`) changes what the client trains on, inside
its own job (so it runs wherever the job runs, Dask included); model poisoning
(:meth:`Attack.forge`) replaces the update the client sends, after the round's
results are collected and before the strategy aggregates them. Updates are
handled as deltas ``Δ_i = w_i - w_global`` in float64.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from fedpipe.core.component import Component, Setting

if TYPE_CHECKING:  # the data layer (pandas) is imported when data is poisoned
    from fedpipe.data.splits import ClientData

Weights = list[np.ndarray]


SCALE = Setting(
    "scale",
    float,
    gt=0.0,
    note="a boost factor; sign_flip sends -scale times the update",
    help="the update's factor",
)
"""``attack.scale``, of sign flipping and scaling (each with its own default)."""


class Attack(Component, abc.ABC):
    """A malicious client's behaviour.

    Subclasses set :attr:`name` (the ``attack.name`` value, their line in
    :data:`fedpipe.core.registry.ATTACKS`) and declare the ``attack.*`` keys
    they read in :attr:`settings` (each a keyword-only constructor argument and
    an attribute of the same name). The server never
    learns who is malicious; :class:`~fedpipe.federation.attacks.AttackPlan` does.

    Attributes
    ----------
    name : str
        The ``attack.name`` this class is registered under.
    settings : tuple of str
        The ``attack.*`` keys it reads.
    omniscient : bool
        Whether :meth:`forge` reads the benign clients' updates of the round.
    """

    name: ClassVar[str]
    section: ClassVar[str] = "attack"
    settings: ClassVar[tuple[str, ...]] = ()
    omniscient: ClassVar[bool] = False

    @classmethod
    def forges(cls) -> bool:
        """Whether the attack replaces the update its clients send (it overrides
        :meth:`forge` or one of its hooks)."""
        hooks = ("forge", "forge_one", "forge_shared")
        return any(getattr(cls, h) is not getattr(Attack, h) for h in hooks)

    def poison(self, data: ClientData, n_classes: int) -> ClientData:
        """What a malicious client trains on (default: its own data)."""
        return data

    def forge(
        self,
        own: Sequence[Weights],
        benign: Sequence[Weights],
        *,
        n_updates: int,
        rngs: Sequence[np.random.Generator],
    ) -> list[Weights]:
        """The deltas the malicious clients send.

        An omniscient attack's clients all send a copy of
        :meth:`forge_shared`; any other's each send :meth:`forge_one` of its
        own delta (default: the honest one). Subclasses override one of the
        two; the round calls this.

        Parameters
        ----------
        own : sequence of Weights
            Each malicious client's honest delta (float64, read-only), in client
            order.
        benign : sequence of Weights
            The benign clients' deltas of the round (float64, read-only).
        n_updates : int
            Updates the server receives this round (benign and malicious).
        rngs : sequence of Generator
            One seeded generator per malicious client (``rng_for(seed,
            "attack", round, client)``).

        Returns
        -------
        list of Weights
            One delta per malicious client, laid out like ``own``.
        """
        if self.omniscient:
            shared = self.forge_shared(
                benign, n_updates=n_updates, n_malicious=len(own)
            )
            return [[f.copy() for f in shared] for _ in own]
        return [
            self.forge_one(delta, rng, n_updates=n_updates)
            for delta, rng in zip(own, rngs, strict=True)
        ]

    def forge_one(
        self, delta: Weights, rng: np.random.Generator, *, n_updates: int
    ) -> Weights:
        """What one malicious client sends for its honest ``delta`` (default:
        ``delta``); ``rng`` is its own generator of the round."""
        return list(delta)

    def forge_shared(
        self, benign: Sequence[Weights], *, n_updates: int, n_malicious: int
    ) -> Weights:
        """The one delta every client of an omniscient attack sends, from the
        round's ``benign`` deltas and counts."""
        raise NotImplementedError(
            f"{type(self).__name__} is omniscient but defines no forge_shared"
        )


def stacked(updates: Sequence[Weights]) -> list[np.ndarray]:
    """Layer by layer, the ``updates`` stacked on a new first axis."""
    return [np.stack([u[layer] for u in updates]) for layer in range(len(updates[0]))]

"""Attacks a federation can be put under, one per file, behind
:class:`~fedpipe.federation.attacks.base.Attack` (``attack.*`` in params).

Pure NumPy. Which clients are malicious is drawn once per run
(:func:`choose_malicious`, seeded by ``rng_for(seed, "attack")``) and held, with
the attack and its first round, by an :class:`AttackPlan`. The round applies it
as a step (:class:`AttackStep`) whose hooks call :meth:`AttackPlan.poisoned`
when it builds a client's job (data poisoning, trained inside the job, so also
on Dask) and :func:`tampered_results` after the clients' results are in and
before the strategy aggregates them (model poisoning, omniscient attacks
included). The strategy never learns who is malicious; the round's record and
health do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from fedpipe.core import registry
from fedpipe.core.seeds import rng_for
from fedpipe.federation.attacks.alie import Alie, alie_z
from fedpipe.federation.attacks.base import Attack, Weights
from fedpipe.federation.attacks.gaussian import Gaussian
from fedpipe.federation.attacks.ipm import Ipm
from fedpipe.federation.attacks.label_flip_all import LabelFlipAll
from fedpipe.federation.attacks.label_flip_targeted import TargetedLabelFlip
from fedpipe.federation.attacks.labels import flipped, flipped_pair
from fedpipe.federation.attacks.scaling import Scaling
from fedpipe.federation.attacks.sign_flip import SignFlip
from fedpipe.federation.steps import RoundStep
from fedpipe.strategy.base import ClientUpdate

if TYPE_CHECKING:  # the data layer (pandas) is not needed to read the attacks
    from fedpipe.data.splits import ClientData
    from fedpipe.federation.attacks.flipped import FlippedLabels
    from fedpipe.model.jobs import ClientJob

ATTACKS: dict[str, type[Attack]] = registry.classes("attack")
"""The built-in attacks by ``attack.name`` (the registry's table, resolved)."""


def __getattr__(name: str) -> Any:
    # FlippedLabels subclasses the data layer's ClientData: imported on first use
    if name == "FlippedLabels":
        from fedpipe.federation.attacks.flipped import FlippedLabels

        return FlippedLabels
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_attack(name: str, **settings: Any) -> Attack:
    """The attack registered under ``attack.name``, built from its settings.

    Raises
    ------
    ValueError
        Unknown name (listing the accepted ones) or a bad setting (naming
        ``attack.<key>``).
    """
    cls: type[Attack] = registry.get("attack", name)
    return cls.from_params(**settings)


def malicious_count(share: float, n_clients: int) -> int:
    """Clients a share stands for: ``round(share * n)``, at least 1 if share > 0."""
    if share <= 0:
        return 0
    return min(n_clients, max(1, math.floor(share * n_clients + 0.5 + 1e-9)))


def choose_malicious(
    *,
    n_clients: int,
    seed: int,
    share: float | None = None,
    clients: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """The run's malicious clients, sorted: ``clients`` as given, or a seeded
    draw of :func:`malicious_count` of them (``rng_for(seed, "attack")``), fixed
    for the whole run."""
    if clients is not None:
        return tuple(sorted({int(c) for c in clients}))
    k = malicious_count(share or 0.0, n_clients)
    drawn = rng_for(seed, "attack").choice(n_clients, size=k, replace=False)
    return tuple(sorted(int(c) for c in drawn))


D = TypeVar("D")


@dataclass(frozen=True)
class AttackPlan:
    """Who attacks, how, and from which round (the run's ``attack.*``).

    Attributes
    ----------
    attack : Attack
        What the malicious clients do.
    malicious : tuple of int
        The malicious clients, sorted (fixed for the run).
    from_round : int
        First round they attack in (1-based).
    seed : int
        The run's seed (noise of the Gaussian attack).
    """

    attack: Attack
    malicious: tuple[int, ...]
    from_round: int = 1
    seed: int = 0

    def attackers(self, round_: int, selected: Sequence[int]) -> list[int]:
        """The selected clients that attack in ``round_``, sorted."""
        if round_ < self.from_round:
            return []
        chosen = set(self.malicious)
        return sorted(c for c in selected if c in chosen)

    def poisoned(self, round_: int, data: ClientData, n_classes: int) -> ClientData:
        """What client ``data.client`` trains on in ``round_``."""
        if round_ < self.from_round or data.client not in self.malicious:
            return data
        return self.attack.poison(data, n_classes)

    def tampered(
        self, round_: int, global_weights: Weights, updates: Sequence[ClientUpdate]
    ) -> list[ClientUpdate]:
        """The updates the server receives: the attackers' replaced by
        :meth:`Attack.forge` (``w = w_global + forged delta``, cast to each
        layer's dtype), every other update the very same object."""
        bad = set(self.attackers(round_, [u.client for u in updates]))
        if not bad:
            return list(updates)
        base = [np.asarray(w, dtype=np.float64) for w in global_weights]

        def delta(u: ClientUpdate) -> Weights:
            return [
                np.asarray(w, dtype=np.float64) - b
                for w, b in zip(u.weights, base, strict=True)
            ]

        ordered = sorted(updates, key=lambda u: u.client)
        own = [delta(u) for u in ordered if u.client in bad]
        benign = [delta(u) for u in ordered if u.client not in bad]
        deltas = self.attack.forge(
            own,
            benign or own,  # no benign update: the attackers' own estimate
            n_updates=len(updates),
            rngs=[rng_for(self.seed, "attack", round_, c) for c in sorted(bad)],
        )
        forged = dict(zip(sorted(bad), deltas, strict=True))
        out = []
        for u in updates:
            if u.client in bad:
                weights = [
                    (b + x).astype(np.asarray(w).dtype)
                    for b, x, w in zip(base, forged[u.client], u.weights, strict=True)
                ]
                u = replace(u, weights=weights)
            out.append(u)
        return out


def tampered_results(
    plan: AttackPlan | None, round_: int, global_weights: Weights, results: Sequence[D]
) -> list[D]:
    """A round's client results (objects with an ``update``) with the attackers'
    updates replaced (:meth:`AttackPlan.tampered`); unchanged without a plan."""
    if plan is None:
        return list(results)
    updates = plan.tampered(round_, global_weights, [r.update for r in results])  # type: ignore[attr-defined]
    return [
        r if u is r.update else replace(r, update=u)  # type: ignore[attr-defined, type-var]
        for r, u in zip(results, updates, strict=True)
    ]


class AttackStep(RoundStep):
    """A planted attack as a step of the round: the malicious clients' data
    poisoned, their updates forged, and who they were in the record and health.

    Parameters
    ----------
    plan : AttackPlan
        Who attacks, how, and from which round.
    """

    def __init__(self, plan: AttackPlan) -> None:
        self.plan = plan

    def __repr__(self) -> str:
        return f"AttackStep({self.plan!r})"

    def client_job(self, round_: int, job: ClientJob) -> ClientJob:
        """The job, training on the client's data as the plan poisons it."""
        data = self.plan.poisoned(round_, job.data, job.spec.n_classes)
        return replace(job, data=data)

    def on_results(self, round_: int, before: Weights, results: list[D]) -> list[D]:
        # after the non-finite results were left out: an omniscient attack
        # computed over a NaN would be NaN
        if any(not r.update.weights for r in results):
            # replies the server never saw alone (secure aggregation's masked
            # ones): nothing to forge; a data attack already trained poisoned
            # (fedpipe.config.wire refuses a forging attack with it)
            return results
        return tampered_results(self.plan, round_, before, results)

    def record(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the round's attackers among the selected clients."""
        attackers = self.plan.attackers(fields["round"], fields["selected"])
        return {**fields, "malicious": attackers}

    def health(
        self, round_: int, clients: Sequence[int], health: dict[str, Any]
    ) -> dict[str, Any]:
        """``health`` with the attackers among ``clients``."""
        return {**health, "malicious": self.plan.attackers(round_, clients)}


__all__ = [
    "ATTACKS",
    "Alie",
    "Attack",
    "AttackPlan",
    "AttackStep",
    "FlippedLabels",
    "Gaussian",
    "Ipm",
    "LabelFlipAll",
    "Scaling",
    "SignFlip",
    "TargetedLabelFlip",
    "alie_z",
    "choose_malicious",
    "flipped",
    "flipped_pair",
    "make_attack",
    "malicious_count",
    "tampered_results",
]

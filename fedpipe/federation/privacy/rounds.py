"""What a round does with ``privacy.*``: the :class:`PrivateStrategy` wrapper.

:func:`fedpipe.federation.round.run_round` starts it before any client trains
(:func:`spend`: it stops the federation with
:class:`~fedpipe.federation.privacy.accountant.PrivacyBudgetExceeded` if
the round would pass ``privacy.target_epsilon``) and aggregates with it in place
of the strategy (:func:`aggregate_round`); its record hook adds what the round's
record keeps (epsilon, the clip, the noise against the signal). With
``privacy`` None both functions are the strategy's own path, bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedpipe.config.privacy import Privacy, finite_or_inf
from fedpipe.federation.privacy.mechanism import (
    CLIP_KEY,
    Clipped,
    clipped_deltas,
    global_norm,
    next_clip,
    noised_mean,
    privacy_rng,
)
from fedpipe.federation.steps import Sampler, StrategyWrapper
from fedpipe.strategy import AggregationError, ClientUpdate, State, Strategy
from fedpipe.strategy.aggregate import Weights, first_non_finite, normalized

__all__ = [
    "Privacy",
    "PrivateStrategy",
    "aggregate_round",
    "spend",
    "with_epsilon",
]


class PrivateStrategy(StrategyWrapper):
    """A strategy under ``privacy.*``'s mechanism: the inner strategy's server
    step on the clipped, noised updates (:func:`aggregate_round`).

    :meth:`start` checks the budget before any client trains
    (:class:`PrivacyBudgetExceeded`) and binds the round (its noise seed, the
    epsilon spent); :meth:`record` adds the round's privacy record.

    Parameters
    ----------
    inner : Strategy
        The server strategy.
    privacy : Privacy
        The mechanism and the budget.
    seed : int
        The experiment's seed (the noise derives from it and ``key``).
    key : bytes or None
        The project's secret key (:mod:`fedpipe.core.secretkey`); None only with
        ``privacy.noise_key: params_not_private``, and always under local DP
        (the clients noise their own updates, each with a key of its own,
        :mod:`fedpipe.client.localdp`: the server holds none). Never printed or
        recorded.
    """

    def __init__(
        self, inner: Strategy, privacy: Privacy, *, seed: int, key: bytes | None
    ) -> None:
        super().__init__(inner)
        check_key(privacy, key)
        self.privacy, self.seed, self._key = privacy, seed, key
        self.round: int | None = None
        self.epsilon: float | None = None
        self.report: dict[str, Any] | None = None
        self.unnoised: Mapping[int, Weights | None] | None = None

    def __repr__(self) -> str:
        return f"PrivateStrategy({self.inner!r}, {self.privacy!r})"

    def start(self, round_: int, sampled: Sampler) -> PrivateStrategy:
        """This strategy for round ``round_`` (a new object), once the budget
        allows it."""
        epsilon = spend(self.privacy, round_, sampled)
        bound = PrivateStrategy(self.inner, self.privacy, seed=self.seed, key=self._key)
        bound.round, bound.epsilon = round_, epsilon
        return bound

    def on_results(self, round_: int, before: Weights, results: list[Any]) -> list[Any]:
        """The results as they are; under local DP the oracle keeps each
        client's weights before its job noised them (``ClientResult.unnoised``)
        for the round's noise-free figures, which only the oracle view shows.

        Raises
        ------
        RuntimeError
            Under local DP, a result whose job did not noise it (its
            ``LocalTraining`` had no ``local_dp``): aggregating it would publish
            a noise-free update under a record that says local DP.
        """
        if self.privacy.noised_by_clients:
            kept = {r.client: getattr(r, "unnoised", None) for r in results}
            bare = sorted(c for c, w in kept.items() if w is None)
            if bare:
                raise RuntimeError(
                    f"round {round_}: client {bare[0]}'s reply was not noised in "
                    "its job under privacy.mechanism=local (its LocalTraining has "
                    "no local_dp; build it with fedpipe.federation.build."
                    "local_training)"
                )
            self.unnoised = kept
        return results

    def aggregate_round(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        if self.round is None:
            raise RuntimeError("PrivateStrategy.start(round) before aggregate_round")
        unnoised = None
        if self.unnoised is not None:
            unnoised = {c: self.unnoised.get(c) for c in (u.client for u in updates)}
        weights, new_state, self.report = aggregate_round(
            self.privacy,
            self.inner,
            global_weights,
            updates,
            state,
            seed=self.seed,
            round_=self.round,
            key=self._key,
            unnoised=unnoised,
        )
        return weights, new_state

    def record(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the round's privacy record (epsilon, delta, clip,
        noise against signal)."""
        private = with_epsilon(self.report, self.privacy, self.epsilon)
        return {**fields, "privacy": private}


def check_key(privacy: Privacy, key: bytes | None) -> None:
    """A secret key where ``privacy.noise_key`` asks for one, none where not;
    none at all under local DP (each client noises its own update in its job,
    :mod:`fedpipe.client.localdp`, and the server holds no key).

    Raises
    ------
    ValueError
        ``noise_key: secret`` without a key (the noise would be derivable from
        the params), a key with ``params_not_private``, or a key for local DP's
        server step.
    """
    if privacy.noised_by_clients:
        if key is not None:
            raise ValueError(
                "privacy.mechanism=local: each client noises its own update with "
                "a key of its own; the server holds no key (pass key=None)"
            )
        return
    if privacy.keyed and key is None:
        raise ValueError(
            "privacy.noise_key=secret needs the project's secret key (bytes); "
            "without it the noise would derive from params.yaml alone"
        )
    if not privacy.keyed and key is not None:
        raise ValueError(
            f"privacy.noise_key={privacy.noise_key} derives the noise from the "
            "params alone; pass key=None"
        )


#: what every round record of ``privacy.noise_key: params_not_private`` says
NOT_PRIVATE = (
    "none: privacy.noise_key=params_not_private derives the noise from params.yaml "
    "alone, so anyone with it and the weights can subtract the noise; epsilon "
    "does not hold"
)


def spend(privacy: Privacy | None, round_: int, sampled: Sampler) -> float | None:
    """Epsilon once round ``round_`` has run (None without privacy).

    Raises
    ------
    PrivacyBudgetExceeded
        Round ``round_`` would pass ``privacy.target_epsilon``.
    """
    if privacy is None:
        return None
    # imported here: dp_accounting brings scipy's signal and optimize (about
    # 0.8 s of a process's start), which a run without privacy never needs
    from fedpipe.federation.privacy.accountant import check_budget

    return check_budget(privacy, round_, sampled)


def aggregate_round(
    privacy: Privacy | None,
    strategy: Strategy,
    before: Weights,
    updates: Sequence[ClientUpdate],
    state: State,
    *,
    seed: int,
    round_: int,
    key: bytes | None,
    unnoised: Mapping[int, Weights | None] | None = None,
) -> tuple[Weights, State, dict[str, Any] | None]:
    """The round's new weights and server state, through ``privacy``'s mechanism,
    and its privacy record (None without privacy). ``key``: the project's secret
    key (None with ``privacy.noise_key: params_not_private`` and under local DP,
    whose ``updates`` come noised by their clients). ``unnoised``: under local
    DP, the simulation's oracle's copy of each client's weights before its
    noise, by client id (the record's noise-free figures; without it, or with
    a client missing, the record has none).

    Raises
    ------
    AggregationError
        As the strategy's ``aggregate_round`` (a client's non-finite update is
        refused before it could be clipped into the sum).
    """
    if privacy is None:
        weights, new_state = strategy.aggregate_round(before, updates, state)
        return weights, new_state, None
    check_key(privacy, key)
    ordered = sorted(updates, key=lambda u: u.client)
    _refuse_non_finite(ordered)
    inner_state = {k: v for k, v in state.items() if k != CLIP_KEY}
    if privacy.mechanism == "central":
        return _central(
            privacy, strategy, before, ordered, state, inner_state, seed, round_, key
        )
    clean = None
    if unnoised is not None:
        found = [w for w in (unnoised.get(u.client) for u in ordered) if w is not None]
        clean = found if len(found) == len(ordered) else None
    return _local(privacy, strategy, before, ordered, inner_state, clean)


def _central(
    privacy: Privacy,
    strategy: Strategy,
    before: Weights,
    updates: Sequence[ClientUpdate],
    state: State,
    inner_state: State,
    seed: int,
    round_: int,
    key: bytes | None,
) -> tuple[Weights, State, dict[str, Any]]:
    clip = float(state[CLIP_KEY]) if CLIP_KEY in state else privacy.clip_norm
    clipped = clipped_deltas(before, [u.weights for u in updates], clip)
    rng = privacy_rng(seed, round_, key=key)
    mean_delta = noised_mean(clipped, privacy, rng)
    synthetic = [
        np.asarray(g, dtype=np.float64) + d
        for g, d in zip(before, mean_delta, strict=True)
    ]
    # the strategy's server step on one update: the noised mean delta
    one = ClientUpdate(updates[0].client, synthetic, 1)
    weights, new_state = strategy.aggregate_round(before, [one], inner_state)
    share = 1.0 / privacy.expected_clients
    report = _report(privacy, clipped, [share] * len(updates))
    std = privacy.update_multiplier * clip
    report["noise_norm"] = _noise_norm(std, before, [share])
    if privacy.adaptive_clip:
        new_clip = next_clip(clipped, privacy, rng)
        new_state = {**new_state, CLIP_KEY: np.asarray(new_clip, dtype=np.float64)}
        report["next_clip_norm"] = round(new_clip, 6)
    return weights, new_state, report


def _local(
    privacy: Privacy,
    strategy: Strategy,
    before: Weights,
    updates: Sequence[ClientUpdate],
    inner_state: State,
    unnoised: Sequence[Weights] | None,
) -> tuple[Weights, State, dict[str, Any]]:
    """The strategy on the updates as received: each client clipped and noised
    its own inside its job (:mod:`fedpipe.client.localdp`). The server cannot
    know the noise-free figures; the simulation's oracle (``unnoised``: the
    clients' weights before their noise, in client order) adds them to the
    report, and :mod:`~fedpipe.federation.privacy.views` keeps them out of the
    published view."""
    weights, new_state = strategy.aggregate_round(before, updates, inner_state)
    shares = list(normalized([u.n_samples for u in updates]))
    if unnoised is None:
        report = _settings(privacy)
    else:
        clipped = clipped_deltas(before, unnoised, privacy.clip_norm)
        report = _report(privacy, clipped, shares)
    report["noise_norm"] = _noise_norm(
        privacy.noise_multiplier * privacy.clip_norm, before, shares
    )
    return weights, new_state, report


def _refuse_non_finite(updates: Sequence[ClientUpdate]) -> None:
    for u in updates:
        layer = first_non_finite(list(u.weights))
        if layer is not None:
            raise AggregationError(
                f"client {u.client} sent non-finite values in layer {layer}; "
                "refusing to clip it into the private sum (lower train.lr or "
                "check its data)"
            )


def _report(
    privacy: Privacy, clipped: Clipped, shares: Sequence[float]
) -> dict[str, Any]:
    """What the round's record keeps of its mechanism (epsilon added later)."""
    mean_clipped = [
        sum(s * d[j] for s, d in zip(shares, clipped.deltas, strict=True))
        for j in range(len(clipped.deltas[0]))
    ]
    n = len(clipped.norms)
    return {
        **_settings(privacy, clipped.clip),
        "clipped_fraction": round((n - clipped.inside) / n, 6),
        "update_norm_median": round(float(np.median(clipped.norms)), 6),
        "signal_norm": round(global_norm(mean_clipped), 6),
    }


def _settings(privacy: Privacy, clip: float | None = None) -> dict[str, Any]:
    """The mechanism's public settings in the round's record (``clip``: the
    clip used, when not ``privacy.clip_norm``)."""
    guarantee = {} if privacy.keyed else {"guarantee": NOT_PRIVATE}
    return {
        "mechanism": privacy.mechanism,
        "noise_key": privacy.noise_key,
        **guarantee,
        "noise_multiplier": privacy.noise_multiplier,
        "clip_norm": round(privacy.clip_norm if clip is None else clip, 6),
    }


def _noise_norm(std: float, like: Weights, shares: Sequence[float]) -> float:
    """Expected L2 norm of the noise in the aggregated delta:
    ``std * sqrt(d * sum_k s_k^2)`` for noise of ``std`` per coordinate,
    weighted by ``shares``, over the model's d coordinates."""
    d = sum(int(np.size(w)) for w in like)
    return round(std * float(np.sqrt(d * sum(s * s for s in shares))), 6)


def with_epsilon(
    report: dict[str, Any] | None, privacy: Privacy | None, epsilon: float | None
) -> dict[str, Any] | None:
    """The round's privacy record with epsilon and delta (None without privacy)."""
    if report is None or privacy is None or epsilon is None:
        return None
    value = finite_or_inf(epsilon)
    return {
        "epsilon": None if value is None else round(value, 6),
        "delta": privacy.delta,
        "accountant": privacy.accountant,
        **report,
    }

"""Record-level DP-SGD's round step (``privacy.mechanism: dpsgd``):
:class:`RecordPrivacy`.

The clipping and the noise are in each client's local training
(:meth:`fedpipe.model.training.ModelRunner.private_gradients`, turned on by
:attr:`fedpipe.client.base.LocalTraining.record_dp`); this step keeps each
client's books. A client's privacy loss is that of the DP-SGD steps it has
taken over all its rounds, each step ``PoissonSampledDpEvent(q_k,
GaussianDpEvent(sigma))`` with its own q_k = ``train.batch_size / n_k``
(:func:`fedpipe.federation.privacy.accountant.dpsgd_epsilon`, PLD). The step
count is kept in the client's own state (``dpsgd/steps`` in
``clients/client-CCCC.npz``), so a round recomputed in a fresh process
(``dvc repro``) charges the same.

Before the clients train, :meth:`RecordPrivacy.admit` charges each planned
client the most steps its round can take (``train.epochs`` x its batches,
``train.local_steps``, the algorithm's fits, a deadline's budget): a client
whose epsilon would then pass ``privacy.target_epsilon`` does not train (it is
left out, with the reason, in the round's ``excluded``; it never trains again,
since its epsilon only grows). When too few clients are left the round stops
as any round short of clients does (``federation.min_clients``). The round's
record gets every client's epsilon (``privacy.epsilon_clients``) and the worst
(``privacy.epsilon``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from fedpipe.config.privacy import Privacy, finite_or_inf
from fedpipe.core.errors import FedpipeError
from fedpipe.federation.clientstate import ClientStates
from fedpipe.federation.failures import BUDGET, RoundPlan
from fedpipe.federation.steps import RoundStep, Sampler
from fedpipe.strategy.aggregate import Weights

#: the namespace of the books in a client's state, and its array
STATE, STEPS = "dpsgd", "steps"

#: the reason a client is left out of a round (``excluded``)
BUDGET_REASON = BUDGET


class RecordDeltaTooLarge(FedpipeError, ValueError):
    """``privacy.delta`` is not below 1/n for a client's n records."""


def client_rate(n_train: int, batch_size: int) -> float:
    """q of a client's DP-SGD steps (:func:`fedpipe.model.training.sampling_rate`)."""
    return min(1.0, batch_size / n_train)


def steps_taken(state: Mapping[str, Mapping[str, np.ndarray]]) -> int:
    """DP-SGD steps a client has taken over its rounds (its kept books)."""
    books = state.get(STATE, {})
    return int(np.asarray(books[STEPS])) if STEPS in books else 0


class RecordPrivacy(RoundStep):
    """Each client's record-level privacy budget under DP-SGD.

    Parameters
    ----------
    privacy : Privacy
        ``privacy.*`` with ``mechanism: dpsgd``.
    batch_size : int
        ``train.batch_size``: each step's expected batch (q = batch / n).
    """

    def __init__(self, privacy: Privacy, *, batch_size: int) -> None:
        self.privacy, self.batch_size = privacy, batch_size
        self.round: int | None = None
        self.n_train: dict[int, int] = {}
        self.before: dict[int, int] = {}
        self.planned: dict[int, int] = {}
        self.after: dict[int, int] = {}
        self.stopped: dict[int, float] = {}

    def __repr__(self) -> str:
        return f"RecordPrivacy({self.privacy!r}, batch_size={self.batch_size})"

    def start(self, round_: int, sampled: Sampler) -> RecordPrivacy:
        bound = RecordPrivacy(self.privacy, batch_size=self.batch_size)
        bound.round = round_
        return bound

    def epsilon(self, client: int, steps: int) -> float:
        """Client ``client``'s epsilon after ``steps`` DP-SGD steps."""
        # imported here, as in rounds.spend: dp_accounting only for DP runs
        from fedpipe.federation.privacy.accountant import dpsgd_epsilon

        return dpsgd_epsilon(
            client_rate(self.n_train[client], self.batch_size),
            self.privacy.noise_multiplier,
            int(steps),
            self.privacy.delta,
        )

    def admit(
        self,
        round_: int,
        plan: RoundPlan,
        *,
        n_train: Mapping[int, int],
        planned: Mapping[int, int],
        states: ClientStates,
    ) -> RoundPlan:
        """The plan without the clients whose budget this round would pass.

        Raises
        ------
        RecordDeltaTooLarge
            ``privacy.delta`` >= 1/n for a client's n training records.
        """
        self.n_train = dict(n_train)
        _check_delta(self.privacy.delta, self.n_train)
        self.before = {c: steps_taken(states.get(c, {})) for c in self.n_train}
        target = self.privacy.target_epsilon
        self.planned, self.stopped = {}, {}
        for c in plan.train:
            spent = self.epsilon(c, self.before[c] + planned[c])
            if target is not None and spent > target:
                self.stopped[c] = spent
            else:
                self.planned[c] = planned[c]
        if not self.stopped:
            return plan
        excluded = dict(plan.excluded)
        for c, spent in self.stopped.items():
            excluded[c] = (
                f"{BUDGET_REASON}: this round would take ε to {spent:.3g} > "
                f"privacy.target_epsilon={target:g} (δ {self.privacy.delta:g})"
            )
        return RoundPlan(
            train={c: t for c, t in plan.train.items() if c not in self.stopped},
            excluded=dict(sorted(excluded.items())),
            partial={c: s for c, s in plan.partial.items() if c not in self.stopped},
        )

    def on_results(self, round_: int, before: Weights, results: list[Any]) -> list[Any]:
        """Each released update's client charged its round's steps: its books
        (``dpsgd/steps`` in its state) hold the steps so far."""
        out = []
        self.after = dict(self.before)
        for r in results:
            steps = self.before[r.client] + self.planned[r.client]
            self.after[r.client] = steps
            books = {STATE: {STEPS: np.asarray(steps, dtype=np.int64)}}
            out.append(replace(r, state={**r.state, **books}))
        return out

    def record(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the round's privacy record: every client's epsilon
        (clients that never trained: 0), the worst one, the clients stopped."""
        p = self.privacy
        spent = {c: self.epsilon(c, s) for c, s in sorted(self.after.items())}
        worst = max(spent.values(), default=0.0)
        guarantee = {} if p.keyed else {"guarantee": NOT_PRIVATE}
        block = {
            "epsilon": _rounded(worst),
            "delta": p.delta,
            "accountant": p.accountant,
            "mechanism": p.mechanism,
            "level": p.level,
            "noise_key": p.noise_key,
            **guarantee,
            "noise_multiplier": p.noise_multiplier,
            "clip_norm": p.clip_norm,
            "batch_size": self.batch_size,
            "epsilon_clients": {str(c): _rounded(e) for c, e in spent.items()},
            "steps_clients": {str(c): int(s) for c, s in sorted(self.after.items())},
            "stopped": sorted(self.stopped),
        }
        if p.target_epsilon is not None:
            block["target_epsilon"] = p.target_epsilon
        return {**fields, "privacy": block}


#: what every round record of ``privacy.noise_key: params_not_private`` says
NOT_PRIVATE = (
    "none: privacy.noise_key=params_not_private derives the DP-SGD noise and "
    "batches from params.yaml alone, so anyone with it can regenerate them; "
    "epsilon does not hold"
)


def _rounded(value: float) -> float | None:
    finite = finite_or_inf(value)
    return None if finite is None else round(finite, 6)


def _check_delta(delta: float, n_train: Mapping[int, int]) -> None:
    smallest = min(n_train.items(), key=lambda item: (item[1], item[0]), default=None)
    if smallest is None:
        return
    client, n = smallest
    if n > 0 and delta < 1.0 / n:
        return
    bound = math.inf if n == 0 else 1.0 / n
    raise RecordDeltaTooLarge(
        f"privacy.delta={delta:g} must be < 1/n for every client's n training "
        f"records (record-level DP: a delta of 1/n lets one record leak "
        f"outright); client {client} holds {n} (1/n = {bound:g}): lower "
        "privacy.delta"
    )

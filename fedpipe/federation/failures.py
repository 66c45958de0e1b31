"""Failures a round survives: dropout, failing clients, non-finite updates, stragglers.

A federation's clients are other people's machines: some go away before they train,
some crash, some send NaN, some are too slow for the round's deadline. The round
(:func:`fedpipe.federation.round.run_round`) leaves each of them out of aggregation,
names it and why in the round's record and health record, and completes while at
least ``federation.min_clients`` usable updates remain; else it stops with one line
naming the round and the clients left out
(:class:`fedpipe.federation.round.ClientsLost`).

What is decided before training (:func:`plan_round`), seeded so the same params
give the same round:

* **dropout** (``federation.dropout``, probability p): each sampled client drops
  out with probability p, drawn per (round, client) from the run's seed; dropped
  clients do not train.
* **stragglers** (``federation.round_deadline_steps``, D): a client may take at
  most D local optimizer steps in a round (a step budget stands in for a time
  budget: reproducible, unlike wall time), all its fits together (Ditto fits
  twice; the trainer holds the budget, ``LocalTraining.round_steps``, and
  shares it among the fits: each takes at most ``ceil(left / fits left)``, so
  Ditto's personal model trains beside the global update). A client
  that needs more (``train.epochs`` x its batches, capped by
  ``train.local_steps``, times its algorithm's ``fits_per_round``) is a
  straggler; ``federation.stragglers: partial`` uses the work it finished (its
  fits stop when its budget is spent, in the order it runs them), ``drop``
  leaves it out (it does not train). So
  that a homogeneous federation has stragglers at all, a share
  ``federation.slow_clients`` of the clients (fixed for the run, seeded) are
  slow: they complete only ``federation.slow_speed`` x D steps.

What is found after training: a job that raised
(:class:`fedpipe.model.jobs.ClientFailure`, its error's one line) and an update
holding NaN or inf (:func:`nonfinite_update`).

Reasons, as written in the records: ``dropout``, ``straggler``, ``nonfinite``
and ``failed: <ExceptionType: message>``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from fedpipe.client.base import LocalTraining
from fedpipe.core.seeds import rng_for
from fedpipe.strategy.aggregate import first_non_finite
from fedpipe.strategy.base import ClientUpdate

DROPOUT = "dropout"
STRAGGLER = "straggler"
NONFINITE = "nonfinite"
FAILED = "failed"
#: a client whose record-level privacy budget is spent (privacy.mechanism: dpsgd)
BUDGET = "privacy budget"
REASONS = (DROPOUT, FAILED, NONFINITE, STRAGGLER, BUDGET)
"""The kinds of reason a client is left out (a failure's reason is
``failed: <message>``)."""


@dataclass(frozen=True)
class FailurePolicy:
    """How a round treats unreliable clients (``federation.*``).

    Attributes
    ----------
    dropout : float
        Probability in [0, 1) that a sampled client drops out before training.
    min_clients : int
        Usable updates a round needs to complete.
    round_deadline_steps : int or None
        Local optimizer steps a client may take per round (None: no deadline).
    stragglers : str
        ``partial`` (use a straggler's finished steps) or ``drop`` (leave it out).
    slow_clients : float
        Share of the clients, fixed for the run, that are slow.
    slow_speed : float
        Share of the deadline's steps a slow client completes (in (0, 1]).
    """

    dropout: float = 0.0
    min_clients: int = 1
    round_deadline_steps: int | None = None
    stragglers: Literal["partial", "drop"] = "partial"
    slow_clients: float = 0.0
    slow_speed: float = 0.5


@dataclass(frozen=True)
class RoundPlan:
    """Who trains in a round and how, decided before any training.

    Attributes
    ----------
    train : dict
        Client id -> its ``train.*`` for this round (under a deadline with its
        step budget as ``round_steps``), in client order.
    excluded : dict
        Client id -> why it does not train (``dropout``, ``straggler``).
    partial : dict
        Client id -> the steps a partial straggler completes.
    """

    train: dict[int, LocalTraining] = field(default_factory=dict)
    excluded: dict[int, str] = field(default_factory=dict)
    partial: dict[int, int] = field(default_factory=dict)


def dropped_out(
    selected: Sequence[int], *, dropout: float, seed: int, round_: int
) -> list[int]:
    """The sampled clients that drop out of ``round_``: each with probability
    ``dropout``, drawn per (round, client), so whether a client drops out does
    not depend on which others were sampled."""
    if dropout <= 0.0:
        return []
    return [
        c for c in selected if rng_for(seed, "dropout", round_, c).random() < dropout
    ]


def slow_set(n_clients: int, share: float, seed: int) -> frozenset[int]:
    """The ``share`` of the ``n_clients`` that are slow, fixed for the run."""
    if share <= 0.0:
        return frozenset()
    k = min(n_clients, math.ceil(round(share * n_clients, 9)))
    chosen = rng_for(seed, "slow").choice(n_clients, size=k, replace=False)
    return frozenset(int(c) for c in chosen)


def steps_needed(n_train: int, training: LocalTraining, fits: int = 1) -> int:
    """Local optimizer steps a client's round takes: ``train.epochs`` x its
    batches, capped by ``train.local_steps``, for each of the algorithm's
    ``fits`` (``ClientAlgorithm.fits_per_round``)."""
    steps = training.epochs * math.ceil(n_train / training.batch_size)
    per_fit = steps if training.max_steps is None else min(steps, training.max_steps)
    return fits * per_fit


def planned_steps(n_train: int, training: LocalTraining, fits: int = 1) -> int:
    """The most steps a client's round can take: :func:`steps_needed`, within
    its round budget (``training.round_steps``) when it has one (what DP-SGD's
    accountant charges the client before it trains)."""
    need = steps_needed(n_train, training, fits)
    return need if training.round_steps is None else min(need, training.round_steps)


def step_budget(client: int, policy: FailurePolicy, slow: frozenset[int]) -> int | None:
    """Steps ``client`` completes before the round's deadline (None: no deadline)."""
    deadline = policy.round_deadline_steps
    if deadline is None:
        return None
    if client in slow:
        return max(1, math.floor(deadline * policy.slow_speed))
    return deadline


def plan_round(
    selected: Sequence[int],
    *,
    n_train: Mapping[int, int],
    training: LocalTraining,
    policy: FailurePolicy,
    seed: int,
    round_: int,
    n_clients: int,
    fits: int = 1,
) -> RoundPlan:
    """Who of the ``selected`` clients trains in ``round_``, with which budget.

    ``fits`` is the client algorithm's ``fits_per_round``. Without dropout and
    deadline every selected client trains with ``training`` unchanged (today's
    round, bit for bit); under a deadline each trains with its budget as
    ``round_steps``, shared among its ``fits`` (``round_fits``), which its
    trainer holds for all its fits together.
    """
    gone = set(dropped_out(selected, dropout=policy.dropout, seed=seed, round_=round_))
    slow = slow_set(n_clients, policy.slow_clients, seed)
    train: dict[int, LocalTraining] = {}
    excluded: dict[int, str] = {}
    partial: dict[int, int] = {}
    for c in selected:
        budget = step_budget(c, policy, slow)
        if c in gone:
            excluded[c] = DROPOUT
        elif budget is None:
            train[c] = training
        elif steps_needed(n_train[c], training, fits) <= budget:
            train[c] = replace(training, round_steps=budget, round_fits=fits)
        elif policy.stragglers == "drop":
            excluded[c] = STRAGGLER
        else:
            train[c] = replace(training, round_steps=budget, round_fits=fits)
            partial[c] = budget
    return RoundPlan(train, excluded, partial)


def nonfinite_update(update: ClientUpdate) -> bool:
    """Whether an update's weights or extras hold NaN or inf."""
    if first_non_finite(update.weights) is not None:
        return True
    return any(
        first_non_finite(arrays) is not None for arrays in update.extras.values()
    )


def reason_kind(reason: str) -> str:
    """``failed: ValueError: ...`` -> ``failed``; other reasons as they are."""
    return reason.split(":", 1)[0]


def excluded_counts(excluded: Mapping[int, str]) -> dict[str, int]:
    """How many clients were left out for each kind of reason (kinds present)."""
    kinds = [reason_kind(r) for r in excluded.values()]
    return {k: kinds.count(k) for k in REASONS if k in kinds}


def excluded_text(excluded: Mapping[int, str]) -> str:
    """``client 1 (dropout), client 4 (failed: ...)`` in client order."""
    return ", ".join(f"client {c} ({excluded[c]})" for c in sorted(excluded))


def lost_message(
    round_: int,
    *,
    usable: int,
    selected: int,
    min_clients: int,
    excluded: Mapping[int, str],
) -> str:
    """The one line a round stops with when too few usable updates remain."""
    return (
        f"round {round_} stopped: {usable} usable update(s) of {selected} sampled "
        f"clients, federation.min_clients needs {min_clients}; left out: "
        f"{excluded_text(excluded) or 'none'}"
    )

"""Cross-cutting steps of a round, applied by a round that does not know them.

:func:`fedpipe.federation.round.run_round` samples, plans, maps the clients,
aggregates, evaluates and records. What a run adds to that (planted attacks,
differential privacy, planted faults, the layers kept on the clients) comes as
objects with hooks, in the manner of pfl-research's postprocessors: a
:class:`RoundStep` has one hook on each client's job (:meth:`RoundStep.client_job`)
and one on the server's new weights (:meth:`RoundStep.after_aggregate`), and sees
the round's replies, its results and its record; a
:class:`StrategyWrapper` holds the server strategy and delegates to it, as
Flower's ``DifferentialPrivacyServerSideFixedClipping`` does. Both are built once
from the params (:mod:`fedpipe.federation.build`); every hook's default leaves
its input as it is, so a round without them is the plain round, bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from fedpipe.strategy import ClientUpdate, State, Strategy
from fedpipe.strategy.aggregate import Weights

if TYPE_CHECKING:
    from fedpipe.federation.clientstate import ClientStates
    from fedpipe.federation.failures import RoundPlan
    from fedpipe.model.jobs import ClientJob

Sampler = Callable[[int], Sequence[int]]
"""The clients a federation samples in a round (its sampling, for any round)."""

R = TypeVar("R")
"""A client's result in the round (an object with an ``update``)."""


class RoundStep:
    """A step a round applies without knowing what it is.

    Every hook's default returns its input unchanged; a step overrides the ones
    it needs. The round calls them in this order: :meth:`start` (before any
    work), :meth:`admit` (who of the sampled clients trains),
    :meth:`client_job` (each client's job: what it trains on, how, and what
    its reply carries), :meth:`receive` (the replies as they arrive),
    :meth:`on_results` (the usable results, before aggregation),
    :meth:`after_aggregate` (the new global weights), :meth:`record` and
    :meth:`health`.
    """

    def start(self, round_: int, sampled: Sampler) -> RoundStep:
        """The step for round ``round_``, before any client trains (it may bind
        the round, or stop the federation by raising)."""
        return self

    def admit(
        self,
        round_: int,
        plan: RoundPlan,
        *,
        n_train: Mapping[int, int],
        planned: Mapping[int, int],
        states: ClientStates,
    ) -> RoundPlan:
        """The round's plan after this step: it may leave planned clients out
        (moved to ``plan.excluded`` with the reason). ``n_train``: every
        client's training records; ``planned``: the most steps each planned
        client's round takes; ``states``: what every client kept."""
        return plan

    def client_job(self, round_: int, job: ClientJob) -> ClientJob:
        """The job client ``job.task.client`` runs in ``round_``: the one hook
        on each client's side of the round (pfl-research's
        ``postprocess_one_user``). A step may change what the client trains on
        (an attack's poisoned data), how it trains (a planted fault's failing
        algorithm) or what its reply carries on the wire (a codec, secure
        aggregation's keys)."""
        return job

    def receive(self, round_: int, before: Weights, returned: list[Any]) -> list[Any]:
        """The replies (results and failures, in job order) as they arrive, before
        any check: a step decodes what its :meth:`client_job` encoded."""
        return returned

    def on_results(self, round_: int, before: Weights, results: list[R]) -> list[R]:
        """The round's usable client results, as the server receives them."""
        return results

    def after_aggregate(self, before: Weights, weights: Weights) -> Weights:
        """The new global weights after this step: the one hook on the server's
        side after aggregation (pfl-research's ``postprocess_server``; e.g. the
        layers kept on the clients hold ``before``'s values, a planted fault
        scales the aggregate)."""
        return weights

    def record(self, fields: dict[str, Any]) -> dict[str, Any]:
        """The round record's fields (``RoundRecord``'s keywords) after this step."""
        return fields

    def health(
        self, round_: int, clients: Sequence[int], health: dict[str, Any]
    ) -> dict[str, Any]:
        """The round's health record, for the clients whose results came back."""
        return health


class StrategyWrapper(Strategy, RoundStep):
    """A strategy that holds an inner one and delegates to it.

    A subclass overrides what it changes (DP: :meth:`aggregate_round`, its
    :meth:`start` and :meth:`record`); the rest (the client algorithm, the
    broadcast, the state, the traits) is the inner strategy's. This class alone
    is the plain strategy, bit for bit.
    """

    _DELEGATED = (
        "name",
        "settings",
        "state_names",
        "required_extras",
        "client_algorithm",
        "linear",
        "no_privacy",
        "robust_share",
        "weight_sum_setting",
    )

    def __init__(self, inner: Strategy) -> None:
        self.inner = inner
        for key in self._DELEGATED:
            setattr(self, key, getattr(inner, key))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def init_state(self, global_weights: Weights) -> State:
        return self.inner.init_state(global_weights)

    def too_few(self, n_updates: int) -> str | None:
        return self.inner.too_few(n_updates)

    def state_shapes(self, global_weights: Weights) -> dict[str, tuple[int, ...]]:
        return self.inner.state_shapes(global_weights)

    def aggregate(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        return self.inner.aggregate(global_weights, updates, state)

    def aggregate_round(
        self, global_weights: Weights, updates: Sequence[ClientUpdate], state: State
    ) -> tuple[Weights, State]:
        return self.inner.aggregate_round(global_weights, updates, state)

    def client_settings(self) -> dict[str, Any]:
        return self.inner.client_settings()

    def weight_sum(self, updates: Sequence[ClientUpdate]) -> float | None:
        return self.inner.weight_sum(updates)

    def broadcast(self, state: State) -> dict[str, Weights]:
        return self.inner.broadcast(state)


def wrapped(strategy: Strategy) -> StrategyWrapper:
    """``strategy`` as a wrapper (a plain strategy in the no-op one)."""
    return (
        strategy if isinstance(strategy, StrategyWrapper) else StrategyWrapper(strategy)
    )

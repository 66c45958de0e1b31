"""Rounds in memory: :func:`run_federation`, the one federation loop that a
script, a benchmark or a test runs without the pipeline's files.

Each round is :func:`fedpipe.federation.round.run_round`, the function the round
stage calls; what it hands the next round (weights, server state, client
states) stays in memory (:func:`next_round`), where the stage reads it back from
round K-1's files. After each round every callback's ``after_round`` sees its
outputs; one that returns True stops the federation there (pfl-research's
``FederatedAlgorithm.run`` does the same with ``after_central_iteration``)::

    times = RoundTimes()
    last = run_federation(
        first_round(params, spec=spec, data=data),
        rounds=params.federation.rounds,
        map_clients=run_here(runner),
        runner=runner,
        callbacks=[times],
    )
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from fedpipe.config.params import Params
from fedpipe.data.splits import FederatedData
from fedpipe.federation.build import round_inputs, strategy_for
from fedpipe.federation.round import RoundInputs, RoundOutputs, run_round
from fedpipe.model.jobs import MapClients
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.strategy.aggregate import Weights


class Callback(Protocol):
    """What sees each round's outputs as the round ends."""

    def after_round(self, out: RoundOutputs) -> bool | None:
        """Called after every round; True stops the federation after it."""


@dataclass(frozen=True)
class OnRound:
    """A callback made of a function of each round's outputs (what it returns:
    as ``after_round``)."""

    fn: Callable[[RoundOutputs], bool | None]

    def after_round(self, out: RoundOutputs) -> bool | None:
        return self.fn(out)


@dataclass
class RoundTimes:
    """A callback that keeps ``time.perf_counter()`` at its creation
    (``start``) and at the end of each round (``ends``), in seconds."""

    start: float = field(default_factory=time.perf_counter)
    ends: list[float] = field(default_factory=list)

    def after_round(self, out: RoundOutputs) -> None:
        self.ends.append(time.perf_counter())

    def seconds(self) -> list[float]:
        """Each round's wall seconds (the first from ``start``)."""
        stamps = [self.start, *self.ends]
        return [b - a for a, b in zip(stamps, stamps[1:], strict=False)]


def next_round(inputs: RoundInputs, out: RoundOutputs) -> RoundInputs:
    """The next round's inputs: ``inputs`` one round on, from the state ``out``
    left (as the round stage reads it from round K-1's files)."""
    return replace(
        inputs,
        round=inputs.round + 1,
        global_weights=out.weights,
        server_state=out.server_state,
        client_states=out.client_states,
    )


def run_federation(
    inputs: RoundInputs,
    *,
    rounds: int,
    map_clients: MapClients,
    runner: ModelRunner,
    callbacks: Sequence[Callback] = (),
) -> RoundOutputs:
    """``rounds`` rounds from ``inputs`` (round ``inputs.round`` first), each
    :func:`~fedpipe.federation.round.run_round` with ``map_clients`` running
    the clients' jobs and ``runner`` evaluating here; stops early after a round
    for which a callback returns True. Returns the last round's outputs; raises
    what ``run_round`` raises (a round short of clients, a refused aggregation,
    a spent privacy budget)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    last = inputs.round + rounds - 1
    while True:
        out = run_round(inputs, map_clients=map_clients, runner=runner)
        stops = [bool(c.after_round(out)) for c in callbacks]  # each sees it
        if any(stops) or inputs.round == last:
            return out
        inputs = next_round(inputs, out)


def first_round(
    params: Params,
    *,
    spec: ModelSpec,
    data: FederatedData,
    key: bytes | None = None,
    weights: Weights | None = None,
) -> RoundInputs:
    """Round 1's inputs from ``params``
    (:func:`~fedpipe.federation.build.round_inputs`), from ``weights`` (default:
    the seeded initial model, as the ``init`` stage writes it) and the
    strategy's initial state. ``key``: the project's secret
    key when :func:`~fedpipe.federation.build.needs_key`."""
    weights = initial_weights(spec, params.seed) if weights is None else weights
    return round_inputs(
        params,
        round_=1,
        spec=spec,
        data=data,
        weights=weights,
        server_state=strategy_for(params).init_state(weights),
        client_states={},
        key=key,
    )

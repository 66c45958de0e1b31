"""Rounds in memory: :func:`run_rounds`, the federation a script or a benchmark
runs without the pipeline's files.

Each round is assembled by :func:`fedpipe.federation.build.round_inputs` (as the
round stage assembles it from round K-1's files) and run by
:func:`fedpipe.federation.round.run_round`; the state it hands the next round
(weights, server state, client states) stays in memory. A generator: the caller
reads each round's outputs as it ends and stops when it has seen enough::

    for out in run_rounds(params, spec=spec, data=data, runner=runner,
                          map_clients=run_here(runner), key=key):
        print(out.record.summary()["global"])
"""

from __future__ import annotations

from collections.abc import Iterator

from fedpipe.config.params import Params
from fedpipe.data.splits import FederatedData
from fedpipe.federation.build import round_inputs, strategy_for
from fedpipe.federation.round import RoundOutputs, run_round
from fedpipe.model.jobs import MapClients
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.strategy.aggregate import Weights


def run_rounds(
    params: Params,
    *,
    spec: ModelSpec,
    data: FederatedData,
    runner: ModelRunner,
    map_clients: MapClients,
    key: bytes | None = None,
    rounds: int | None = None,
    weights: Weights | None = None,
) -> Iterator[RoundOutputs]:
    """Rounds 1..``rounds`` (``federation.rounds``) of ``params``' federation on
    ``data``, from ``weights`` (the seeded initial model, as the ``init`` stage
    writes it); each round's outputs as it ends. Raises what
    :func:`~fedpipe.federation.round.run_round` raises (a round short of
    clients, a refused aggregation, a spent privacy budget). ``key``: the
    project's secret key when :func:`~fedpipe.federation.build.needs_key`."""
    weights = initial_weights(spec, params.seed) if weights is None else weights
    state = strategy_for(params).init_state(weights)
    client_states: dict = {}
    for k in range(1, (rounds or params.federation.rounds) + 1):
        inputs = round_inputs(
            params,
            round_=k,
            spec=spec,
            data=data,
            weights=weights,
            server_state=state,
            client_states=client_states,
            key=key,
        )
        out = run_round(inputs, map_clients=map_clients, runner=runner)
        yield out
        weights, state = out.weights, out.server_state
        client_states = out.client_states

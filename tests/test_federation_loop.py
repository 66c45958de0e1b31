"""The one federation loop (fedpipe.federation.loop): round after round of
run_round, the state each round hands the next, callbacks that see every round
and may stop it. A tiny MLP on 6 clients' random rows (helpers_fl)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers_fl import random_federation, runner_for

from fedpipe.config.params import Params, parse_params, round_chain
from fedpipe.data.splits import FederatedData
from fedpipe.federation.build import round_inputs
from fedpipe.federation.loop import (
    OnRound,
    RoundTimes,
    first_round,
    next_round,
    run_federation,
)
from fedpipe.federation.round import RoundOutputs, run_round
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner, ModelSpec

CLIENTS = 6
SPEC = ModelSpec("mlp", (6,), 3, "sgd", 0.05)


def runner() -> ModelRunner:
    return runner_for(SPEC)


def _data() -> FederatedData:
    return random_federation(CLIENTS)


def _params(rounds: int = 3) -> Params:
    # fedavgm: a server state (momentum) that each round hands the next;
    # 4 of 6 clients a round: the sample changes with the round
    return parse_params(
        {
            "seed": 5,
            "round_chain": round_chain(rounds),
            "federation": {"clients": CLIENTS, "rounds": rounds, "fraction_fit": 4 / 6},
            "model": {"name": "mlp"},
            "train": {"batch_size": 8, "lr": 0.05},
            "strategy": {"name": "fedavgm"},
        }
    )


def _bits(out: RoundOutputs) -> list[bytes]:
    return [w.tobytes() for w in out.weights]


class Seen:
    """A callback keeping the rounds it saw; True (stop) after ``stop_at``."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.rounds: list[int] = []
        self.stop_at = stop_at

    def after_round(self, out: RoundOutputs) -> bool:
        self.rounds.append(out.record.round)
        return out.record.round == self.stop_at


def test_the_loop_is_run_round_round_after_round_with_the_state_carried() -> None:
    params, data = _params(), _data()
    inputs = first_round(params, spec=SPEC, data=data)
    by_hand = []
    for _ in range(3):
        out = run_round(inputs, map_clients=run_here(runner()), runner=runner())
        by_hand.append(_bits(out))
        inputs = replace(
            inputs,
            round=inputs.round + 1,
            global_weights=out.weights,
            server_state=out.server_state,
            client_states=out.client_states,
        )
    seen: list[list[bytes]] = []
    last = run_federation(
        first_round(params, spec=SPEC, data=data),
        rounds=3,
        map_clients=run_here(runner()),
        runner=runner(),
        callbacks=[OnRound(lambda out: seen.append(_bits(out)))],
    )
    assert seen == by_hand
    assert _bits(last) == by_hand[-1] and last.record.round == 3


def test_the_next_round_in_memory_is_the_round_the_stage_builds_from_files() -> None:
    # the round stage rebuilds round K from params and round K-1's state
    # (round_inputs); the loop carries round 1's inputs on (next_round)
    params, data = _params(), _data()
    first = first_round(params, spec=SPEC, data=data)
    out = run_round(first, map_clients=run_here(runner()), runner=runner())
    rebuilt = round_inputs(
        params,
        round_=2,
        spec=SPEC,
        data=data,
        weights=out.weights,
        server_state=out.server_state,
        client_states=out.client_states,
        key=None,
    )
    carried = next_round(first, out)
    assert carried.round == 2 and carried.sampled(2) == rebuilt.sampled(2)
    a = run_round(carried, map_clients=run_here(runner()), runner=runner())
    b = run_round(rebuilt, map_clients=run_here(runner()), runner=runner())
    assert _bits(a) == _bits(b)
    assert a.record.summary() == b.record.summary()


def test_a_callback_that_returns_true_stops_after_that_round() -> None:
    stopper, watcher = Seen(stop_at=2), Seen()
    last = run_federation(
        first_round(_params(rounds=5), spec=SPEC, data=_data()),
        rounds=5,
        map_clients=run_here(runner()),
        runner=runner(),
        callbacks=[stopper, watcher],
    )
    assert last.record.round == 2
    assert stopper.rounds == watcher.rounds == [1, 2]  # every callback saw round 2


def test_without_a_stop_every_round_runs_and_each_is_timed() -> None:
    times, seen = RoundTimes(), Seen()
    run_federation(
        first_round(_params(), spec=SPEC, data=_data()),
        rounds=3,
        map_clients=run_here(runner()),
        runner=runner(),
        callbacks=[times, seen],
    )
    assert seen.rounds == [1, 2, 3]
    assert len(times.ends) == 3 and len(times.seconds()) == 3
    assert times.start <= times.ends[0] <= times.ends[1] <= times.ends[2]


def test_no_rounds_is_refused() -> None:
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        run_federation(
            first_round(_params(), spec=SPEC, data=_data()),
            rounds=0,
            map_clients=run_here(runner()),
            runner=runner(),
        )

"""A round rehearsed while a run starts (fedpipe.federation.round.rehearse,
orchestration.runtime.rehearsing): the models' steps traced ahead, the round's
bits untouched, the models the rehearsal's alone until it ends."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from fedpipe.client import make_client
from fedpipe.client.base import LocalTraining
from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import ClientData, FederatedData
from fedpipe.federation.faults import PlantedFaults
from fedpipe.federation.round import ClientEvaluation, RoundInputs, rehearse, run_round
from fedpipe.model.threads import threaded_map
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.strategy import make_strategy
from orchestration import runtime

SPEC = ModelSpec("mlp", (6,), 3, "sgd", 0.1)


def _inputs(planted: PlantedFaults = PlantedFaults()) -> RoundInputs:
    rng = np.random.default_rng(0)

    def split(n: int) -> tuple[np.ndarray, np.ndarray]:
        return rng.normal(size=(n, 6)).astype(np.float32), rng.integers(0, 3, n)

    clients = []
    for c, n in enumerate((12, 7, 19, 12, 30)):  # uneven: more than one shape
        (x_tr, y_tr), (x_te, y_te) = split(n), split(4)
        clients.append(ClientData(c, x_tr, y_tr, x_te, y_te))
    x, y = split(25)
    spec = DatasetSpec("random", (0, 1, 2), (6,), (-5.0, 5.0), 1.0, 25)
    data = FederatedData(spec, x, y, tuple(clients))
    strategy = make_strategy("fedavg", total_clients=len(clients))
    weights = initial_weights(SPEC, 3)
    return RoundInputs(
        round=1,
        seed=3,
        spec=SPEC,
        data=data,
        global_weights=weights,
        server_state=strategy.init_state(weights),
        client_states={},
        strategy=strategy,
        algorithm=make_client(strategy.client_algorithm),
        training=LocalTraining(1, 4, 0.1),
        clients_per_round=3,
        evaluation=ClientEvaluation("all", rounds=2),
        planted=planted,
    )


def _round(runners: list[ModelRunner]):  # type: ignore[no-untyped-def]
    runners[0].helpers = runners[1:]
    out = run_round(_inputs(), map_clients=threaded_map(runners), runner=runners[0])
    return out.weights, out.record.summary(), out.record.client_table()


def test_a_rehearsed_round_has_the_bits_of_one_that_was_not() -> None:
    fresh = [ModelRunner(SPEC), ModelRunner(SPEC)]
    expected = _round(fresh)
    rehearsed = [ModelRunner(SPEC), ModelRunner(SPEC)]
    rehearsed[0].helpers = rehearsed[1:]
    rehearse(_inputs(), rehearsed)
    assert rehearsed[0]._steps and rehearsed[1]._steps  # both traced a step
    weights, summary, table = _round(rehearsed)
    assert all(np.array_equal(a, b) for a, b in zip(expected[0], weights, strict=True))
    assert summary == expected[1]
    assert table.equals(expected[2])


def test_a_rehearsal_leaves_planted_faults_out_and_stops_when_told() -> None:
    failing = PlantedFaults(failing=frozenset(range(5)))
    runner = ModelRunner(SPEC)
    rehearse(_inputs(failing), [runner])  # the job would raise with the fault
    assert runner._steps
    stop = threading.Event()
    stop.set()
    idle = ModelRunner(SPEC)
    rehearse(_inputs(), [idle], stop=stop)
    assert not idle._steps


@pytest.fixture
def clean_cache():  # type: ignore[no-untyped-def]
    yield
    with runtime._lock:
        runtime._runners.pop(SPEC, None)
        runtime._spares.pop(SPEC, None)


def test_a_model_asked_for_during_a_rehearsal_waits_for_its_end(clean_cache) -> None:
    events: list[str] = []
    started = threading.Event()

    def rehearse_round(stop: threading.Event) -> None:
        runtime.runner_for(SPEC)  # its own calls do not wait for itself
        started.set()
        time.sleep(0.3)
        events.append("rehearsal ended")

    with runtime.rehearsing(rehearse_round):
        assert started.wait(10)
        runtime.runner_for(SPEC)
        events.append("runner handed out")
    assert events == ["rehearsal ended", "runner handed out"]


def test_what_a_rehearsal_raises_is_dropped_and_drop_stops_it() -> None:
    seen: list[bool] = []

    def broken(stop: threading.Event) -> None:
        raise ValueError("the round will say this itself")

    with runtime.rehearsing(broken):
        pass  # no error here
    with runtime.rehearsing(lambda stop: seen.append(stop.wait(10))) as rehearsal:
        rehearsal.drop()
    assert seen == [True]
    with runtime.rehearsing(None) as nothing:
        nothing.drop()  # nothing to rehearse: a no-op
    assert runtime._rehearsal is None

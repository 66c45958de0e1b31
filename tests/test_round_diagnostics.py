"""A round's diagnostics (fedpipe.federation.diagnostics): callbacks that see
the finished round and make its health record; run_round calls the list it is
given. A tiny MLP on 6 clients' random rows (helpers_fl)."""

from __future__ import annotations

from typing import Any

from helpers_fl import random_federation, runner_for

from fedpipe.config.params import Params, parse_params, round_chain
from fedpipe.federation.diagnostics import (
    ROUND_DIAGNOSTICS,
    DeadUnits,
    FinishedRound,
    StepNotes,
    UpdateHealth,
)
from fedpipe.federation.loop import first_round
from fedpipe.federation.round import RoundInputs, run_round
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner, ModelSpec

SPEC = ModelSpec("mlp", (6,), 3, "sgd", 0.05)


def _params() -> Params:
    return parse_params(
        {
            "seed": 5,
            "round_chain": round_chain(1),
            "federation": {"clients": 6, "rounds": 1, "fraction_fit": 4 / 6},
            "model": {"name": "mlp"},
            "train": {"batch_size": 8, "lr": 0.05},
        }
    )


def _round() -> tuple[RoundInputs, ModelRunner]:
    inputs = first_round(_params(), spec=SPEC, data=random_federation(6))
    return inputs, runner_for(SPEC)


class Seen:
    """A diagnostic that keeps the finished round it saw and adds one key."""

    def __init__(self) -> None:
        self.finished: FinishedRound | None = None

    def __call__(self, finished: FinishedRound, health: dict[str, Any]) -> dict:
        self.finished = finished
        return {**health, "seen": True}


def test_the_default_diagnostics_make_the_health_record() -> None:
    assert [type(d) for d in ROUND_DIAGNOSTICS] == [UpdateHealth, DeadUnits, StepNotes]
    inputs, runner = _round()
    out = run_round(inputs, map_clients=run_here(runner), runner=runner)
    assert {"round", "clients", "layers", "aggregation", "global", "gap"} <= set(
        out.health
    )
    assert "seconds" not in out.health
    # fedavg's weights sum to 1, a setting the doctor knows: no expected sum
    assert "expected_weight_sum" not in out.health["aggregation"]
    assert "dead_units" in out.health  # the MLP has ReLU layers


def test_run_round_calls_the_diagnostics_it_is_given() -> None:
    inputs, runner = _round()
    seen = Seen()
    out = run_round(
        inputs, map_clients=run_here(runner), runner=runner, diagnostics=[seen]
    )
    assert out.health == {"seen": True}
    finished = seen.finished
    assert finished is not None and finished.completed
    assert finished.record is out.record
    assert [w.tobytes() for w in finished.weights] == [w.tobytes() for w in out.weights]
    assert [r.client for r in finished.results] == out.record.selected


def test_an_unfinished_round_has_no_dead_units_or_expected_sum() -> None:
    inputs, runner = _round()
    unfinished = FinishedRound(inputs, runner, [], {})
    assert DeadUnits()(unfinished, {"round": 1}) == {"round": 1}
    assert StepNotes()(unfinished, {"round": 1}) == {"round": 1}

"""The round's step budget holds for every client algorithm, all its fits together.

``federation.round_deadline_steps`` gives each client a budget of local optimizer
steps per round (``LocalTraining.round_steps``). Ditto fits twice per round; each
fit used to be capped on its own, so a budget of 3 let a Ditto client take 6
steps. Here every registered client algorithm, under every personalization method
(both lists read from fedpipe, so a new one is covered by itself), runs one round
with a budget of 3 on a model whose optimizer counts its real steps.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedpipe.client import CLIENT_ALGORITHMS, ClientTask, LocalTraining, make_client
from fedpipe.config.params import (
    DITTO_FITS,
    PERSONALIZATION_METHODS,
    ParamsError,
    parse_params,
    round_chain,
)
from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import ClientData, FederatedData
from fedpipe.federation.failures import FailurePolicy, steps_needed
from fedpipe.federation.personalization import Personalization
from fedpipe.federation.round import ClientsLost, RoundInputs, run_round
from fedpipe.model.cohort import train_cohort
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.model.trainer import run_client, run_here
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.strategy import make_strategy
from fedpipe.strategy.scaffold import SERVER_CONTROL

N, D, BATCH, EPOCHS = 40, 3, 8, 2  # 5 batches x 2 epochs: 10 steps a fit
BUDGET = 3
SPEC = ModelSpec(
    name=f"{Path(__file__).parent / 'tiny_models.py'}:logistic",
    input_shape=(D,),
    n_classes=2,
    optimizer="sgd",
    lr=0.1,
)
TRAINING = LocalTraining(EPOCHS, BATCH, SPEC.lr)
COMBINATIONS = [
    (a, m) for a in sorted(CLIENT_ALGORITHMS) for m in PERSONALIZATION_METHODS
]


class CountingRunner(ModelRunner):
    """A runner that adds up its optimizer's steps (``iterations``) after every
    fit (each fit starts the optimizer afresh): the real optimizer steps taken."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__(spec)
        self.optimizer_steps = 0

    def fit(self, *args, **kwargs) -> list[np.ndarray]:
        out = super().fit(*args, **kwargs)
        self.optimizer_steps += self.iterations
        return out


@pytest.fixture(scope="module")
def runner() -> CountingRunner:
    return CountingRunner(SPEC)


def _data(client: int = 0) -> ClientData:
    rng = np.random.default_rng(10 + client)
    x = rng.normal(size=(N, D)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return ClientData(client, x, y, x[:6], y[:6])


def _algorithm(name: str, method: str):
    # which positions stay local does not matter for the step count
    personal = (1,) if method in ("fedper", "fedbn") else ()
    return Personalization(method=method, personal=personal).wrap(make_client(name))


def _job(name: str, method: str, training: LocalTraining, client: int = 0):
    start = initial_weights(SPEC, 0)
    task = ClientTask(
        client=client,
        round=2,
        global_weights=start,
        broadcast={SERVER_CONTROL: [np.zeros_like(w) for w in start]},
        seed=7,
    )
    return ClientJob(SPEC, _algorithm(name, method), task, _data(client), training)


def _steps(runner: CountingRunner, job: ClientJob) -> tuple[int, ClientResult]:
    before = runner.optimizer_steps
    result = run_client(job, runner)
    assert isinstance(result, ClientResult)
    return runner.optimizer_steps - before, result


@pytest.mark.parametrize(("name", "method"), COMBINATIONS)
def test_every_algorithm_keeps_to_the_round_budget(
    runner: CountingRunner, name: str, method: str
) -> None:
    budgeted = replace(TRAINING, round_steps=BUDGET)
    taken, result = _steps(runner, _job(name, method, budgeted))
    assert taken <= BUDGET
    assert taken == BUDGET  # each needs 10 or more: the budget binds
    assert result.update.steps is not None and result.update.steps <= BUDGET


@pytest.mark.parametrize(("name", "method"), COMBINATIONS)
def test_fits_per_round_says_what_a_round_takes(
    runner: CountingRunner, name: str, method: str
) -> None:
    """Without a budget a round takes what the deadline plan expects of it
    (``steps_needed`` x the algorithm's ``fits_per_round``): Ditto 20, others 10."""
    job = _job(name, method, TRAINING)
    taken, result = _steps(runner, job)
    assert taken == steps_needed(N, TRAINING, job.algorithm.fits_per_round)
    # the update reports the steps of the weights it sends (Ditto: the first fit)
    assert result.update.steps == steps_needed(N, TRAINING)


@pytest.mark.parametrize(("name", "method"), COMBINATIONS)
def test_a_vectorized_cohort_keeps_the_budget_too(
    runner: CountingRunner, name: str, method: str
) -> None:
    budgeted = replace(TRAINING, round_steps=BUDGET)
    jobs = [_job(name, method, budgeted, client=c) for c in (0, 1)]
    alone = [run_client(job, runner) for job in jobs]
    together = train_cohort(jobs, runner)
    for a, b in zip(alone, together, strict=True):
        assert isinstance(b, ClientResult) and b.update.steps == a.update.steps
        for x, y in zip(a.update.weights, b.update.weights, strict=True):
            np.testing.assert_allclose(x, y, atol=1e-6, rtol=1e-5)
        for space, arrays in a.state.items():
            for key, value in arrays.items():
                np.testing.assert_allclose(
                    value, b.state[space][key], atol=1e-6, rtol=1e-5
                )


def _round(runner: ModelRunner, method: str, policy: FailurePolicy):
    spec = DatasetSpec("random", (0, 1), (D,), (-5.0, 5.0), 1.0, 100)
    clients = (_data(0), _data(1))
    strategy = make_strategy("fedavg")
    start = initial_weights(SPEC, 0)
    inputs = RoundInputs(
        round=1,
        seed=3,
        spec=SPEC,
        data=FederatedData(spec, clients[0].x_test, clients[0].y_test, clients),
        global_weights=start,
        server_state=strategy.init_state(start),
        client_states={},
        strategy=strategy,
        algorithm=_algorithm("sgd", method),
        training=replace(TRAINING, epochs=1),  # 5 steps a fit
        clients_per_round=2,
        failures=policy,
    )
    return run_round(inputs, map_clients=run_here(runner), runner=runner)


def test_ditto_is_a_straggler_where_one_fit_would_not_be(
    runner: CountingRunner,
) -> None:
    deadline = FailurePolicy(round_deadline_steps=8)  # one fit 5, Ditto's two 10
    assert _round(runner, "none", deadline).record.partial == {}
    before = runner.optimizer_steps
    ditto = _round(runner, "ditto", deadline)
    assert ditto.record.partial == {0: 8, 1: 8}
    assert runner.optimizer_steps - before == 2 * 8  # both clients, all fits
    with pytest.raises(ClientsLost, match=r"client 0 \(straggler\)"):
        _round(runner, "ditto", replace(deadline, stragglers="drop"))


def test_a_deadline_below_one_fit_still_trains_the_personal_model(
    runner: CountingRunner,
) -> None:
    """The budget is shared among the round's fits: with 4 steps a round and
    fits of 5, the global update takes 2 and Ditto's personal fit 2. (It used
    to be first come: the global fit took all 4 and the personal model stayed
    the global start every round, at chance.)"""
    start = initial_weights(SPEC, 0)
    before = runner.optimizer_steps
    out = _round(runner, "ditto", FailurePolicy(round_deadline_steps=4))
    assert runner.optimizer_steps - before == 2 * 4  # the budget still holds
    for c in (0, 1):
        assert out.record.partial[c] == 4
        kept = out.client_states[c]["ditto"]
        personal = [kept[k] for k in sorted(kept)]
        assert len(personal) == len(start)
        moved = max(
            float(np.abs(p - w).max()) for p, w in zip(personal, start, strict=True)
        )
        assert moved > 1e-3, f"client {c}'s personal model did not train"


def test_the_budget_is_shared_among_the_fits(runner: CountingRunner) -> None:
    """Each fit takes at most ceil(left / fits left): 4 of 2 fits -> 2 + 2,
    3 -> 2 + 1; the update sends the global fit's steps."""
    for budget, first in ((4, 2), (3, 2), (7, 4)):
        training = replace(TRAINING, round_steps=budget, round_fits=2)
        taken, result = _steps(runner, _job("sgd", "ditto", training))
        assert (taken, result.update.steps) == (budget, first)


@pytest.mark.parametrize(
    ("federation", "steps"),
    [
        ({"round_deadline_steps": 1}, "gives 1 step,"),
        (
            {"round_deadline_steps": 3, "slow_clients": 0.5, "slow_speed": 0.5},
            "gives 1 step (a slow client's share",
        ),
    ],
)
def test_a_budget_below_one_step_a_fit_is_refused_before_any_stage(
    federation: dict, steps: str
) -> None:
    raw = {
        "federation": {"clients": 4, "rounds": 1, **federation},
        "round_chain": round_chain(1),
        "personalization": {"method": "ditto"},
    }
    with pytest.raises(ParamsError) as caught:
        parse_params(raw)
    message = str(caught.value)
    assert "\n" not in message and steps in message
    assert "personalization.method=ditto" in message
    assert "federation.round_deadline_steps" in message
    raw["federation"]["round_deadline_steps"] = 2 if len(federation) == 1 else 4
    parse_params(raw)  # one step a fit: accepted
    # the rule's count is Ditto's own around every built-in client algorithm
    for name in CLIENT_ALGORITHMS:
        assert _algorithm(name, "ditto").fits_per_round == DITTO_FITS

"""The round wraps, it does not branch: run_round knows no privacy, attack or
fault, and each wrapper or step does what the round's own branch did."""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

import numpy as np
import pytest

from fedpipe.client import make_client
from fedpipe.client.base import ClientTask, LocalTraining
from fedpipe.client.personal import FedPer
from fedpipe.config.privacy import Privacy
from fedpipe.data.splits import ClientData
from fedpipe.federation import round as round_module
from fedpipe.federation.attacks import (
    AttackPlan,
    AttackStep,
    make_attack,
    tampered_results,
)
from fedpipe.federation.build import private_strategy, round_steps
from fedpipe.federation.faults import (
    FaultyClient,
    MisweightedAggregation,
    PlantedFaults,
    misweighted_aggregate,
)
from fedpipe.federation.personalization import KeptLayers
from fedpipe.federation.privacy.accountant import PrivacyBudgetExceeded
from fedpipe.federation.privacy.mechanism import clip_to_norm
from fedpipe.federation.privacy.rounds import PrivateStrategy, aggregate_round
from fedpipe.federation.round import RoundInputs
from fedpipe.federation.steps import RoundStep, StrategyWrapper, wrapped
from fedpipe.model.jobs import ClientJob
from fedpipe.model.training import ModelSpec
from fedpipe.strategy import ClientUpdate, make_strategy
from fedpipe.strategy.clipping import clipped

BEFORE = [np.zeros((2, 2), dtype=np.float32), np.zeros(3, dtype=np.float32)]
KEY = bytes(32)  # a secret key of DP noise (any 32 bytes)
UPDATES = [
    ClientUpdate(
        c, [np.full((2, 2), 0.5 * c, np.float32), np.full(3, -c, np.float32)], 10 + c
    )
    for c in range(1, 5)
]


def _privacy(**kw: object) -> Privacy:
    settings: dict = dict(
        mechanism="central", clip_norm=1.0, noise_multiplier=0.7, delta=1e-5,
        n_clients=10, per_round=4,
    )  # fmt: skip
    settings.update(kw)
    return Privacy(**settings)


def _job(data: ClientData, *, client: int = 0, n_classes: int = 2) -> ClientJob:
    """A client's job (what a step's :meth:`client_job` sees) on ``data``."""
    spec = ModelSpec("mlp", (1,), n_classes, "sgd", 0.1)
    task = ClientTask(client=client, round=1, global_weights=BEFORE)
    return ClientJob(spec, make_client("sgd"), task, data, LocalTraining(1, 2, 0.1))


def _inputs(**kw: object) -> RoundInputs:
    """A round's inputs with no data (what :meth:`RoundInputs.round_steps` reads)."""
    settings: dict = dict(
        round=1, seed=0, spec=ModelSpec("mlp", (1,), 2, "sgd", 0.1), data=None,
        global_weights=BEFORE, server_state={}, client_states={},
        strategy=make_strategy("fedavg"), algorithm=make_client("sgd"),
        training=LocalTraining(1, 2, 0.1), clients_per_round=1,
    )  # fmt: skip
    settings.update(kw)
    return RoundInputs(**settings)


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return all(
        x.dtype == y.dtype and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True)
    )


# ---------------------------------------------------------------- the round


def test_run_round_is_short_and_names_no_feature() -> None:
    source = textwrap.dedent(inspect.getsource(round_module.run_round))
    assert len(source.splitlines()) <= 60
    names = {
        node.attr
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
    } | {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    for banned in ("privacy", "attack", "weight_sum_fault", "frozen", "dp"):
        assert banned not in names
    inputs = {f.name for f in round_module.RoundInputs.__dataclass_fields__.values()}
    assert not inputs & {"privacy", "attack", "weight_sum_fault"}


def test_a_step_does_nothing_by_default() -> None:
    step = RoundStep()
    job = _job(ClientData(0, np.zeros((2, 1)), np.zeros(2), np.zeros((1, 1)),
                          np.zeros(1)))  # fmt: skip
    assert step.start(1, lambda k: [0]) is step
    assert step.client_job(1, job) is job
    assert step.after_aggregate(BEFORE, BEFORE) is BEFORE
    assert step.record({"round": 1}) == {"round": 1}


# ---------------------------------------------------------------- strategy wrappers


def test_a_plain_wrapper_is_the_strategy() -> None:
    inner = make_strategy("fedavgm", server_lr=0.5, server_momentum=0.9)
    outer = wrapped(inner)
    assert wrapped(outer) is outer and isinstance(outer, StrategyWrapper)
    assert outer.name == inner.name and outer.linear == inner.linear
    assert outer.client_algorithm == inner.client_algorithm
    state = outer.init_state(BEFORE)
    assert state.keys() == inner.init_state(BEFORE).keys()
    got, got_state = outer.aggregate_round(BEFORE, UPDATES, state)
    want, want_state = inner.aggregate_round(BEFORE, UPDATES, state)
    assert _same(got, want) and _same(
        list(got_state.values()), list(want_state.values())
    )


@pytest.mark.parametrize("mechanism", ["central", "local"])
def test_the_private_strategy_aggregates_and_records_as_the_branch(
    mechanism: str,
) -> None:
    privacy = _privacy(mechanism=mechanism)
    inner = make_strategy("fedavg")
    server = private_strategy(inner, privacy, seed=3, key=KEY)
    assert isinstance(server, PrivateStrategy)
    assert private_strategy(inner, None, seed=3, key=None) is inner
    bound = server.start(2, lambda k: [1, 2, 3, 4])
    got, state = bound.aggregate_round(BEFORE, UPDATES, {})
    # local DP's server holds no key: the clients noised their own updates
    server_key = None if mechanism == "local" else KEY
    want, want_state, report = aggregate_round(
        privacy, inner, BEFORE, UPDATES, {}, seed=3, round_=2, key=server_key
    )
    assert _same(got, want) and state == want_state
    record = bound.record({"round": 2})
    assert record["privacy"]["epsilon"] > 0 and record["round"] == 2
    assert {k: record["privacy"][k] for k in report} == report


def test_the_private_strategy_checks_the_budget_before_the_round() -> None:
    server = private_strategy(
        make_strategy("fedavg"), _privacy(target_epsilon=1e-3), seed=0, key=KEY
    )
    with pytest.raises(PrivacyBudgetExceeded):
        server.start(1, lambda k: [0, 1, 2, 3])  # type: ignore[union-attr]


# ---------------------------------------------------------------- steps


def test_the_weight_sum_fault_scales_like_misweighted_aggregate() -> None:
    (step,) = round_steps(weight_sum_fault=1.8)
    assert isinstance(step, MisweightedAggregation)
    after = [np.full((2, 2), 0.25, np.float32), np.arange(3, dtype=np.int64)]
    assert _same(
        step.after_aggregate(BEFORE, after),
        misweighted_aggregate(BEFORE, after, 1.8),
    )
    assert step.record({"aggregation_weight_sum": 1.0}) == {
        "aggregation_weight_sum": 1.8
    }


@dataclass(frozen=True)
class _Result:
    update: ClientUpdate

    @property
    def client(self) -> int:
        return self.update.client


def test_the_attack_step_forges_poisons_and_names_as_the_branch() -> None:
    plan = AttackPlan(make_attack("sign_flip"), (2, 4), from_round=2, seed=1)
    (step,) = round_steps(attack=plan)
    assert isinstance(step, AttackStep)
    results = [_Result(u) for u in UPDATES]
    got = step.on_results(2, BEFORE, results)
    want = tampered_results(plan, 2, BEFORE, results)
    assert all(
        _same(g.update.weights, w.update.weights)
        for g, w in zip(got, want, strict=True)
    )
    assert step.on_results(1, BEFORE, results) == results  # before from_round
    assert step.record({"round": 2, "selected": [1, 2, 3]})["malicious"] == [2]
    assert step.health(2, [2, 4], {"round": 2})["malicious"] == [2, 4]
    flip = AttackStep(AttackPlan(make_attack("label_flip_all"), (0,)))
    data = ClientData(0, np.zeros((3, 1)), np.array([0, 1, 2]), np.zeros((1, 1)),
                      np.zeros(1))  # fmt: skip
    poisoned = flip.client_job(1, _job(data, n_classes=3)).data
    assert poisoned.y_train.tolist() == flip.plan.poisoned(1, data, 3).y_train.tolist()
    assert poisoned.y_train.tolist() != [0, 1, 2]


# ---------------------------------------------------------------- personal layers


def test_kept_personal_layers_hold_their_global_values() -> None:
    algorithm = FedPer(make_client("sgd"), positions=(1,))
    after = [np.ones((2, 2), np.float32), np.ones(3, np.float32)]
    kept = KeptLayers(algorithm).after_aggregate(BEFORE, after)
    assert kept[0] is after[0] and kept[1] is BEFORE[1]
    plain = make_client("sgd")
    assert KeptLayers(plain).after_aggregate(BEFORE, after) is after


def test_the_round_s_steps_are_the_faults_the_kept_layers_then_the_run_s() -> None:
    fault = MisweightedAggregation(1.5)
    inputs = _inputs(
        algorithm=FedPer(make_client("sgd"), positions=(1,)), steps=(fault,)
    )
    planted, kept, last = inputs.round_steps()
    assert planted is inputs.planted and last is fault
    assert isinstance(kept, KeptLayers) and kept.algorithm is inputs.algorithm


# ---------------------------------------------------------------- planted faults


def test_a_planted_client_s_job_fails_as_planted() -> None:
    faults = PlantedFaults(failing=frozenset({0}), nonfinite=frozenset({1}),
                           from_round=2)  # fmt: skip
    data = ClientData(0, np.zeros((2, 1)), np.zeros(2), np.zeros((1, 1)), np.zeros(1))
    job = _job(data)
    assert faults.client_job(1, job) is job  # before from_round
    failing = faults.client_job(2, job).algorithm
    assert isinstance(failing, FaultyClient) and failing.fault == "raise"
    assert failing.inner is job.algorithm
    nonfinite = faults.client_job(2, _job(data, client=1)).algorithm
    assert isinstance(nonfinite, FaultyClient) and nonfinite.fault == "nonfinite"
    other = _job(data, client=2)
    assert faults.client_job(2, other) is other


# ---------------------------------------------------------------- one clipping


def test_one_l2_clipping_for_the_strategy_and_the_mechanism() -> None:
    delta = [np.full((2, 2), 3.0), np.full(3, 4.0)]
    by_mechanism, norm = clip_to_norm(delta, 2.0)
    assert _same(by_mechanism, clipped(delta, 2.0))
    assert norm == pytest.approx(np.sqrt(4 * 9 + 3 * 16))

"""Failures a round survives (fedpipe.federation.failures, fedpipe.federation.faults),
through run_round.

Every round here is the library's own :func:`fedpipe.federation.round.run_round` on a
tiny MLP and a few hundred random rows (10 clients): clients that drop out, raise,
send NaN or miss the round's step deadline are left out and named; too few
usable updates stop the round with one line.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from helpers_fl import random_federation, run_federation

from fedpipe.client import LocalTraining, make_client
from fedpipe.config import layout
from fedpipe.config.params import ParamsError, parse_params, round_chain
from fedpipe.data.splits import ClientData, FederatedData
from fedpipe.federation.failures import (
    FailurePolicy,
    dropped_out,
    excluded_counts,
    plan_round,
    slow_set,
    steps_needed,
)
from fedpipe.federation.faults import PlantedFaults
from fedpipe.federation.round import ClientsLost, RoundInputs, RoundOutputs, run_round
from fedpipe.model.cohort import cohort_map
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.observe.doctor import codes, diagnose
from fedpipe.observe.history import progress_line
from fedpipe.strategy import make_strategy
from fedpipe_app.exits import known_failure as _known_failure

FEATURES, CLASSES, CLIENTS = 6, 3, 10
SPEC = ModelSpec("mlp", (FEATURES,), CLASSES, "sgd", 0.05)
_runner: list[ModelRunner] = []


def runner() -> ModelRunner:
    if not _runner:
        _runner.append(ModelRunner(SPEC))
    return _runner[0]


def _inputs(**changes) -> RoundInputs:
    data = random_federation(CLIENTS, features=FEATURES, classes=CLASSES)
    strategy = make_strategy("fedavg", total_clients=CLIENTS)
    weights = initial_weights(SPEC, 0)
    inputs = RoundInputs(
        round=1,
        seed=3,
        spec=SPEC,
        data=data,
        global_weights=weights,
        server_state=strategy.init_state(weights),
        client_states={},
        strategy=strategy,
        algorithm=make_client(strategy.client_algorithm),
        training=LocalTraining(1, 8, SPEC.lr),
        clients_per_round=CLIENTS,
    )
    return replace(inputs, **changes)


def _run(inputs: RoundInputs, cohort: int | None = None) -> RoundOutputs:
    clients = run_here(runner()) if cohort is None else cohort_map(runner(), cohort)
    return run_round(inputs, map_clients=clients, runner=runner())


def _bits(out: RoundOutputs) -> list[bytes]:
    return [w.tobytes() for w in out.weights]


UNDER_FIRE = dict(
    failures=FailurePolicy(dropout=0.2, min_clients=3),
    planted=PlantedFaults(failing=frozenset({4}), nonfinite=frozenset({1})),
)


@pytest.fixture(scope="module")
def under_fire() -> RoundOutputs:
    """A round with 20% dropout, client 4 raising and client 1 sending NaN."""
    return _run(_inputs(**UNDER_FIRE))


@pytest.fixture(scope="module")
def plain() -> RoundOutputs:
    """The same round with the defaults."""
    return _run(_inputs())


# ---------------------------------------------------------------- the plan


def test_dropout_is_seeded_per_round_and_client() -> None:
    picks = [dropped_out(range(100), dropout=0.2, seed=3, round_=r) for r in (1, 2)]
    assert picks[0] == dropped_out(range(100), dropout=0.2, seed=3, round_=1)
    assert picks[0] != picks[1]
    assert 10 <= len(picks[0]) <= 30
    # a client's draw does not depend on who else was sampled
    assert dropped_out(
        [c for c in range(100) if c % 2], dropout=0.2, seed=3, round_=1
    ) == [c for c in picks[0] if c % 2]
    assert dropped_out(range(100), dropout=0.0, seed=3, round_=1) == []


def test_steps_and_stragglers_planned() -> None:
    training = LocalTraining(2, 8, 0.05)
    assert steps_needed(20, training) == 6
    assert steps_needed(20, replace(training, max_steps=4)) == 4
    n_train = {c: 8 * (c + 1) for c in range(4)}  # 1, 2, 3, 4 batches x 2 epochs
    policy = FailurePolicy(round_deadline_steps=5)
    plan = plan_round(
        range(4),
        n_train=n_train,
        training=training,
        policy=policy,
        seed=0,
        round_=1,
        n_clients=4,
    )
    assert plan.partial == {2: 5, 3: 5} and plan.excluded == {}
    # under a deadline every client's budget is its round_steps (the trainer holds
    # it for all its fits together); train.local_steps stays per fit
    assert plan.train[0] == replace(training, round_steps=5)
    assert plan.train[3].round_steps == 5 and plan.train[3].max_steps is None
    dropped = plan_round(
        range(4),
        n_train=n_train,
        training=training,
        policy=replace(policy, stragglers="drop"),
        seed=0,
        round_=1,
        n_clients=4,
    )
    assert dropped.excluded == {2: "straggler", 3: "straggler"}
    assert list(dropped.train) == [0, 1]
    slow = slow_set(10, 0.3, seed=0)
    assert len(slow) == 3 and slow == slow_set(10, 0.3, seed=0)


# ---------------------------------------------------------------- rounds


def test_dropout_a_raising_and_a_nan_client_complete_and_are_named(
    under_fire: RoundOutputs,
) -> None:
    out = under_fire
    excluded = out.record.excluded
    assert excluded[4].startswith("failed: PlantedClientFailure: client 4")
    assert excluded[1] == "nonfinite"
    dropped = [c for c, r in excluded.items() if r == "dropout"]
    assert dropped == dropped_out(range(CLIENTS), dropout=0.2, seed=3, round_=1)
    assert dropped  # seed 3, round 1: some clients drop out
    assert all(np.isfinite(w).all() for w in out.weights)
    summary = out.record.summary()
    assert summary["clients_excluded"] == {str(c): r for c, r in excluded.items()}
    assert summary["clients_aggregated"] == CLIENTS - len(excluded)
    assert summary["excluded_counts"] == excluded_counts(excluded)
    assert summary["excluded_counts"]["failed"] == 1
    assert out.health["excluded"] == summary["clients_excluded"]
    # the NaN client is in the health record (its update came back), not fitted
    rows = {c["client"]: c for c in out.health["clients"]}
    assert rows[1]["nonfinite"] > 0 and rows[1]["update_norm"] is None
    assert 4 not in rows and not set(dropped) & set(rows)
    assert out.health["aggregation"]["n_fitted"] == CLIENTS - len(excluded)
    table = out.record.client_table().set_index("client")
    assert table.loc[1, "excluded"] == "nonfinite" and table.loc[0, "excluded"] == ""
    line = progress_line(summary, 4, 1.0)
    assert (
        f"({CLIENTS - len(excluded)} of {CLIENTS} clients, {len(excluded)} out" in line
    )


def test_same_seed_same_dropouts_and_bits_other_seed_others(
    under_fire: RoundOutputs,
) -> None:
    a, b = under_fire, _run(_inputs(**UNDER_FIRE))
    assert a.record.excluded == b.record.excluded and _bits(a) == _bits(b)
    other = _run(_inputs(**UNDER_FIRE, seed=4))
    assert other.record.excluded != a.record.excluded


def test_defaults_keep_the_round_as_it_was(plain: RoundOutputs) -> None:
    assert plain.record.excluded == {} and "excluded" not in plain.health
    assert "clients_excluded" not in plain.record.summary()
    assert "excluded" not in plain.record.client_table()
    assert "out" not in progress_line(plain.record.summary(), 4, 1.0)


def test_a_bad_client_in_a_vectorized_cohort_is_left_out_alone(
    under_fire: RoundOutputs,
) -> None:
    seq, coh = under_fire, _run(_inputs(**UNDER_FIRE), cohort=4)
    assert coh.record.excluded == seq.record.excluded
    for x, y in zip(seq.weights, coh.weights, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-4)


def test_too_few_usable_updates_stop_the_round_with_one_line() -> None:
    inputs = _inputs(
        failures=FailurePolicy(min_clients=9),
        planted=PlantedFaults(failing=frozenset({2}), nonfinite=frozenset({5})),
    )
    with pytest.raises(ClientsLost) as caught:
        _run(inputs)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("round 1 stopped: 8 usable update(s) of 10 sampled")
    assert "federation.min_clients needs 9" in message
    assert "client 2 (failed: PlantedClientFailure" in message
    assert "client 5 (nonfinite)" in message
    health = caught.value.health
    assert health["stopped"] == message and health["excluded"]["5"] == "nonfinite"
    assert len(health["clients"]) == 9  # every update that came back
    assert _known_failure(caught.value) == message  # the CLI's one line


def test_faults_start_from_their_round() -> None:
    planted = PlantedFaults(failing=frozenset({1}), from_round=2)
    assert _run(_inputs(planted=planted)).record.excluded == {}
    assert 1 in _run(_inputs(planted=planted, round=2)).record.excluded


def test_stragglers_partial_work_is_used_or_dropped(plain: RoundOutputs) -> None:
    # clients need 3, 3, 4, 4, 5 .. 7 steps; 4 may be taken: 4..9 are stragglers
    deadline = FailurePolicy(round_deadline_steps=4)
    full = plain
    partial = _run(_inputs(failures=deadline))
    drop = _run(_inputs(failures=replace(deadline, stragglers="drop")))
    stragglers = list(range(4, CLIENTS))
    assert partial.record.partial == dict.fromkeys(stragglers, 4)
    assert partial.record.excluded == {}
    assert drop.record.excluded == dict.fromkeys(stragglers, "straggler")
    assert drop.record.partial == {}
    assert drop.record.summary()["clients_aggregated"] == 4
    assert _bits(full) != _bits(partial) != _bits(drop) != _bits(full)
    # stragglers that drop do not train: no local model, not in the health record
    assert set(drop.record.local) == {0, 1, 2, 3}
    assert [c["client"] for c in drop.health["clients"]] == [0, 1, 2, 3]


def test_slow_clients_are_the_stragglers() -> None:
    policy = FailurePolicy(round_deadline_steps=8, slow_clients=0.3, slow_speed=0.25)
    out = _run(_inputs(failures=policy))
    assert set(out.record.partial) == set(slow_set(CLIENTS, 0.3, seed=3))
    assert set(out.record.partial.values()) == {2}


# ---------------------------------------------------------------- params


def _params(**sections) -> dict:
    return {
        "federation": {"clients": 4, "rounds": 1},
        "round_chain": round_chain(1),
        **sections,
    }


@pytest.mark.parametrize(
    "section, key, value",
    [
        ("federation", "dropout", 1.0),
        ("federation", "dropout", -0.1),
        ("federation", "round_deadline_steps", 0),
        ("federation", "stragglers", "wait"),
        ("faults", "failing_clients", [4]),
        ("faults", "nonfinite_clients", [-1]),
    ],
)
def test_bad_failure_params_name_the_key(section: str, key: str, value) -> None:
    raw = _params()
    raw.setdefault(section, {})[key] = value
    with pytest.raises(ParamsError, match=rf"{section}\.{key}"):
        parse_params(raw)


def test_slow_clients_need_a_deadline() -> None:
    raw = _params()
    raw["federation"]["slow_clients"] = 0.2
    with pytest.raises(ParamsError, match="federation.round_deadline_steps"):
        parse_params(raw)


def test_a_client_with_misshapen_data_fails_alone_in_a_cohort() -> None:
    """The cohort's vectorized fit cannot stack a client whose rows have another
    width: its group is served one by one, and only that client fails."""
    inputs = _inputs()
    bad = inputs.data.clients[5]
    wide = ClientData(
        5, np.pad(bad.x_train, ((0, 0), (0, 1))), bad.y_train, bad.x_test, bad.y_test
    )
    clients = tuple(wide if c.client == 5 else c for c in inputs.data.clients)
    d = inputs.data
    inputs = replace(inputs, data=FederatedData(d.spec, d.x_test, d.y_test, clients))
    seq, coh = _run(inputs), _run(inputs, cohort=10)
    assert list(coh.record.excluded) == list(seq.record.excluded) == [5]
    assert coh.record.excluded[5].startswith("failed: ")
    for x, y in zip(seq.weights, coh.weights, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------- the doctor


def test_the_doctor_names_dropped_failed_and_nonfinite_clients(tmp_path) -> None:
    run_federation(
        tmp_path,
        rounds=2,
        n_samples=400,
        failures=FailurePolicy(dropout=0.2),
        planted=PlantedFaults(failing=frozenset({4}), nonfinite=frozenset({1})),
    )
    findings = {f.code: f for f in diagnose(tmp_path)}
    failed = findings[codes.CLIENTS_FAILED]
    assert failed.severity == "warning" and "client 4" in failed.title
    assert "PlantedClientFailure" in failed.evidence[0]
    nonfinite = findings[codes.CLIENT_UPDATES_NONFINITE]
    present = [
        k
        for k in (1, 2)
        if 1 not in dropped_out(range(10), dropout=0.2, seed=0, round_=k)
    ]
    assert nonfinite.title.startswith("client 1 sent") and nonfinite.rounds == present
    assert findings[codes.CLIENTS_DROPPED_OUT].severity == "info"
    # one NaN client among nine is not the learning rate's doing
    assert codes.LEARNING_RATE_TOO_HIGH not in findings
    assert codes.ROUND_STOPPED_CLIENTS_LOST not in findings


def test_the_doctor_names_the_round_that_stopped(tmp_path) -> None:
    run_federation(
        tmp_path,
        rounds=2,
        n_samples=400,
        failures=FailurePolicy(min_clients=10),
        planted=PlantedFaults(nonfinite=frozenset({3}), from_round=2),
    )
    findings = diagnose(tmp_path)
    first = findings[0]
    assert first.code == codes.ROUND_STOPPED_CLIENTS_LOST and first.severity == "error"
    assert first.rounds == [2] and "client 3 (nonfinite)" in first.evidence[0]


def test_fednova_with_partial_stragglers_is_not_misweighted(tmp_path) -> None:
    """FedNova's step weights clients p_i tau_eff / tau_i, which sum to more than 1
    when their steps differ: the round records that sum, and the doctor checks
    the fitted weights against it (before, a healthy run got an error)."""
    slow = FailurePolicy(round_deadline_steps=8, slow_clients=0.3, slow_speed=0.25)
    run_federation(tmp_path, strategy="fednova", rounds=2, batch_size=8, failures=slow)
    health = json.loads((tmp_path / layout.health_metrics(1)).read_text())
    aggregation = health["aggregation"]
    assert aggregation["expected_weight_sum"] > 1.05  # 2-step and 8-step clients
    assert aggregation["weight_sum"] == pytest.approx(
        aggregation["expected_weight_sum"], abs=1e-3
    )
    findings = {f.code for f in diagnose(tmp_path)}
    assert codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED not in findings
    # a planted weight-sum fault on top is still found
    (tmp_path / "fault").mkdir()
    run_federation(
        tmp_path / "fault",
        strategy="fednova",
        rounds=2,
        batch_size=8,
        failures=slow,
        weight_sum_fault=1.8,
    )
    findings = {f.code for f in diagnose(tmp_path / "fault")}
    assert codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED in findings


# ------------------------------------------- robust aggregators' minimum updates


def _krum_inputs(**changes) -> RoundInputs:
    strategy = make_strategy("krum", num_byzantine=1)  # needs 2 * 1 + 3 = 5
    inputs = _inputs(**changes)
    return replace(
        inputs,
        strategy=strategy,
        server_state=strategy.init_state(inputs.global_weights),
        clients_per_round=6,
    )


def test_a_krum_round_short_of_updates_keeps_the_model_and_says_why() -> None:
    """Dropout left fewer updates than Krum's 2f + 3: the round keeps the
    previous global model and records it (it used to stop the run with
    "strategy.num_byzantine = 1 needs more than 2 * 1 + 2 = 4 client updates
    per round; got 3" after earlier rounds had run)."""
    inputs = _krum_inputs(failures=FailurePolicy(dropout=0.4))
    out = _run(inputs)
    usable = len(out.record.aggregated)
    assert usable < 5, "the seeded dropout should leave fewer than 5 of 6"
    assert _bits(out) == [w.tobytes() for w in inputs.global_weights]
    summary = out.record.summary()
    assert summary["model_kept"] == (
        f"{usable} usable update(s); strategy.name=krum needs 2 * "
        "strategy.num_byzantine + 3 = 2 * 1 + 3 = 5: the previous global model kept"
    )
    assert out.health["aggregation"]["expected_weight_sum"] == 0.0
    assert "too few for the strategy: model kept" in progress_line(summary, 1, 0.5)
    # enough updates: Krum aggregates as before (one client's weights)
    full = _run(_krum_inputs())
    assert full.record.kept is None and "model_kept" not in full.record.summary()
    assert _bits(full) != [w.tobytes() for w in inputs.global_weights]


def test_a_kept_round_is_the_oracles_under_privacy() -> None:
    """How many updates came is who took part: not in a DP run's public view."""
    from fedpipe.federation.privacy.views import ORACLE_SUMMARY_KEYS

    assert "model_kept" in ORACLE_SUMMARY_KEYS


@pytest.mark.parametrize(
    ("strategy", "federation", "named"),
    [
        # 4 clients a round, Krum f = 1 needs 5: no round could aggregate
        ({"name": "krum", "num_byzantine": 1}, {"clients": 4}, "4 clients per round"),
        ({"name": "multikrum", "num_byzantine": 1}, {"clients": 4}, "2 \\* strategy"),
        ({"name": "bulyan", "num_byzantine": 1}, {"clients": 6}, "4 \\* strategy"),
        # 6 a round, 40 % drop out, Krum needs 5: P(5 or 6 stay) =
        # 0.6^6 + 6 x 0.4 x 0.6^5 = 0.233, most rounds could not aggregate
        (
            {"name": "krum", "num_byzantine": 1},
            {"clients": 6, "dropout": 0.4},
            "federation.dropout=0.4 only 23% of rounds keep 5 of the 6 clients",
        ),
        # P(6 or more of 8 stay at 0.5) = (28 + 8 + 1) / 256 = 14 %
        (
            {"name": "multikrum", "num_selected": 6},
            {"clients": 8, "dropout": 0.5},
            "strategy.num_selected = 6 .* only 14% of rounds",
        ),
    ],
)
def test_too_few_updates_for_the_aggregator_are_refused_before_any_stage(
    strategy: dict, federation: dict, named: str
) -> None:
    raw = _params(strategy=strategy)
    raw["federation"].update(federation)
    with pytest.raises(ParamsError, match=named) as caught:
        parse_params(raw)
    message = str(caught.value)
    assert "\n" not in message and f"strategy.name={strategy['name']}" in message
    assert "clients per round" in message


@pytest.mark.parametrize(
    ("strategy", "federation"),
    [
        ({"name": "krum", "num_byzantine": 1}, {"clients": 5}),
        # P(5 or more of 10 stay at 0.5) = 62 %; of 6 at 0.2 (the matrix's
        # row 5): 0.8^6 + 6 x 0.2 x 0.8^5 = 66 %, though 4.8 stay on average
        ({"name": "krum", "num_byzantine": 1}, {"clients": 10, "dropout": 0.5}),
        ({"name": "krum", "num_byzantine": 1}, {"clients": 6, "dropout": 0.2}),
        ({"name": "fedmedian"}, {"clients": 2, "dropout": 0.9}),
        ({"name": "fedtrimmedavg"}, {"clients": 1, "dropout": 0.5}),
        ({"name": "bulyan", "num_byzantine": 1}, {"clients": 7}),
    ],
)
def test_enough_updates_on_average_are_accepted(
    strategy: dict, federation: dict
) -> None:
    raw = _params(strategy=strategy)
    raw["federation"].update(federation)
    parse_params(raw)


def test_the_doctor_names_the_rounds_that_kept_the_model(tmp_path) -> None:
    """Krum (num_byzantine 1 needs 5) over 6 clients at 10 % dropout (5.4 on
    average: accepted): the rounds the seeded dropout leaves short keep the
    model, and the doctor says which. (Before, the first such round stopped the
    run: no finding, no later round.)"""
    rounds = 3
    short = [
        k
        for k in range(1, rounds + 1)
        if 6 - len(dropped_out(range(6), dropout=0.1, seed=0, round_=k)) < 5
    ]
    assert short and len(short) < rounds  # some rounds kept, some aggregated
    run_federation(
        tmp_path,
        rounds=rounds,
        n_samples=300,
        clients=6,
        strategy="krum",
        strategy_settings={"num_byzantine": 1},
        failures=FailurePolicy(dropout=0.1),
    )
    findings = {f.code: f for f in diagnose(tmp_path)}
    kept = findings[codes.ROUND_MODEL_KEPT]
    assert kept.rounds == short and kept.severity == "warning"
    assert "strategy.name=krum" in kept.title
    assert "2 * strategy.num_byzantine + 3 = 2 * 1 + 3 = 5" in kept.evidence[0]
    assert "strategy.num_byzantine = 1" in kept.fix
    assert codes.ROUND_STOPPED_CLIENTS_LOST not in findings
    # the kept rounds' empty server step is not an aggregation bug
    assert codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED not in findings


def test_the_doctor_names_personal_models_starved_by_the_deadline(tmp_path) -> None:
    """Ditto under a deadline: healthy now (no finding); with the records of the
    starving behaviour (personal models at chance, 1/3, while the global model
    learns), the doctor names the deadline and the method."""
    run_federation(
        tmp_path,
        rounds=2,
        n_samples=300,
        clients=4,
        classes=(0, 1, 2),
        epochs=2,
        lr=0.1,
        personalization={"method": "ditto"},
        failures=FailurePolicy(round_deadline_steps=4),
    )
    last = json.loads((tmp_path / layout.round_metrics(2)).read_text())
    assert last["clients_partial"]  # the deadline cut the clients' fits
    assert codes.PERSONAL_MODELS_STARVED not in {f.code for f in diagnose(tmp_path)}
    if last["global_on_clients"]["accuracy"] < 1 / 3 + 0.2:
        pytest.skip("the global model did not learn in 2 rounds here")
    last["personalized"]["accuracy"] = 1 / 3  # what the starving runs recorded
    (tmp_path / layout.round_metrics(2)).write_text(json.dumps(last))
    findings = {f.code: f for f in diagnose(tmp_path)}
    starved = findings[codes.PERSONAL_MODELS_STARVED]
    assert starved.rounds == [2] and "0.333" in starved.title
    assert "federation.round_deadline_steps" in starved.fix
    assert "personalization.method = ditto" in starved.fix

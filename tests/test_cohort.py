"""Vectorized client cohorts (fedpipe.model.cohort) against the sequential path.

Every case trains the same jobs twice: one by one through ``run_client`` and as one
cohort; the results must agree field by field to rounding. Clients differ in size
(one smaller than a batch, partial last batches, different numbers of batches), so
the padding and masking is exercised in every case.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pytest

from fedpipe.client import (
    ClientAlgorithm,
    ClientTask,
    Ditto,
    FedPer,
    FedProxClient,
    FineTune,
    LocalSGD,
    LocalTrainer,
    LocalTraining,
    ScaffoldClient,
    make_client,
    pack,
)
from fedpipe.config.params import TrainParams
from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import ClientData, FederatedData
from fedpipe.federation.round import RoundInputs, run_round
from fedpipe.model.cohort import cohort_engine, cohort_map, in_cohort, train_cohort
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.model.trainer import KerasTrainer, run_client, run_here
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.strategy import AggregationError, make_strategy

SIZES = (3, 9, 20, 41)  # batch 8: smaller than a batch, 2, 3 and 6 batches
FEATURES = 6
ATOL, RTOL = 1e-5, 1e-4

_runners: dict[ModelSpec, ModelRunner] = {}


def _runner(spec: ModelSpec) -> ModelRunner:
    if spec not in _runners:
        _runners[spec] = ModelRunner(spec)
    return _runners[spec]


def _spec(optimizer: str = "sgd", n_classes: int = 3) -> ModelSpec:
    lr = 0.05 if optimizer == "sgd" else 0.01
    return ModelSpec("mlp", (FEATURES,), n_classes, optimizer, lr)


def _data(client: int, n: int, shape: Sequence[int], n_classes: int) -> ClientData:
    rng = np.random.default_rng(100 + client)
    x = rng.normal(size=(n, *shape)).astype(np.float32)
    y = rng.integers(0, n_classes, size=n).astype(np.int64)
    x_test = rng.normal(size=(n // 2 + 1, *shape)).astype(np.float32)
    y_test = rng.integers(0, n_classes, size=n // 2 + 1).astype(np.int64)
    return ClientData(client, x, y, x_test, y_test)


def _jobs(
    spec: ModelSpec,
    algorithm: ClientAlgorithm,
    *,
    epochs: int = 2,
    max_steps: int | None = None,
    task: Callable[[int, list[np.ndarray]], ClientTask] | None = None,
) -> list[ClientJob]:
    weights = initial_weights(spec, 0)
    training = LocalTraining(epochs, 8, spec.lr, max_steps)
    make = task or (
        lambda c, w: ClientTask(client=c, round=2, global_weights=w, seed=7)
    )
    return [
        ClientJob(
            spec,
            algorithm,
            make(c, weights),
            _data(c, n, spec.input_shape, spec.n_classes),
            training,
        )
        for c, n in enumerate(SIZES)
    ]


def _scaffold_task(c: int, w: list[np.ndarray]) -> ClientTask:
    rng = np.random.default_rng(c)
    server = [rng.normal(scale=0.1, size=a.shape).astype(np.float32) for a in w]
    own = [rng.normal(scale=0.1, size=a.shape).astype(np.float32) for a in w]
    return ClientTask(
        client=c,
        round=2,
        global_weights=w,
        broadcast={"c": server},
        state={"scaffold": pack("c_i", own)},
        seed=7,
    )


def _ditto_task(c: int, w: list[np.ndarray]) -> ClientTask:
    personal = [a + np.float32(0.01 * (c + 1)) for a in w]
    return ClientTask(
        client=c, round=2, global_weights=w, state={"ditto": pack("personal", personal)}
    )


def _close(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, atol=ATOL, rtol=RTOL)


def _assert_same(seq: Sequence[ClientResult], coh: Sequence[ClientResult]) -> None:
    assert [r.client for r in coh] == [r.client for r in seq]
    for s, c in zip(seq, coh, strict=True):
        _close(s.update.weights, c.update.weights)
        assert c.update.n_samples == s.update.n_samples
        assert sorted(c.update.extras) == sorted(s.update.extras)
        for name in s.update.extras:
            _close(s.update.extras[name], c.update.extras[name])
        assert c.n_test == s.n_test
        np.testing.assert_allclose(c.train_loss, s.train_loss, atol=ATOL, rtol=RTOL)
        assert sorted(c.local) == sorted(s.local)
        for name, value in s.local.items():
            np.testing.assert_allclose(c.local[name], value, atol=ATOL, rtol=RTOL)
        assert {k: sorted(v) for k, v in c.state.items()} == {
            k: sorted(v) for k, v in s.state.items()
        }
        for ns, arrays in s.state.items():
            _close(
                [arrays[k] for k in sorted(arrays)],
                [c.state[ns][k] for k in sorted(arrays)],
            )


CASES = {
    "sgd": (_spec(), lambda: LocalSGD(), {}),
    "adam": (_spec("adam"), lambda: LocalSGD(), {}),
    "binary": (_spec(n_classes=2), lambda: LocalSGD(), {}),
    "fedprox": (_spec(), lambda: FedProxClient(proximal_mu=0.5), {}),
    "scaffold": (_spec(), lambda: ScaffoldClient(), {"task": _scaffold_task}),
    "ditto": (
        _spec(),
        lambda: Ditto(FedProxClient(proximal_mu=0.1), lam=0.3),
        {"task": _ditto_task},
    ),
    "fedper-adam": (_spec("adam"), lambda: FedPer(LocalSGD(), positions=[2, 3]), {}),
    # train.class_weight: balanced, the cohort's loss weighted as the runner's
    "class-weights": (
        replace(_spec(), class_weights=(0.5, 1.0, 4.0)),
        lambda: LocalSGD(),
        {},
    ),
    "class-weights-binary": (
        replace(_spec(n_classes=2), class_weights=(0.6, 3.0)),
        lambda: LocalSGD(),
        {},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_cohort_equals_sequential(case: str) -> None:
    spec, algorithm, kw = CASES[case]
    runner = _runner(spec)
    jobs = _jobs(spec, algorithm(), **kw)
    assert cohort_engine(runner)[0] is not None
    _assert_same([run_client(j, runner) for j in jobs], train_cohort(jobs, runner))


def test_max_steps_with_scaffold() -> None:
    """``train.local_steps`` caps every client (3 steps; the largest has 12); the
    steps taken enter SCAFFOLD's control variate, (x - y) / (K lr)."""
    runner = _runner(_spec())
    jobs = _jobs(
        runner.spec, ScaffoldClient(), max_steps=3, epochs=2, task=_scaffold_task
    )
    _assert_same([run_client(j, runner) for j in jobs], train_cohort(jobs, runner))


def test_personal_models_in_a_cohort() -> None:
    """FineTune's personal model (a fit with ``epochs``) for every client, as the
    round's personalized evaluation would run it."""
    runner = _runner(_spec())
    algorithm = FineTune(LocalSGD(), epochs=2)
    jobs = _jobs(runner.spec, algorithm)

    def personal(job: ClientJob) -> Callable[[LocalTrainer], dict[str, float]]:
        return lambda t: t.evaluate(algorithm.personal_model(job.task, t))

    seq = [personal(j)(KerasTrainer(runner, j.data, j.training)) for j in jobs]
    coh = in_cohort(runner, [(j.data, j.training, personal(j)) for j in jobs])
    for s, c in zip(seq, coh, strict=True):
        for name, value in s.items():
            np.testing.assert_allclose(c[name], value, atol=ATOL, rtol=RTOL)


def test_cohort_is_deterministic() -> None:
    runner = _runner(_spec())
    jobs = _jobs(runner.spec, Ditto(LocalSGD(), lam=0.3), task=_ditto_task)
    a, b = train_cohort(jobs, runner), train_cohort(jobs, runner)
    for x, y in zip(a, b, strict=True):
        assert [w.tobytes() for w in x.update.weights] == [
            w.tobytes() for w in y.update.weights
        ]
        assert x.local == y.local and x.train_loss == y.train_loss
        assert {
            k: {n: v.tobytes() for n, v in s.items()} for k, s in x.state.items()
        } == {k: {n: v.tobytes() for n, v in s.items()} for k, s in y.state.items()}


def test_cohort_map_splits_into_cohorts_in_order() -> None:
    runner = _runner(_spec())
    jobs = _jobs(runner.spec, LocalSGD())
    seq = [run_client(j, runner) for j in jobs]
    _assert_same(seq, cohort_map(runner, 3)(jobs))
    # None and 1 are today's path, bit for bit
    for size in (None, 1):
        same = cohort_map(runner, size)(jobs)
        assert [[w.tobytes() for w in r.update.weights] for r in same] == [
            [w.tobytes() for w in r.update.weights] for r in seq
        ]


def test_cohort_map_tells_progress_per_client_or_cohort() -> None:
    runner = _runner(_spec())
    jobs = _jobs(runner.spec, LocalSGD())
    for size, expected in ((None, [1] * len(jobs)), (3, [3] * (len(jobs) // 3))):
        told: list[int] = []
        out = cohort_map(runner, size, on_trained=told.append)(jobs)
        rest = len(jobs) % 3 if size == 3 else 0
        assert told == expected + ([rest] if rest else [])
        assert sum(told) == len(out) == len(jobs)


def test_a_client_without_training_data() -> None:
    """No batches: the start weights back, a NaN loss, as sequential training."""
    runner = _runner(_spec())
    jobs = _jobs(runner.spec, LocalSGD())
    empty = ClientData(
        9,
        jobs[0].data.x_train[:0],
        jobs[0].data.y_train[:0],
        jobs[0].data.x_test,
        jobs[0].data.y_test,
    )
    jobs.insert(1, replace(jobs[0], data=empty))
    seq = [run_client(j, runner) for j in jobs]
    assert np.isnan(seq[1].train_loss)
    _assert_same(seq, train_cohort(jobs, runner))


def test_an_algorithms_error_reaches_the_caller() -> None:
    runner = _runner(_spec())
    jobs = _jobs(runner.spec, ScaffoldClient())  # no server control variate
    with pytest.raises(AggregationError, match="server control variate"):
        train_cohort(jobs, runner)


def test_conv_model_falls_back_to_run_client_bits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spec = ModelSpec(
        "cnn", (6, 6, 1), 3, "sgd", 0.05, settings=(("depth", 1), ("width", 2))
    )
    runner = _runner(spec)
    jobs = _jobs(spec, LocalSGD())
    seq = [run_client(j, runner) for j in jobs]
    with caplog.at_level(logging.INFO, logger="fedpipe"):
        coh = train_cohort(jobs, runner)
        again = cohort_map(runner, 2)(jobs)
    lines = [r.getMessage() for r in caplog.records if r.name == "fedpipe"]
    assert len(lines) == 1, lines  # once per runner, not per cohort
    assert "one by one" in lines[0] and "convolutions" in lines[0]
    assert caplog.records[0].levelno == logging.WARNING
    for s, c in zip(seq, again, strict=True):
        assert [w.tobytes() for w in c.update.weights] == [
            w.tobytes() for w in s.update.weights
        ]
    for s, c in zip(seq, coh, strict=True):
        assert [w.tobytes() for w in c.update.weights] == [
            w.tobytes() for w in s.update.weights
        ]
        assert c.local == s.local and c.train_loss == s.train_loss


def test_dropout_model_falls_back() -> None:
    runner = _runner(
        ModelSpec(
            "deep_mlp",
            (FEATURES,),
            3,
            "sgd",
            0.05,
            settings=(("depth", 1), ("dropout", 0.2), ("width", 4)),
        )
    )
    engine, reason = cohort_engine(runner)
    assert engine is None and "random layers" in reason


def test_cohort_size_param() -> None:
    assert TrainParams().cohort_size == "auto"
    assert TrainParams(cohort_size=None).cohort_size is None
    assert TrainParams(cohort_size=100).cohort_size == 100
    for bad in (0, "all", -3, True, 2.5):
        with pytest.raises(ValueError, match="cohort_size") as err:
            TrainParams(cohort_size=bad)
        # one line naming what is allowed, not one per branch of the union
        assert "allowed: auto, null or a whole number >= 1" in str(err.value)
        assert "literal" not in str(err.value)


def test_auto_is_cohorts_of_10_where_the_model_allows_and_never_under_dpsgd() -> None:
    """Issue 39: cohorts by default where the model allows, decided from the
    spec before any client is sent (the local and the Dask runner alike)."""
    from fedpipe.config.params import Params
    from fedpipe.model.cohort import AUTO_COHORT, cohort_size_for

    mlp = _spec()
    cnn = ModelSpec("small_cnn", (16, 16, 1), 3, "sgd", 0.05)
    dropout = ModelSpec(
        "deep_mlp", (FEATURES,), 3, "sgd", 0.05, settings=(("dropout", 0.2),)
    )
    assert AUTO_COHORT == 10
    assert cohort_size_for("auto", mlp) == 10
    assert cohort_size_for("auto", cnn) is None  # convolutions: one by one
    assert cohort_size_for("auto", dropout) is None  # random layers
    assert cohort_size_for(None, mlp) is None and cohort_size_for(1, mlp) == 1
    assert cohort_size_for(4, cnn) == 4  # the user's number stays (and warns there)
    one_round = {"federation": {"rounds": 1}, "round_chain": {1: 0}}
    assert Params.model_validate(one_round).cohort_setting() == "auto"
    dpsgd = {**one_round, "privacy": {"mechanism": "dpsgd"}}
    assert Params.model_validate(dpsgd).cohort_setting() is None
    with pytest.raises(ValueError, match=r"train.cohort_size=4"):
        Params.model_validate({**dpsgd, "train": {"cohort_size": 4}})


def test_a_round_with_cohort_map() -> None:
    """run_round takes cohort_map as its map_clients: the same round to rounding."""
    runner = _runner(_spec())
    clients = tuple(_data(c, n, (FEATURES,), 3) for c, n in enumerate(SIZES))
    spec = DatasetSpec("random", (0, 1, 2), (FEATURES,), (-5.0, 5.0), 1.0, 100)
    x_test = np.random.default_rng(0).normal(size=(12, FEATURES)).astype(np.float32)
    data = FederatedData(spec, x_test, np.arange(12) % 3, clients)
    strategy = make_strategy("fedprox", total_clients=len(SIZES))
    weights = initial_weights(runner.spec, 0)
    inputs = RoundInputs(
        round=1,
        seed=0,
        spec=runner.spec,
        data=data,
        global_weights=weights,
        server_state=strategy.init_state(weights),
        client_states={},
        strategy=strategy,
        algorithm=make_client(strategy.client_algorithm, proximal_mu=0.1),
        training=LocalTraining(2, 8, runner.spec.lr),
        clients_per_round=3,
    )
    seq = run_round(inputs, map_clients=run_here(runner), runner=runner)
    coh = run_round(inputs, map_clients=cohort_map(runner, 2), runner=runner)
    assert coh.record.selected == seq.record.selected
    _close(seq.weights, coh.weights)
    for c, metrics in seq.record.local.items():
        for name, value in metrics.items():
            np.testing.assert_allclose(
                coh.record.local[c][name], value, atol=ATOL, rtol=RTOL
            )

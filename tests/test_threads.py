"""Clients trained side by side (fedpipe.model.threads, ``runtime.threads``): the
bits of one by one, whatever the threads and whoever trains whom; and one op on
one core, so a model's bits do not depend on the machine's cores."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fedpipe.client import (
    ClientAlgorithm,
    ClientReply,
    ClientTask,
    LocalSGD,
    LocalTrainer,
    LocalTraining,
)
from fedpipe.data.splits import ClientData
from fedpipe.model.cohort import cohort_map
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.model.threads import threaded_map, usable_cores
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights

SPEC = ModelSpec("small_cnn", (12, 12, 1), 4, "sgd", 0.05)
SIZES = (5, 40, 17, 64, 33, 9)  # uneven: threads finish out of order


@pytest.fixture(scope="module")
def runners() -> list[ModelRunner]:
    return [ModelRunner(SPEC) for _ in range(3)]


def _data(client: int, n: int, n_test: int | None = None) -> ClientData:
    rng = np.random.default_rng(200 + client)
    n_test = n // 2 + 1 if n_test is None else n_test
    x = rng.random((n + n_test, *SPEC.input_shape), dtype=np.float32)
    y = rng.integers(0, SPEC.n_classes, n + n_test).astype(np.int64)
    return ClientData(client, x[:n], y[:n], x[n:], y[n:])


class Breaks(LocalSGD):
    """Local SGD, except that clients 2 and 4 raise."""

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        if task.client in (2, 4):
            raise ValueError(f"client {task.client} broke")
        return super().train(task, trainer)


def _jobs(
    guarded: bool = True,
    algorithm: ClientAlgorithm | None = None,
    n_test: int | None = None,
) -> list[ClientJob]:
    weights = initial_weights(SPEC, 3)
    return [
        ClientJob(
            SPEC,
            algorithm or LocalSGD(),
            ClientTask(client=c, round=2, global_weights=weights, seed=11),
            _data(c, n, n_test),
            LocalTraining(1, 8, SPEC.lr),
            guarded=guarded,
        )
        for c, n in enumerate(SIZES)
    ]


def _same(a: ClientResult, b: ClientResult) -> bool:
    return (
        a.client == b.client
        and all(
            np.array_equal(x, y)
            for x, y in zip(a.update.weights, b.update.weights, strict=True)
        )
        and a.local == b.local
        and a.train_loss == b.train_loss
    )


@pytest.mark.parametrize("n_threads", [2, 3])
def test_side_by_side_gives_the_bits_of_one_by_one(runners, n_threads) -> None:
    jobs = _jobs()
    alone = run_here(runners[0])(jobs)
    ticks: list[int] = []
    together = threaded_map(runners[:n_threads], on_trained=ticks.append)(jobs)
    assert [r.client for r in together] == list(range(len(SIZES)))  # job order
    assert all(_same(a, b) for a, b in zip(alone, together, strict=True))
    assert ticks == [1] * len(SIZES)
    # and again, the clients now landing on other models and threads
    again = threaded_map(runners[:n_threads][::-1])(jobs[::-1])
    assert all(_same(a, b) for a, b in zip(alone[::-1], again, strict=True))


def test_a_model_training_in_one_thread_is_not_lent_to_anothers_predictions(
    runners,
) -> None:
    # local test splits of several prediction batches: the model evaluating them
    # would share the batches out over its free helpers, never over one that is
    # training another client at that moment (it once did: other weights, wrong
    # losses, as a run under Prefect showed)
    jobs = _jobs(n_test=700)
    alone = run_here(ModelRunner(SPEC))(jobs)
    runners[0].helpers = runners[1:]
    try:
        for _ in range(3):
            together = threaded_map(runners)(jobs)
            assert all(_same(a, b) for a, b in zip(alone, together, strict=True))
    finally:
        runners[0].helpers = ()


def test_cohort_map_with_spares_trains_side_by_side(runners) -> None:
    jobs = _jobs()
    alone = cohort_map(runners[0], None)(jobs)
    together = cohort_map(runners[0], None, spares=runners[1:])(jobs)
    assert all(_same(a, b) for a, b in zip(alone, together, strict=True))


def test_a_job_that_raises_is_raised_in_job_order(runners) -> None:
    jobs = _jobs(guarded=False, algorithm=Breaks())
    with pytest.raises(ValueError, match="client 2 broke"):  # not 4's
        threaded_map(runners[:3])(jobs)
    # guarded, as a round runs them: each comes back as its client's failure
    out = threaded_map(runners[:3])(_jobs(algorithm=Breaks()))
    assert [type(r).__name__ for r in out] == [
        "ClientResult", "ClientResult", "ClientFailure",
        "ClientResult", "ClientFailure", "ClientResult",
    ]  # fmt: skip


def test_predictions_shared_out_give_the_same_bits(runners) -> None:
    weights = initial_weights(SPEC, 5)
    rng = np.random.default_rng(0)
    splits = [
        (rng.random((n, *SPEC.input_shape), dtype=np.float32), rng.integers(0, 4, n))
        for n in (300, 7, 611)
    ]
    main = ModelRunner(SPEC)
    alone = main.predict_splits(weights, splits, batch_size=64)
    main.helpers = runners[:2]
    shared = main.predict_splits(weights, splits, batch_size=64)
    for (p, loss), (q, loss2) in zip(alone, shared, strict=True):
        assert np.array_equal(p, q) and np.array_equal(loss, loss2)
    assert [len(p) for p, _ in shared] == [300, 7, 611]


BN_CNN = ModelSpec(
    "cnn", (16, 16, 1), 10, "sgd", 0.05,
    settings=(("batch_norm", True), ("depth", 2), ("width", 8)),
)  # fmt: skip


def test_a_clients_bits_do_not_depend_on_what_its_model_ran_before() -> None:
    # The pairwise matrix's FedBN rows on images gave other bits on a second
    # run: a compiled step was traced for the exact shapes of its first client
    # and for open ones only from its second, and a convolution's gradients
    # differ in the last bits between the two graphs. With clients side by side,
    # which client came first on which model depended on the threads.
    weights = initial_weights(BN_CNN, 3)

    def job(client: int, n: int) -> ClientJob:
        rng = np.random.default_rng(300 + client)
        x = rng.random((2 * n, *BN_CNN.input_shape), dtype=np.float32)
        y = rng.integers(0, BN_CNN.n_classes, 2 * n).astype(np.int64)
        return ClientJob(
            BN_CNN,
            LocalSGD(),
            ClientTask(client=client, round=1, global_weights=weights, seed=11),
            ClientData(client, x[:n], y[:n], x[n:], y[n:]),
            LocalTraining(1, 16, BN_CNN.lr),
            guarded=False,
        )

    small, other = job(0, 5), job(1, 3)  # each less than one batch
    first = run_here(ModelRunner(BN_CNN))([small])[0]
    second = run_here(ModelRunner(BN_CNN))([other, small])[1]
    assert _same(first, second)


def test_usable_cores_follows_the_affinity() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))


FIT = textwrap.dedent(
    """
    import hashlib, numpy as np
    from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
    spec = ModelSpec("small_cnn", (28, 28, 1), 10, "sgd", 0.05)
    rng = np.random.default_rng(0)
    x = rng.random((96, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 10, 96)
    out = ModelRunner(spec).fit(initial_weights(spec, 1), x, y, epochs=1,
                                batch_size=32, seed=3)
    print(hashlib.sha256(b"".join(w.tobytes() for w in out)).hexdigest())
    """
)


@pytest.mark.skipif(
    shutil.which("taskset") is None or usable_cores() < 2,
    reason="needs taskset and two cores",
)
def test_a_fit_has_the_same_bits_on_one_core_and_on_two() -> None:
    def digest(prefix: list[str], env: dict[str, str]) -> str:
        out = subprocess.run(
            [*prefix, sys.executable, "-c", FIT],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env},
        )
        return out.stdout.strip().splitlines()[-1]

    cores = sorted(os.sched_getaffinity(0))
    one = digest(["taskset", "-c", str(cores[0])], {})
    two = digest(["taskset", "-c", f"{cores[0]},{cores[1]}"], {})
    assert one == two
    # TensorFlow's own default (a thread per core and op) is what differed
    env = {"TF_NUM_INTRAOP_THREADS": "2"}
    assert digest(["taskset", "-c", f"{cores[0]},{cores[1]}"], env) != one

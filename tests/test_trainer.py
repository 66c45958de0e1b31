"""The one client trainer (fedpipe.model.trainer) and what the cohort shares with it.

One batching of local training (:func:`fedpipe.model.training.batch_indices`) for
:meth:`ModelRunner.fit` and the vectorized cohort; ``cohort_map`` of size 1 is
:func:`run_here`. The optimizer step both share: tests/test_step.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from fedpipe.client import ClientTask, LocalSGD, LocalTraining
from fedpipe.client.base import FitRequest
from fedpipe.data.splits import ClientData
from fedpipe.model.cohort import _Fit, cohort_map
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner, ModelSpec, batch_indices

FEATURES = 6
SIZES = (3, 9, 20)

_runners: dict[str, ModelRunner] = {}


def _runner(optimizer: str) -> ModelRunner:
    if optimizer not in _runners:
        lr = 0.05 if optimizer == "sgd" else 0.01
        _runners[optimizer] = ModelRunner(
            ModelSpec("mlp", (FEATURES,), 3, optimizer, lr)
        )
    return _runners[optimizer]


def _data(client: int, n: int) -> ClientData:
    rng = np.random.default_rng(100 + client)
    x = rng.normal(size=(n, FEATURES)).astype(np.float32)
    y = rng.integers(0, 3, size=n).astype(np.int64)
    return ClientData(client, x, y, x[: n // 2 + 1], y[: n // 2 + 1])


def _jobs(runner: ModelRunner) -> list[ClientJob]:
    weights = [np.array(w) for w in runner.model.get_weights()]
    return [
        ClientJob(
            runner.spec,
            LocalSGD(),
            ClientTask(client=c, round=1, global_weights=weights, seed=3),
            _data(c, n),
            LocalTraining(2, 8, runner.spec.lr),
        )
        for c, n in enumerate(SIZES)
    ]


# ---------------------------------------------------------------- batching


def _reference_batches(
    n: int, epochs: int, batch_size: int, seed: int, max_steps: int | None
) -> list[np.ndarray]:
    """The batching ModelRunner.fit had before it moved to batch_indices."""
    rng = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for _ in range(epochs):
        if max_steps is not None and len(out) >= max_steps:
            break
        order = rng.permutation(n)
        for start in range(0, n, batch_size):
            if max_steps is not None and len(out) >= max_steps:
                break
            out.append(order[start : start + batch_size])
    return out


@pytest.mark.parametrize(
    ("n", "epochs", "batch_size", "max_steps"),
    [(20, 2, 8, None), (20, 3, 8, 4), (3, 2, 8, None), (0, 2, 8, None), (16, 1, 8, 9)],
)
def test_batch_indices_is_the_fits_batching(
    n: int, epochs: int, batch_size: int, max_steps: int | None
) -> None:
    plan = batch_indices(
        n, epochs=epochs, batch_size=batch_size, seed=5, max_steps=max_steps
    )
    expected = _reference_batches(n, epochs, batch_size, 5, max_steps)
    assert len(plan) == len(expected)
    for got, want in zip(plan, expected, strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("max_steps", [None, 1, 4])
def test_fit_takes_one_step_per_planned_batch(max_steps: int | None) -> None:
    runner = _runner("sgd")
    data = _data(0, 20)
    weights = [np.array(w) for w in runner.model.get_weights()]
    runner.fit(
        weights,
        data.x_train,
        data.y_train,
        epochs=2,
        batch_size=8,
        seed=1,
        max_steps=max_steps,
    )
    plan = batch_indices(20, epochs=2, batch_size=8, seed=1, max_steps=max_steps)
    assert runner.last_steps == len(plan)


def test_a_cohort_fit_plans_the_same_batches() -> None:
    data = _data(2, 20)
    fit = _Fit(0, data, [], fit=FitRequest([], 4, 3, 8, 5))
    expected = batch_indices(20, epochs=3, batch_size=8, seed=4, max_steps=5)
    assert len(fit.plan) == len(expected)
    for got, want in zip(fit.plan, expected, strict=True):
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- one trainer


def _same_bits(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert isinstance(x, ClientResult) and isinstance(y, ClientResult)
        assert x.client == y.client
        assert repr((x.local, x.train_loss)) == repr((y.local, y.train_loss))
        for wx, wy in zip(x.update.weights, y.update.weights, strict=True):
            assert wx.tobytes() == wy.tobytes()


@pytest.mark.parametrize("size", [None, 1])
def test_cohort_map_of_one_is_run_here(size: int | None) -> None:
    runner = _runner("adam")
    jobs = _jobs(runner)
    _same_bits(run_here(runner)(jobs), list(cohort_map(runner, size)(jobs)))


def test_model_package_imports_nothing_above_it() -> None:
    """fedpipe.model sits below fedpipe.federation (and everything above it)."""
    above = (
        "fedpipe.federation",
        "fedpipe.observe",
        "fedpipe_app",
        "orchestration",
        "tasks",
        "flows",
    )
    root = Path(__file__).resolve().parents[1] / "fedpipe" / "model"
    bad = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            bad += [f"{path.name}: {n}" for n in names if n.startswith(above)]
    assert bad == []


# ---------------------------------------------------------------- loads


class _CountingRunner(ModelRunner):
    """A runner that counts the weight loads it is asked for."""

    loads = 0

    def load(self, weights) -> None:  # type: ignore[no-untyped-def]
        self.loads += 1
        super().load(weights)


def _fit_and_score(change) -> tuple[dict[str, float], dict[str, float], int]:  # type: ignore[no-untyped-def]
    """A client's fit and its local score on a counting runner (``change``:
    what the algorithm does to the trained weights before the score), and the
    same weights scored on a fresh runner."""
    from fedpipe.model.trainer import KerasTrainer

    runner = _CountingRunner(ModelSpec("mlp", (FEATURES,), 3, "sgd", 0.05))
    data = _data(0, 20)
    trainer = KerasTrainer(runner, data, LocalTraining(1, 8, 0.05))
    start = [np.array(w) for w in runner.model.get_weights()]
    fit = trainer.run_fit(
        FitRequest(start, seed=4, epochs=1, batch_size=8, max_steps=None)
    )
    trained = change(fit.weights)
    runner.loads = 0
    got = trainer.evaluate(trained)
    fresh = ModelRunner(runner.spec).evaluate(trained, data.x_test, data.y_test)
    return got, fresh, runner.loads


def test_a_local_score_right_after_the_fit_loads_no_weights() -> None:
    got, fresh, loads = _fit_and_score(lambda w: w)
    assert loads == 0
    assert got == fresh


def test_weights_changed_after_the_fit_are_loaded_for_the_score() -> None:
    def in_place(weights):  # type: ignore[no-untyped-def]
        weights[-1] += 1.0  # the fit's own arrays, changed in place
        return weights

    got, fresh, loads = _fit_and_score(in_place)
    assert loads == 1
    assert got == fresh

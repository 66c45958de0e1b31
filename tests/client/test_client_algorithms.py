"""Every client algorithm against a hand computation on logistic regression.

The model is one sigmoid unit (weights ``w``, bias ``b``); Keras computes the binary
cross-entropy from the logit, so the full-batch gradient is ``X^T (p - y) / n`` and
``mean(p - y)``. With one batch per epoch, every local step is plain gradient
descent on the local objective, which NumPy computes here independently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpipe.client import (
    ClientTask,
    FedProxClient,
    LocalSGD,
    LocalTraining,
    ScaffoldClient,
)
from fedpipe.client.personal import Ditto
from fedpipe.data.splits import ClientData
from fedpipe.model.trainer import KerasTrainer
from fedpipe.model.training import ModelRunner, ModelSpec

LR = 0.1
N, D = 8, 3
SPEC = ModelSpec(
    name=f"{Path(__file__).parent / 'tiny_models.py'}:logistic",
    input_shape=(D,),
    n_classes=2,
    optimizer="sgd",
    lr=LR,
)


@pytest.fixture(scope="module")
def runner() -> ModelRunner:
    return ModelRunner(SPEC)


def _data() -> ClientData:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(N, D)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    return ClientData(5, x, y, x[:2], y[:2])


def _start() -> list[np.ndarray]:
    return [
        np.array([[0.2], [-0.1], [0.05]], np.float32),
        np.array([0.1], np.float32),
    ]


def _grad(w: list[np.ndarray], data: ClientData) -> list[np.ndarray]:
    x, y = data.x_train.astype(np.float64), data.y_train.astype(np.float64)
    p = 1 / (1 + np.exp(-(x @ w[0][:, 0] + w[1][0])))
    return [(x.T @ (p - y) / len(y))[:, None], np.array([np.mean(p - y)])]


def _descend(w, data, steps, *, mu=0.0, anchor=None, offset=None):
    """``steps`` gradient steps on L + mu/2 ||w - anchor||^2 + <offset, w>."""
    w = [a.astype(np.float64) for a in w]
    anchor = w if anchor is None else [a.astype(np.float64) for a in anchor]
    for _ in range(steps):
        g = _grad(w, data)
        w = [
            wj
            - LR
            * (
                gj
                + mu * (wj - aj)
                + (0.0 if offset is None else offset[j].astype(np.float64))
            )
            for j, (wj, gj, aj) in enumerate(zip(w, g, anchor, strict=True))
        ]
    return w


def _trainer(runner: ModelRunner, epochs: int = 2) -> KerasTrainer:
    return KerasTrainer(runner, _data(), LocalTraining(epochs, N, LR))


def _task(**kw) -> ClientTask:
    return ClientTask(client=5, round=1, global_weights=_start(), seed=3, **kw)


def _close(got, want) -> None:
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-5, atol=1e-6)


def test_local_sgd_is_gradient_descent(runner: ModelRunner) -> None:
    reply = LocalSGD().train(_task(), _trainer(runner))
    _close(reply.weights, _descend(_start(), _data(), 2))
    assert reply.extras == {} and reply.state == {}


def test_fedprox_adds_the_proximal_pull_to_the_global_weights(
    runner: ModelRunner,
) -> None:
    reply = FedProxClient(proximal_mu=2.0).train(_task(), _trainer(runner))
    want = _descend(_start(), _data(), 2, mu=2.0, anchor=_start())
    _close(reply.weights, want)
    # the pull is real: without it the result differs
    plain = _descend(_start(), _data(), 2)
    assert not np.allclose(want[0], plain[0], atol=1e-4)


def test_scaffold_corrects_gradients_and_updates_its_control(
    runner: ModelRunner,
) -> None:
    c = [np.array([[0.3], [0.0], [-0.2]]), np.array([0.05])]
    c_i = [np.array([[0.1], [0.1], [0.1]], np.float32), np.array([-0.05], np.float32)]
    state = {"scaffold": {"c_i/000": c_i[0], "c_i/001": c_i[1]}}
    reply = ScaffoldClient().train(
        _task(broadcast={"c": c}, state=state), _trainer(runner)
    )
    x = _start()
    offset = [cj - cij for cj, cij in zip(c, c_i, strict=True)]
    y = _descend(x, _data(), 2, offset=offset)
    _close(reply.weights, y)
    # c_i+ = c_i - c + (x - y) / (K lr), K = 2 steps
    new = [
        cij - cj + (xj - yj) / (2 * LR)
        for cij, cj, xj, yj in zip(c_i, c, x, y, strict=True)
    ]
    got = [reply.state["scaffold"]["c_i/000"], reply.state["scaffold"]["c_i/001"]]
    _close(got, new)
    delta = [n - o for n, o in zip(new, c_i, strict=True)]
    _close(reply.extras["control_delta"], delta)


def test_scaffold_without_the_server_control_says_which_strategy(
    runner: ModelRunner,
) -> None:
    with pytest.raises(ValueError, match="strategy.name: scaffold"):
        ScaffoldClient().train(_task(), _trainer(runner))


def test_ditto_personal_model_is_pulled_to_the_global_one(runner: ModelRunner) -> None:
    v0 = [np.array([[1.0], [1.0], [1.0]], np.float32), np.array([0.0], np.float32)]
    state = {"ditto": {"personal/000": v0[0], "personal/001": v0[1]}}
    reply = Ditto(LocalSGD(), lam=0.5).train(_task(state=state), _trainer(runner))
    _close(reply.weights, _descend(_start(), _data(), 2))
    personal = [
        reply.state["ditto"]["personal/000"],
        reply.state["ditto"]["personal/001"],
    ]
    _close(personal, _descend(v0, _data(), 2, mu=0.5, anchor=_start()))


def test_proximal_and_offset_terms_add(runner: ModelRunner) -> None:
    """Both terms at once (FedDyn's objective): defined, not one silently dropped."""
    offset = [np.full((D, 1), 0.2, np.float32), np.array([-0.1], np.float32)]
    anchor = [np.zeros((D, 1), np.float32), np.zeros(1, np.float32)]
    fit = _trainer(runner).fit(
        _start(), seed=1, proximal_mu=0.7, anchor=anchor, gradient_offset=offset
    )
    want = _descend(_start(), _data(), 2, mu=0.7, anchor=anchor, offset=offset)
    _close(fit.weights, want)
    assert fit.steps == 2

"""examples/feddyn: FedDyn written only as a user's plugin file, checked against a
hand computation through the real round (:func:`fedpipe.federation.round.run_round`).

The model is a logistic regression (``Dense(1, sigmoid)`` on 2 features, 3
parameters) from a builder file of the test's own; each client has 4 samples and
trains with batch size 4, so every local step is a full-batch gradient step whose
value does not depend on the shuffling and can be computed in NumPy.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from fedpipe.client import CLIENT_ALGORITHMS
from fedpipe.client.base import ClientAlgorithm
from fedpipe.config.params import Params, ParamsError, parse_params, round_chain
from fedpipe.core.plugins import load_subclass
from fedpipe.data.sources import DatasetSpec
from fedpipe.data.splits import ClientData, FederatedData
from fedpipe.federation.build import (
    client_algorithm_for,
    local_training,
    model_spec,
    strategy_for,
)
from fedpipe.federation.round import RoundInputs, RoundOutputs, run_round
from fedpipe.model.jobs import ClientResult
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner
from fedpipe.model.zoo import build_model
from fedpipe.strategy import STRATEGIES, Strategy

ROOT = Path(__file__).resolve().parents[2]
FEDDYN = "examples/feddyn/feddyn.py"
ALPHA = 0.1
LR = 0.5
EPOCHS = 3
CLIENTS = 3  # m; 2 train per round, so 1/m and 1/|P| differ

TINY_MODELS = """
import keras
from keras import layers


def logistic(input_shape, n_classes):
    return keras.Sequential(
        [keras.Input(shape=input_shape), layers.Dense(1, activation="sigmoid")]
    )


def normalized(input_shape, n_classes):
    return keras.Sequential(
        [
            keras.Input(shape=input_shape),
            layers.BatchNormalization(),
            layers.Dense(1, activation="sigmoid"),
        ]
    )


def not_a_model(input_shape, n_classes):
    return "a model"
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A builder file of the test's own; the working directory is the repository
    (references are relative to the project root, as in a project)."""
    path = tmp_path / "tiny_models.py"
    path.write_text(TINY_MODELS)
    monkeypatch.chdir(ROOT)
    return path


def _params(model: str, **sections: dict) -> Params:
    raw = {
        "seed": 3,
        "federation": {"clients": CLIENTS, "rounds": 2, "fraction_fit": 0.5},
        "train": {"epochs": EPOCHS, "batch_size": 4, "lr": LR, "optimizer": "sgd"},
        "model": {"name": model},
        "strategy": {"name": f"{FEDDYN}:FedDyn", "options": {"alpha": ALPHA}},
        "round_chain": round_chain(2),
    }
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return parse_params(raw)


def _data() -> FederatedData:
    rng = np.random.default_rng(0)

    def split(shift: float) -> tuple[np.ndarray, np.ndarray]:
        x = rng.normal(shift, 1.0, size=(4, 2)).astype(np.float32)
        return x, np.array([0, 1, 0, 1], dtype=np.int64)

    clients = []
    for c, shift in enumerate((-1.0, 0.5, 2.0)):  # different data: FedDyn matters
        x, y = split(shift)
        xt, yt = split(shift)
        clients.append(ClientData(c, x, y, xt, yt))
    x_test, y_test = split(0.0)
    spec = DatasetSpec("tiny", (0, 1), (2,), (-10.0, 10.0), 1.0, 20)
    return FederatedData(spec, x_test, y_test, tuple(clients))


class Federation:
    """The plugin loaded the way a run loads it, one compiled model, the state
    carried from round to round."""

    def __init__(self, params: Params, data: FederatedData) -> None:
        self.params = params
        self.data = data
        self.spec = model_spec(params, data.spec)
        self.strategy = strategy_for(params)
        self.algorithm = client_algorithm_for(params, self.spec, self.strategy)
        self.runner = ModelRunner(self.spec)
        self.trained: list[ClientResult] = []

    def round(
        self, k: int, weights: list[np.ndarray], before: RoundOutputs | None
    ) -> RoundOutputs:
        def map_clients(jobs: Sequence) -> list[ClientResult]:
            results = list(run_here(self.runner)(jobs))
            self.trained = results
            return results

        inputs = RoundInputs(
            round=k,
            seed=self.params.seed,
            spec=self.spec,
            data=self.data,
            global_weights=weights,
            server_state=(
                self.strategy.init_state(weights)
                if before is None
                else before.server_state
            ),
            client_states={} if before is None else before.client_states,
            strategy=self.strategy,
            algorithm=self.algorithm,
            training=local_training(self.params),
            clients_per_round=self.params.federation.clients_per_round(),
        )
        return run_round(inputs, map_clients=map_clients, runner=self.runner)


# ---------------------------------------------------------------- by hand


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _client_by_hand(
    theta: list[np.ndarray], grad: list[np.ndarray], x: np.ndarray, y: np.ndarray
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """EPOCHS full-batch SGD steps on L(w) - <g, w> + alpha/2 ||w - theta||^2
    (mean binary cross-entropy), then g <- g - alpha (w - theta)."""
    x = x.astype(np.float64)
    kernel, bias = (t.astype(np.float64) for t in theta)
    for _ in range(EPOCHS):
        dz = (_sigmoid(x @ kernel + bias) - y.reshape(-1, 1)) / len(y)
        loss_grads = [x.T @ dz, dz.sum(axis=0)]
        kernel, bias = (
            w - LR * (gl + ALPHA * (w - t) - g)
            for w, gl, t, g in zip((kernel, bias), loss_grads, theta, grad, strict=True)
        )
    trained = [kernel, bias]
    new_grad = [
        g - ALPHA * (w - t) for g, w, t in zip(grad, trained, theta, strict=True)
    ]
    return trained, new_grad


def _close(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), w, rtol=1e-5, atol=1e-6)


def test_two_rounds_match_the_hand_computation(models: Path) -> None:
    fed = Federation(_params(f"{models}:logistic"), _data())
    theta = [np.array([[0.5], [-0.3]], np.float32), np.array([0.1], np.float32)]
    grads = {c: [np.zeros((2, 1)), np.zeros(1)] for c in range(CLIENTS)}
    h = [np.zeros((2, 1)), np.zeros(1)]
    out = None
    twice = set()
    for k in (1, 2):
        out = fed.round(k, theta, out)
        selected = out.record.selected
        assert len(selected) == 2
        trained = {}
        for c in selected:
            data = fed.data.clients[c]
            trained[c], new = _client_by_hand(
                [t.astype(np.float64) for t in theta],
                grads[c],
                data.x_train,
                data.y_train,
            )
            twice |= {c} if any(np.any(g != 0) for g in grads[c]) else set()
            grads[c] = new
        for r in fed.trained:
            _close(r.update.weights, trained[r.client])
        drift = [
            sum(trained[c][j] - theta[j].astype(np.float64) for c in selected)
            for j in range(2)
        ]
        h = [hj - ALPHA / CLIENTS * dj for hj, dj in zip(h, drift, strict=True)]
        average = [sum(trained[c][j] for c in selected) / 2 for j in range(2)]
        want = [a - hj / ALPHA for a, hj in zip(average, h, strict=True)]

        _close(out.weights, want)
        _close([out.server_state["h/000"], out.server_state["h/001"]], h)
        for c in selected:
            kept = out.client_states[c]["feddyn"]
            _close([kept["grad/000"], kept["grad/001"]], grads[c])
        theta = [np.asarray(w) for w in out.weights]
    # 2 of 3 clients per round: some client trained in both rounds, so the linear
    # term -<g_k, theta> of its second round was exercised with g_k != 0
    assert twice
    # h is the mean of all m clients' gradient states (zeros for the untrained)
    mean_grad = [sum(grads[c][j] for c in range(CLIENTS)) / CLIENTS for j in range(2)]
    _close([out.server_state["h/000"], out.server_state["h/001"]], mean_grad)


def test_layers_that_do_not_train_carry_no_state(models: Path) -> None:
    """Batch-norm moving statistics: no gradient state, no h, a plain mean."""
    fed = Federation(_params(f"{models}:normalized"), _data())
    weights = [np.asarray(w) for w in fed.runner.model.get_weights()]
    frozen = sorted(set(range(len(weights))) - set(fed.runner.trainable_indices()))
    assert frozen  # moving mean and variance
    out = fed.round(1, weights, None)
    updates = [r.update.weights for r in fed.trained]
    for j in frozen:
        assert not np.any(out.server_state[f"h/{j:03d}"])
        for r in fed.trained:
            assert not np.any(r.state["feddyn"][f"grad/{j:03d}"])
        np.testing.assert_allclose(out.weights[j], np.mean([u[j] for u in updates], 0))
        assert not np.allclose(out.weights[j], weights[j])  # the statistics moved
    trainable = fed.runner.trainable_indices()
    assert any(np.any(out.server_state[f"h/{j:03d}"]) for j in trainable)


def test_alpha_reaches_the_client_from_strategy_options(models: Path) -> None:
    params = _params(f"{models}:logistic")
    strategy = strategy_for(params)
    client = client_algorithm_for(params, model_spec(params, _data().spec), strategy)
    assert type(client).__name__ == "FedDynClient"
    assert client.alpha == ALPHA == strategy.alpha
    assert strategy.total_clients == CLIENTS
    # client.options overrides what the strategy passes on
    params = _params(f"{models}:logistic", client={"options": {"alpha": 0.5}})
    client = client_algorithm_for(params, model_spec(params, _data().spec), strategy)
    assert client.alpha == 0.5


def test_plugin_classes_load_as_subclasses(models: Path) -> None:
    strategy = load_subclass(f"{FEDDYN}:FedDyn", Strategy, key="strategy.name")
    client = load_subclass(f"{FEDDYN}:FedDynClient", ClientAlgorithm, key="k")
    assert strategy.client_algorithm is client
    assert client.name == "feddyn"
    # nothing of FedDyn is in the package: only the plugin file defines it
    assert "feddyn" not in STRATEGIES and "feddyn" not in CLIENT_ALGORITHMS


# ---------------------------------------------------------------- bad references


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("examples/feddyn/missing.py:FedDyn", "file examples/feddyn/missing.py"),
        (f"{FEDDYN}:FedDin", "has no 'FedDin'; it defines"),
        (f"{FEDDYN}:FedDynClient", "allowed: a subclass of fedpipe.strategy.base"),
        (f"{FEDDYN}:grad_delta", "is a function; allowed: a subclass"),
    ],
)
def test_a_wrong_strategy_reference_names_the_key(
    models: Path, strategy: str, expected: str
) -> None:
    params = _params(f"{models}:logistic", strategy={"name": strategy})
    with pytest.raises(ParamsError, match="strategy.name") as err:
        strategy_for(params)
    assert expected in str(err.value)


def test_a_wrong_client_reference_names_the_key(models: Path) -> None:
    params = _params(f"{models}:logistic", client={"algorithm": f"{FEDDYN}:FedDyn"})
    spec = model_spec(params, _data().spec)
    with pytest.raises(ParamsError, match="client.algorithm") as err:
        client_algorithm_for(params, spec, strategy_for(params))
    assert "subclass of fedpipe.client.base.ClientAlgorithm" in str(err.value)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"alpha": -1.0}, "strategy.options.alpha: -1.0; allowed: a number alpha > 0"),
        ({"alpha": 0.1, "beta": 2}, "strategy.options.beta: not a setting of FedDyn"),
    ],
)
def test_bad_strategy_options_name_the_key(
    models: Path, options: dict, expected: str
) -> None:
    params = _params(f"{models}:logistic", strategy={"options": options})
    with pytest.raises(ParamsError, match=expected):
        strategy_for(params)


def test_a_model_function_returning_no_model_names_the_key(models: Path) -> None:
    with pytest.raises(ParamsError, match="model.name=.*returned str .a model.") as err:
        build_model(f"{models}:not_a_model", (2,), 2)
    assert "allowed: an uncompiled keras.Model" in str(err.value)


def test_a_missing_model_function_names_the_key(models: Path) -> None:
    with pytest.raises(ParamsError, match="model.name=.*has no 'logistc'"):
        build_model(f"{models}:logistc", (2,), 2)

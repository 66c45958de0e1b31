"""Every variable of a user's model is aggregated, whatever its name, and none is
carried from one client to the next.

pfl-research 0.6.0's TensorFlow adapter finds a model's variables by name; under
Keras 3 every layer names its weights ``kernel``/``bias``, so it averaged only the
last layer and let the others train on from client to client (issue 27). fedpipe
takes ``model.get_weights()`` by position. Here a user model whose custom layers
name every weight ``w``, with non-trainable state of two kinds (batch-norm moving
statistics and a custom running mean updated in training), runs one FedAvg round
through :func:`fedpipe.federation.round.run_round`; each variable of the new global
model must be the sample-weighted mean of the clients' (so one left out, or one
taken from the last client, fails), and a client's trained weights must not depend
on what another client trained on in the same round.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers_fl import run_federation

MODEL = '''
import keras
from keras import layers


class Alike(layers.Layer):
    """A dense layer whose weights are all named ``w``."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units

    def build(self, shape):
        self.a = self.add_weight(
            shape=(shape[-1], self.units), initializer="glorot_uniform", name="w"
        )
        self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="w")

    def call(self, x):
        return keras.ops.matmul(x, self.a) + self.b


class Running(layers.Layer):
    """Non-trainable state named ``w``: a running mean of its inputs in training."""

    def build(self, shape):
        self.m = self.add_weight(
            shape=(shape[-1],), initializer="zeros", trainable=False, name="w"
        )

    def call(self, x, training=False):
        if training:
            self.m.assign(0.9 * self.m + 0.1 * keras.ops.mean(x, axis=0))
        return x


def build(input_shape, n_classes):
    inputs = keras.Input(input_shape)
    x = layers.Flatten()(inputs)
    x = Alike(16)(x)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)
    x = Running()(x)
    x = Alike(n_classes)(x)
    return keras.Model(inputs, layers.Activation("softmax")(x))
'''


def _federate(root: Path, *, spoil_client: int | None = None) -> dict:
    """One FedAvg round of 3 clients; what each sent, their sizes, the globals."""
    root.mkdir()
    (root / "alike.py").write_text(MODEL)
    sent: dict[int, list[np.ndarray]] = {}
    sizes: dict[int, int] = {}
    globals_: list = []

    def record(client: int, _round: int, weights: list) -> list:
        sent[client] = [np.array(w) for w in weights]
        return weights

    def data(client):
        sizes[client.client] = len(client.y_train)
        if client.client == spoil_client:  # other labels for one client
            client = type(client)(
                client.client,
                client.x_train,
                np.roll(client.y_train, 1),
                client.x_test,
                client.y_test,
            )
        return client

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # model.name is relative to the project root
        run_federation(
            root,
            model="alike.py:build",
            n_samples=300,
            clients=3,
            rounds=1,
            client_update=record,
            client_data=data,
            weights_out=globals_,
        )
    return {"sent": sent, "sizes": sizes, "before": globals_[0], "after": globals_[1]}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _federate(tmp_path_factory.mktemp("alike") / "a")


def test_every_variable_trains_or_updates(run: dict) -> None:
    # 2 x (kernel, bias) + batch norm (gamma, beta, moving mean, moving var) +
    # the running mean: 9 variables, all named alike or by Keras, all moved
    assert len(run["before"]) == 9
    for client, weights in run["sent"].items():
        for i, (w, w0) in enumerate(zip(weights, run["before"], strict=True)):
            assert not np.array_equal(w, w0), f"client {client} variable {i} unchanged"


def test_every_variable_is_the_weighted_mean_of_the_clients(run: dict) -> None:
    clients = sorted(run["sent"])
    assert clients == [0, 1, 2]
    n = np.array([run["sizes"][c] for c in clients], dtype=np.float64)
    for i, got in enumerate(run["after"]):
        stacked = np.stack([run["sent"][c][i].astype(np.float64) for c in clients])
        mean = np.tensordot(n / n.sum(), stacked, axes=1)
        np.testing.assert_allclose(got, mean, rtol=1e-5, atol=1e-7, err_msg=f"var {i}")
        # not any one client's value (a variable carried, not aggregated)
        for c in clients:
            assert not np.array_equal(got, run["sent"][c][i]), f"var {i} = client {c}'s"


def test_no_variable_is_carried_from_client_to_client(
    run: dict, tmp_path: Path
) -> None:
    spoiled = _federate(tmp_path / "spoiled", spoil_client=0)
    assert not np.array_equal(spoiled["sent"][0][0], run["sent"][0][0])
    for client in (1, 2):
        for i, (w, w_ref) in enumerate(
            zip(spoiled["sent"][client], run["sent"][client], strict=True)
        ):
            assert np.array_equal(w, w_ref), f"client {client} variable {i}"

"""A client job sent to a Dask worker carries the weights, the state and a data
reference, not the client's features (fedpipe.federation.round.ClientJob over
fedpipe.data.splits.open_federated)."""

from __future__ import annotations

import pickle
from pathlib import Path

import cloudpickle
import numpy as np
from helpers_store import prepared_store

from fedpipe.client import ClientTask, LocalTraining, make_client
from fedpipe.data.splits import ClientData, forget_opened, open_federated
from fedpipe.model.jobs import ClientJob
from fedpipe.model.trainer import run_client
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights

SHAPE = (12, 12, 3)
SPEC = ModelSpec(name="mlp", input_shape=SHAPE, n_classes=3, optimizer="sgd", lr=0.05)


def _job(client: ClientData, weights: list[np.ndarray]) -> ClientJob:
    state = {"scaffold": {"c_i": [np.zeros_like(w) for w in weights]}}
    return ClientJob(
        spec=SPEC,
        algorithm=make_client("sgd"),
        task=ClientTask(
            client=client.client, round=1, global_weights=weights, state=state, seed=0
        ),
        data=client,
        training=LocalTraining(epochs=1, batch_size=16, lr=0.05),
    )


def test_a_pickled_job_is_about_its_weights_whatever_the_data_size(
    tmp_path: Path,
) -> None:
    weights = initial_weights(SPEC, 0)
    model_bytes = sum(w.nbytes for w in weights)
    sizes, by_value, n_rows = {}, {}, {}
    for n in (150, 3000):
        forget_opened()
        root = tmp_path / str(n)
        client = open_federated(
            prepared_store(root, n, shape=SHAPE), root / "manifest.json"
        ).clients[0]
        job = _job(client, weights)
        payload = cloudpickle.dumps(job)
        assert client.x_train.tobytes()[:64] not in payload
        sizes[n] = len(payload)
        n_rows[n] = len(client.y_train) + len(client.y_test)
        copy = ClientData(
            client.client, client.x_train, client.y_train, client.x_test, client.y_test
        )
        by_value[n] = len(cloudpickle.dumps(_job(copy, weights)))
    # weights + the same-sized state: 2x the model, plus a few kB of the rest
    assert sizes[150] < 2 * model_bytes + 8_000
    assert abs(sizes[3000] - sizes[150]) < 64  # 20x the data, the same job
    # what a job carried before: the client's float32 arrays
    float_bytes = (n_rows[3000] - n_rows[150]) * int(np.prod(SHAPE)) * 4
    assert by_value[3000] - by_value[150] >= float_bytes


def test_a_job_unpickled_elsewhere_trains_to_the_same_bits(tmp_path: Path) -> None:
    forget_opened()
    prepared = prepared_store(tmp_path, 200, shape=SHAPE)
    client = open_federated(prepared, tmp_path / "manifest.json").clients[1]
    weights = initial_weights(SPEC, 0)
    job = _job(client, weights)
    payload = pickle.dumps(job)
    runner = ModelRunner(SPEC)
    here = run_client(job, runner)
    forget_opened()  # as a fresh worker process: opens the files itself
    there = run_client(pickle.loads(payload), runner)
    for a, b in zip(here.update.weights, there.update.weights, strict=True):
        assert a.tobytes() == b.tobytes()
    assert here.local == there.local

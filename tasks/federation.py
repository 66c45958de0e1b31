"""Tasks of a federation round: init, client training, aggregation, evaluation."""

from __future__ import annotations

import functools
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
from fedpipe.health import round_health
from fedpipe.models import (
    describe_model,
    layer_groups,
    layer_info,
    normalization_layers,
)
from fedpipe.personalization import NO_PERSONALIZATION, Personalization, resolve
from fedpipe.seeds import derive_seed
from fedpipe.strategy import ClientUpdate, Strategy
from fedpipe.strategy.aggregate import normalized
from fedpipe.strategy.scaffold import CONTROL_DELTA, client_control_update
from fedpipe.training import ModelSpec, initial_weights
from fedpipe.weights import save_state, save_weights
from tasks.runtime import cached_runner, runner_for, where_am_i


@task(name="init-model", cache_policy=NO_CACHE)
def init_model(
    spec: ModelSpec,
    seed: int,
    strategy: Strategy,
    *,
    weights_out: Path,
    state_out: Path,
    client_state_out: Path,
) -> None:
    """Write the initial global model (round 0), the strategy's initial state and
    the clients' (empty) state."""
    weights = initial_weights(spec, seed)
    save_weights(weights_out, weights)
    save_state(state_out, strategy.init_state(weights))
    save_state(client_state_out, {})
    get_run_logger().info(
        "%s; strategy %s", describe_model(spec.build()), strategy.name
    )


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
    proximal_mu: float = 0.0,
    controls: tuple[list[np.ndarray], list[np.ndarray]] | None = None,
    personalization: Personalization = NO_PERSONALIZATION,
    kept: dict[int, np.ndarray] | None = None,
    max_steps: int | None = None,
) -> ClientResult:
    """Train one client from the global weights; evaluate its local model.

    ``controls`` = (server control c, the client's control c_i) makes this a
    SCAFFOLD client: gradients are corrected by c - c_i, and the result carries
    the control delta (for the server) and the new c_i (kept for next round).
    ``personalization`` with the client's ``kept`` arrays: fedper/fedbn train from
    the global weights with the client's own personal layers and send only the
    shared ones; ditto also trains the client's personal model. What the client
    keeps for the next round is in the result's ``kept``.
    """
    kept = kept or {}
    start = personalization.start_weights(global_weights, kept)
    runner, built = cached_runner(spec)
    if built:
        get_run_logger().info(
            "%s compiled in %s; reused for later clients and rounds",
            spec.name,
            where_am_i(),
        )
    trainable = runner.trainable_indices()
    correction = None
    if controls is not None:
        c, c_i = controls
        correction = [(c[j] - c_i[j]).astype(np.float32) for j in trainable]
    weights = runner.fit(
        start,
        client.x_train,
        client.y_train,
        epochs=epochs,
        batch_size=batch_size,
        seed=derive_seed(seed, "train", round_, client.client),
        proximal_mu=proximal_mu,
        gradient_correction=correction,
        max_steps=max_steps,
    )
    train_loss = runner.last_train_loss
    extras: dict[str, list[np.ndarray]] = {}
    state = None
    if controls is not None:
        state, delta = client_control_update(
            x=global_weights,
            y=weights,
            c=controls[0],
            c_i=controls[1],
            steps=runner.last_steps,
            lr=spec.lr,
            trainable=trainable,
        )
        extras = {CONTROL_DELTA: delta}
    local = runner.evaluate(weights, client.x_test, client.y_test)
    new_kept: dict[int, np.ndarray] | None = None
    if personalization.keeps_layers:
        new_kept = personalization.kept_part(weights)
        weights = personalization.shared_part(weights, global_weights)
    elif personalization.method == "ditto":
        personal = runner.fit(
            personalization.personal_model(global_weights, kept),
            client.x_train,
            client.y_train,
            epochs=epochs,
            batch_size=batch_size,
            seed=derive_seed(seed, "ditto", round_, client.client),
            proximal_mu=personalization.ditto_lambda,
            anchor=global_weights,
            max_steps=max_steps,
        )
        new_kept = dict(enumerate(personal))
    return ClientResult(
        client.client,
        len(client.y_train),
        len(client.y_test),
        weights,
        local,
        extras=extras,
        state=state,
        kept=new_kept,
        train_loss=train_loss,
    )


def personalization_for(
    spec: ModelSpec,
    method: str,
    *,
    layers: list[str] | None = None,
    last_k: int | None = None,
    finetune_epochs: int | None = None,
    ditto_lambda: float | None = None,
) -> Personalization:
    """``personalization.*`` resolved against the model's layers (raises
    ParamsError naming the key when they do not fit the model)."""
    groups, norms = _layer_table(spec)
    return resolve(
        method,
        groups,
        norms,
        layers=layers,
        last_k=last_k,
        finetune_epochs=finetune_epochs,
        ditto_lambda=ditto_lambda,
    )


@functools.lru_cache(maxsize=8)
def _layer_table(spec: ModelSpec) -> tuple[list, list[str]]:
    """The model's weight-bearing layers and its normalization layers, from an
    uncompiled build (no training step is compiled for this)."""
    model = spec.build()
    return layer_groups(model), normalization_layers(model)


@task(name="evaluate-personalized", cache_policy=NO_CACHE)
def evaluate_personalized(
    spec: ModelSpec,
    personalization: Personalization,
    weights: list[np.ndarray],
    data: FederatedData,
    kept: dict[int, dict[int, np.ndarray]],
    *,
    round_: int,
    seed: int,
    batch_size: int,
) -> list[dict[str, float]]:
    """Every client's personalized model on its own local test split.

    fedper/fedbn: the new global model with the client's personal layers; ditto:
    the client's personal model; finetune: the new global model trained
    ``finetune_epochs`` on the client's training split. A client that has not
    trained yet uses the global model's layers.
    """
    runner = runner_for(spec)
    out = []
    for client in data.clients:
        own = kept.get(client.client, {})
        if personalization.method == "finetune":
            model = runner.fit(
                weights,
                client.x_train,
                client.y_train,
                epochs=personalization.finetune_epochs,
                batch_size=batch_size,
                seed=derive_seed(seed, "finetune", round_, client.client),
            )
        else:
            model = personalization.personal_model(weights, own)
        out.append(runner.evaluate(model, client.x_test, client.y_test))
    return out


@task(name="aggregate", cache_policy=NO_CACHE)
def aggregate(
    strategy: Strategy,
    global_weights: list[np.ndarray],
    state: dict[str, np.ndarray],
    results: list[ClientResult],
) -> tuple[list[np.ndarray], dict[str, np.ndarray], float]:
    """New global weights and server state; also the sum of the sample weights."""
    updates = [ClientUpdate(r.client, r.weights, r.n_train, r.extras) for r in results]
    new, new_state = strategy.aggregate_round(global_weights, updates, state)
    return new, new_state, float(normalized([u.n_samples for u in updates]).sum())


@task(name="evaluate", cache_policy=NO_CACHE)
def evaluate(
    spec: ModelSpec,
    weights: list[np.ndarray],
    data: FederatedData,
    results: list[ClientResult],
    *,
    round_: int,
    weight_sum: float,
    personalized: list[dict[str, float]] | None = None,
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
        personalized=personalized,
    )


@task(name="health", cache_policy=NO_CACHE)
def health(
    spec: ModelSpec,
    before: list[np.ndarray],
    after: list[np.ndarray] | None,
    data: FederatedData,
    results: list[ClientResult],
    *,
    round_: int,
    record: RoundRecord | None = None,
) -> dict:
    """The round's health record (``metrics/health/round-K.json``): client update
    norms and cosines, per-layer divergence, the aggregation actually applied, the
    global model's calibration. ``after`` is None when aggregation refused the
    updates (the client and layer parts are still measured)."""
    runner = runner_for(spec)
    probs = losses = labels = None
    if after is not None:
        probs, losses = runner.predict(after, data.x_test, data.y_test)
        labels = data.y_test
    record_ = round_health(
        round_,
        before=before,
        after=after,
        client_weights={r.client: r.weights for r in results},
        n_train={r.client: r.n_train for r in results},
        train_loss={r.client: r.train_loss for r in results},
        layers=layer_info(runner.model),
        trainable=runner.trainable_indices(),
        probs=probs,
        labels=labels,
        losses=losses,
        record=record,
    )
    # what it cost is logged, not versioned: the record must be the same bits
    # whenever the round is recomputed (dvc repro, another runner)
    get_run_logger().debug("health record: %.3f s", record_.pop("seconds"))
    return record_


@task(name="write-round", cache_policy=NO_CACHE)
def write_round(
    record: RoundRecord,
    weights: list[np.ndarray],
    state: dict[str, np.ndarray],
    client_state: dict[str, np.ndarray],
    *,
    model_out: Path,
    state_out: Path,
    client_state_out: Path,
    metrics_out: Path,
    clients_out: Path,
    health: dict | None = None,
    health_out: Path | None = None,
) -> None:
    """Write the round's versioned outputs: global weights and metrics."""
    if health is not None and health_out is not None:
        write_json(health_out, health)
    save_weights(model_out, weights)
    save_state(state_out, state)
    save_state(client_state_out, client_state)
    write_json(metrics_out, record.summary())
    clients_out.parent.mkdir(parents=True, exist_ok=True)
    record.client_table().to_csv(clients_out, index=False, float_format="%.6g")

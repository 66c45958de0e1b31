"""One Prefect flow per DVC stage. They wire tasks together and do nothing else.

``dvc repro`` runs each stage's command (``fedpipe stage NAME``), which calls the
flow here as a top-level flow run; ``fedpipe run`` calls the same flows as subflows
of one run, in one process. Same code, same outputs, either way.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from fedpipe import layout
from fedpipe.config import MNIST5K_PATH, Params
from fedpipe.data import prepared_spec
from fedpipe.faults import misweighted_aggregate
from fedpipe.federation import (
    ClientResult,
    RoundRecord,
    client_arrays,
    sample_clients,
    with_client_arrays,
    write_json,
)
from fedpipe.history import progress_line
from fedpipe.personalization import Personalization, kept_arrays, with_kept_arrays
from fedpipe.strategy import AggregationError, Strategy, make_strategy
from fedpipe.strategy.scaffold import Scaffold
from fedpipe.training import ModelSpec, model_spec_for
from fedpipe.weights import load_state, load_weights
from tasks import data as data_tasks
from tasks import federation as fed_tasks
from tasks.artifacts import publish_round_table
from tasks.report import summarize
from tasks.runtime import DaskScheduler, data_for


def model_spec(params: Params) -> ModelSpec:
    """The model the experiment trains, from ``model.*``, ``train.*`` and the data."""
    return model_spec_for(params, prepared_spec(layout.PREPARED_DIR))


def strategy_for(params: Params) -> Strategy:
    """The server strategy from ``strategy.name`` and its ``strategy.*`` settings."""
    return make_strategy(
        params.strategy.name,
        total_clients=params.federation.clients,
        **params.strategy.settings(),
    )


def personalization_for(params: Params, spec: ModelSpec) -> Personalization:
    """``personalization.*`` resolved against the model's layers."""
    p = params.personalization
    return fed_tasks.personalization_for(
        spec, p.method, **p.model_dump(exclude={"method"})
    )


@flow(name="mnist5k", flow_run_name="mnist5k")
def mnist5k_stage(params: Params) -> None:
    """Stage ``mnist5k``: the built-in digits as ``data/raw/mnist5k.parquet``."""
    data_tasks.materialize_mnist5k(Path(MNIST5K_PATH))


@flow(name="ingest", flow_run_name="ingest")
def ingest_stage(params: Params) -> None:
    """Stage ``ingest``: ``data.source`` in the prepared format (``data/prepared``)."""
    data_tasks.ingest(params.data, layout.PREPARED_DIR)


@flow(name="validate", flow_run_name="validate")
def validate_stage(params: Params) -> None:
    """Stage ``validate``: Great Expectations checks on the prepared data."""
    data_tasks.validate(
        layout.PREPARED_DIR, params.validation, report_dir=layout.VALIDATION_DIR
    )


@flow(name="partition", flow_run_name="partition")
def partition_stage(params: Params) -> None:
    """Stage ``partition``: held-out test split, clients, local train/test splits."""
    p = params.partition
    data_tasks.partition(
        layout.PREPARED_DIR,
        layout.MANIFEST,
        layout.PARTITION_REPORT_DIR,
        classes=prepared_spec(layout.PREPARED_DIR).classes,
        seed=params.seed,
        test_fraction=params.data.test_fraction,
        method=p.method,
        n_clients=params.federation.clients,
        local_test_fraction=p.local_test_fraction,
        dedupe=params.data.dedupe,
        settings=p.model_dump(exclude={"method", "local_test_fraction"}),
    )


@flow(name="init-model", flow_run_name="init-model")
def init_stage(params: Params) -> None:
    """Stage ``init``: the global model before round 1."""
    spec = model_spec(params)
    personalization_for(params, spec)  # a bad personalization.* stops here
    fed_tasks.init_model(
        spec,
        params.seed,
        strategy_for(params),
        weights_out=layout.model_weights(0),
        state_out=layout.server_state(0),
        client_state_out=layout.client_state(0),
    )


@flow(name="federation-round", flow_run_name="round {round_}")
def round_stage(params: Params, round_: int) -> dict:
    """Stage ``round@K``: sample clients, train each (a task per client), aggregate,
    evaluate, and write the new global model and the round's metrics."""
    started = time.perf_counter()
    spec = model_spec(params)
    data = data_for(layout.PREPARED_DIR, layout.MANIFEST)
    global_weights = load_weights(layout.model_weights(round_ - 1))
    server_state = load_state(layout.server_state(round_ - 1))
    strategy = strategy_for(params)
    personal = personalization_for(params, spec)
    proximal_mu = float(strategy.client_settings().get("proximal_mu", 0.0))
    client_states = load_state(layout.client_state(round_ - 1))
    server_control = (
        strategy.server_control(server_state)
        if isinstance(strategy, Scaffold)
        else None
    )
    selected = sample_clients(
        n_clients=len(data.clients),
        per_round=params.federation.clients_per_round(),
        seed=params.seed,
        round_=round_,
    )
    results = _train_selected(
        [
            dict(
                spec=spec,
                global_weights=global_weights,
                client=data.clients[c],
                round_=round_,
                seed=params.seed,
                epochs=params.train.epochs,
                batch_size=params.train.batch_size,
                proximal_mu=proximal_mu,
                controls=None
                if server_control is None
                else (server_control, client_arrays(client_states, c, global_weights)),
                personalization=personal,
                kept=kept_arrays(client_states, c),
                max_steps=params.train.local_steps,
            )
            for c in selected
        ],
        runner=params.runtime.runner,
    )
    client_states = with_client_arrays(
        client_states, {r.client: r.state for r in results if r.state is not None}
    )
    client_states = with_kept_arrays(
        client_states, {r.client: r.kept for r in results if r.kept is not None}
    )
    try:
        new_weights, new_state, weight_sum = fed_tasks.aggregate(
            strategy, global_weights, server_state, results
        )
    except AggregationError:
        # what the doctor needs to name the client that sent non-finite values
        write_json(
            layout.health_metrics(round_),
            fed_tasks.health(spec, global_weights, None, data, results, round_=round_),
        )
        raise
    new_weights = personal.restore_personal(new_weights, global_weights)
    if params.faults.aggregation_weight_sum is not None:
        new_weights = misweighted_aggregate(
            global_weights, new_weights, params.faults.aggregation_weight_sum
        )
    personalized = None
    if personal.enabled:
        personalized = fed_tasks.evaluate_personalized(
            spec,
            personal,
            new_weights,
            data,
            {c.client: kept_arrays(client_states, c.client) for c in data.clients},
            round_=round_,
            seed=params.seed,
            batch_size=params.train.batch_size,
        )
    record: RoundRecord = fed_tasks.evaluate(
        spec,
        new_weights,
        data,
        results,
        round_=round_,
        weight_sum=weight_sum,
        personalized=personalized,
    )
    health = fed_tasks.health(
        spec, global_weights, new_weights, data, results, round_=round_, record=record
    )
    publish_round_table(record)
    fed_tasks.write_round(
        record,
        new_weights,
        new_state,
        client_states,
        model_out=layout.model_weights(round_),
        state_out=layout.server_state(round_),
        client_state_out=layout.client_state(round_),
        metrics_out=layout.round_metrics(round_),
        clients_out=layout.client_metrics(round_),
        health=health,
        health_out=layout.health_metrics(round_),
    )
    summary = record.summary()
    get_run_logger().info(
        progress_line(summary, params.federation.rounds, time.perf_counter() - started)
    )
    return summary


@flow(name="summary", flow_run_name="summary")
def summary_stage(params: Params) -> str:
    """Stage ``summary``: all rounds' history (DVC plots), final metrics, table."""
    return summarize(
        params.federation.rounds,
        history_out=layout.HISTORY_CSV,
        metrics_out=layout.SUMMARY_METRICS,
        table_out=layout.SUMMARY_TABLE,
    )


def _train_selected(calls: list[dict[str, Any]], *, runner: str) -> list[ClientResult]:
    """Train the round's selected clients, one ``train-client`` task each.

    ``calls`` holds each client's keyword arguments of ``train_client``, in client
    order; the results come back in the same order (aggregation sums in it, so the
    order decides the last bits). ``local`` runs them one after another in this
    process; ``dask`` submits them all to the flow's ``DaskTaskRunner`` (see
    :func:`run_stage`) and waits for each in turn.
    """
    if runner == "local":
        return [fed_tasks.train_client(**kwargs) for kwargs in calls]
    from prefect.context import FlowRunContext
    from prefect_dask import DaskTaskRunner

    context = FlowRunContext.get()
    if context is None or not isinstance(context.task_runner, DaskTaskRunner):
        raise RuntimeError(
            "runtime.runner=dask needs the round flow to run on a DaskTaskRunner; "
            "start rounds through run_stage()"
        )
    futures = [fed_tasks.train_client.submit(**kwargs) for kwargs in calls]
    return [future.result() for future in futures]


def run_stage(params: Params, stage: str, *, dask: DaskScheduler | None = None) -> None:
    """Run the flow of a DVC stage name such as ``partition`` or ``round@3``.

    With ``runtime.runner: dask`` a round runs on a ``DaskTaskRunner`` connected
    to ``dask`` (the run's scheduler); without one, a scheduler is made for this
    round alone (``fedpipe stage round K``, i.e. ``dvc repro``).
    """
    name, _, arg = stage.partition("@")
    if name != layout.ROUND_STAGE:
        STAGE_FLOWS[name](params)
    elif params.runtime.runner == "local":
        round_stage(params, int(arg))
    else:
        from prefect_dask import DaskTaskRunner

        with ExitStack() as stack:
            if dask is None:
                dask = stack.enter_context(dask_scheduler(params))
            on_dask = round_stage.with_options(
                task_runner=DaskTaskRunner(address=dask.address())
            )
            on_dask(params, int(arg))


def dask_scheduler(params: Params) -> DaskScheduler:
    """The run's Dask scheduler from ``runtime.*`` (use it in a ``with`` block)."""
    return DaskScheduler(
        address=params.runtime.dask_address, workers=params.runtime.dask_workers
    )


STAGE_FLOWS = {
    "mnist5k": mnist5k_stage,
    "ingest": ingest_stage,
    "validate": validate_stage,
    "partition": partition_stage,
    "init": init_stage,
    "summary": summary_stage,
}

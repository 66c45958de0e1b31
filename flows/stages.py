"""One Prefect flow per DVC stage. They wire tasks together and do nothing else.

``dvc repro`` runs each stage's command (``fedpipe stage NAME``), which calls the
flow here as a top-level flow run. ``fedpipe run`` runs the same functions as task
runs of its one flow run (``round 3``, ``partition``, ...), their own tasks nested
under them: a subflow costs five blocking API calls (about 0.35 s a round on a
2-core machine, measured with py-spy), a task run none (its states travel as
events). Same code, same outputs, either way. On Dask a round's clients train
on the workers as plain function calls under the round's one ``train-clients``
task run.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from prefect import Flow, Task, flow, task
from prefect.cache_policies import NO_CACHE
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
from prefect.utilities.annotations import quote

from fedpipe.config import layout
from fedpipe.config.params import MNIST5K_PATH, Params
from fedpipe.data.sources import prepared_spec
from fedpipe.model.cohort import cohort_size_for
from fedpipe.model.jobs import (
    ClientFailure,
    ClientJob,
    ClientResult,
    MapClients,
    task_name,
)
from fedpipe.model.threads import usable_cores
from orchestration import console
from orchestration.runtime import DaskScheduler
from tasks import data as data_tasks
from tasks import federation as fed_tasks
from tasks.artifacts import flush_artifacts
from tasks.report import summarize


class LazyFlow:
    """A stage's Prefect flow, made when it is first called.

    Making a :class:`prefect.Flow` builds the JSON schema of its parameters
    (``params: Params``, the whole settings model: about 0.05 s a flow); eight
    stage flows made at import cost every command that imports this module
    (``fedpipe run``, each ``fedpipe stage`` of ``dvc repro``) about 0.35 s,
    while ``fedpipe run`` calls none of them (its stages are task runs,
    :data:`STAGE_TASKS`, made from :attr:`fn`) and ``fedpipe stage`` one.
    """

    def __init__(self, fn: Callable[..., Any], *, name: str, flow_run_name: str):
        self.fn, self.name, self.flow_run_name = fn, name, flow_run_name
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def flow(self) -> Flow:  # type: ignore[type-arg]
        return flow(self.fn, name=self.name, flow_run_name=self.flow_run_name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.flow(*args, **kwargs)


def stage_flow(*, name: str, flow_run_name: str) -> Callable[..., LazyFlow]:
    """``@flow(name=..., flow_run_name=...)``, made when first called
    (:class:`LazyFlow`)."""

    def made(fn: Callable[..., Any]) -> LazyFlow:
        return LazyFlow(fn, name=name, flow_run_name=flow_run_name)

    return made


@stage_flow(name="mnist5k", flow_run_name="mnist5k")
def mnist5k_stage(params: Params) -> None:
    """Stage ``mnist5k``: the built-in digits as ``data/raw/mnist5k.parquet``."""
    data_tasks.materialize_mnist5k(Path(MNIST5K_PATH))


@stage_flow(name="ingest", flow_run_name="ingest")
def ingest_stage(params: Params) -> None:
    """Stage ``ingest``: ``data.source`` in the prepared format (``data/prepared``)."""
    data_tasks.ingest(
        params.data,
        layout.PREPARED_DIR,
        params.preprocess.categorical,
        params.preprocess.text,
    )


@stage_flow(name="validate", flow_run_name="validate")
def validate_stage(params: Params) -> None:
    """Stage ``validate``: Great Expectations checks on the prepared data."""
    data_tasks.validate(
        layout.PREPARED_DIR,
        params.validation,
        report_dir=layout.VALIDATION_DIR,
        missing=params.preprocess.missing,
    )


@stage_flow(name="partition", flow_run_name="partition")
def partition_stage(params: Params) -> None:
    """Stage ``partition``: held-out test split, clients, local train/test splits."""
    data_tasks.partition(
        layout.PREPARED_DIR,
        layout.MANIFEST,
        layout.PARTITION_REPORT_DIR,
        classes=prepared_spec(layout.PREPARED_DIR).classes,
        **params.partition_arguments(),
        min_count_shown=params.preprocess.min_count_shown,
    )


@stage_flow(name="preprocess", flow_run_name="preprocess")
def preprocess_stage(params: Params) -> None:
    """Stage ``preprocess``: the table transform, fitted from the clients'
    training statistics (``data/preprocess/transform.json``)."""
    data_tasks.preprocess(
        layout.PREPARED_DIR, layout.MANIFEST, layout.TRANSFORM, params.preprocess
    )
    data_tasks.client_statistics(
        layout.PREPARED_DIR,
        layout.MANIFEST,
        layout.CLIENT_STATS,
        layout.SKEW_PNG,
        params.preprocess,
    )


@stage_flow(name="init-model", flow_run_name="init-model")
def init_stage(params: Params) -> None:
    """Stage ``init``: the global model before round 1."""
    fed_tasks.init_model(params)


@stage_flow(name="federation-round", flow_run_name="round {round_}")
def round_stage(params: Params, round_: int) -> dict:
    """Stage ``round@K``: the ``round K`` task (round K-1's files in, the round's
    outputs out), a ``train-clients`` task under it. With ``runtime.runner:
    dask`` the round has a scheduler of its own (``dvc repro`` runs a process per
    round)."""
    with dask_scheduler(params) as dask:
        summary = federation_round(params, round_, dask)
    flush_artifacts()  # this process may end with the flow run (dvc repro)
    return summary


def federation_round(params: Params, round_: int, dask: DaskScheduler) -> dict:
    """Round K as a task run of the current flow run, told to the console."""
    console.round_started(round_, params.federation.rounds)
    # quoted: Prefect would otherwise walk every field of params for futures
    summary, line = fed_tasks.federation_round(
        quote(params), round_, _map_clients(params, dask)
    )
    console.round_finished(line)
    return summary


@stage_flow(name="summary", flow_run_name="summary")
def summary_stage(params: Params) -> str:
    """Stage ``summary``: all rounds' history (DVC plots), final metrics, table."""
    return summarize(
        params.federation.rounds,
        history_out=layout.HISTORY_CSV,
        metrics_out=layout.SUMMARY_METRICS,
        table_out=layout.SUMMARY_TABLE,
    )


def _map_clients(params: Params, dask: DaskScheduler) -> MapClients:
    """A ``train-clients`` task run (or several) for a round's jobs, results in
    job (client) order.

    ``local`` (the default): a plain call in the round's own task run (null or 0:
    no task run of their own; issue 39: the Prefect UI shows the flow, a task
    run per round and the round's table), or with ``runtime.clients_per_task``
    N groups of N jobs, a task run each (``round 3 · clients 0-9 (10)``; 1: a
    task run per client), run in this process,
    up to ``runtime.threads`` clients side by side (default: the usable cores;
    :mod:`fedpipe.model.threads`, the same bits), the console ticking per client.
    A task run per client cost about 25 ms a client a round (the Prefect server
    recording its events, the engine in this process): 30 % of a default round,
    more than a small client's whole training (measured, docs/benchmarks.md).
    Every client's result is in the round's table artifact either way.

    ``dask``: one task run for the round, sending groups of jobs to ``dask``'s
    workers: by default one job per group up to 10 clients a round, else 10
    groups (or ``runtime.clients_per_task``, or the cohort size), the console
    ticking per group.

    Within a group, clients train one by one or as vectorized cohorts of
    ``train.cohort_size`` (``auto``: :func:`fedpipe.model.cohort.cohort_size_for`,
    decided from the model here, before any group is made); groups hold whole
    cohorts (:func:`whole_cohorts`): the same cohorts whatever the grouping, so
    the same bits.

    Jobs are passed ``quote``d: Prefect would otherwise walk every array of every
    job looking for futures (about 5 ms a task).
    """
    runtime, setting = params.runtime, params.cohort_setting()
    threads = runtime.threads or usable_cores()

    def run(jobs: Sequence[ClientJob]) -> list[ClientResult | ClientFailure]:
        console.clients_started(len(jobs))
        cohort_size = cohort_size_for(setting, jobs[0].spec) if jobs else None
        per_task = whole_cohorts(runtime.clients_per_task or None, cohort_size)
        if runtime.runner == "dask":
            groups = client_groups(jobs, per_task or cohort_size, spread=True)
            on_dask = fed_tasks.train_on_dask.with_options(
                task_run_name=f"{task_name(jobs)} on Dask"
            )
            return on_dask(
                quote(groups), cohort_size, quote(dask), console.client_finished
            )
        results: list[ClientResult | ClientFailure] = []
        for group in client_groups(jobs, per_task):
            if not per_task:  # in the round's task run
                trained = fed_tasks.train_clients.fn(
                    group, cohort_size, console.client_finished, threads
                )
            else:
                trained = _train(group)(
                    quote(group), cohort_size, console.client_finished, threads
                )
            results.extend(trained)
        return results

    return run


def whole_cohorts(per_task: int | None, cohort_size: int | None) -> int | None:
    """``runtime.clients_per_task`` rounded up to whole cohorts of
    ``cohort_size``: a group's cohorts are then the ones all the round's jobs
    in one group would make, so the grouping never changes the bits."""
    if not per_task or not cohort_size or cohort_size <= 1:
        return per_task
    return math.ceil(per_task / cohort_size) * cohort_size


def client_groups(
    jobs: Sequence[ClientJob], per_task: int | None, *, spread: bool = False
) -> list[list[ClientJob]]:
    """Consecutive groups of ``per_task`` jobs. None: all in one group, or with
    ``spread`` one per job up to 10 jobs, else 10 groups of equal size but the
    last."""
    if not jobs:
        return []
    if per_task is None and not spread:
        return [list(jobs)]
    size = per_task or max(1, math.ceil(len(jobs) / 10))
    return [list(jobs[i : i + size]) for i in range(0, len(jobs), size)]


def _train(group: Sequence[ClientJob]):  # type: ignore[no-untyped-def]
    return fed_tasks.train_clients.with_options(task_run_name=task_name(group))


def run_stage(
    params: Params,
    stage: str,
    *,
    dask: DaskScheduler | None = None,
    nested: bool = False,
) -> None:
    """Run the flow of a DVC stage name such as ``partition`` or ``round@3``.

    ``nested`` (inside ``fedpipe run``'s flow run): the stage runs as a task run
    of that flow, not a subflow (see the module's docstring); a round needs
    ``dask``, the run's scheduler (used with ``runtime.runner: dask``).
    """
    name, _, arg = stage.partition("@")
    if name != layout.ROUND_STAGE:
        (STAGE_TASKS if nested else STAGE_FLOWS)[name](params)
    elif nested and dask is not None:
        federation_round(params, int(arg), dask)
    else:
        round_stage(params, int(arg))


def without_heartbeat() -> AbstractContextManager[object]:
    """Stage flow runs without Prefect's heartbeat (a ``with`` block).

    A flow run's heartbeat thread sleeps in 1 s steps and is joined when the run
    ends: 0.7-1 s a stage, 16 stages a `dvc repro`. `fedpipe run` keeps its own
    run's heartbeat (crash detection) and runs its stages without; `fedpipe stage`
    (a `dvc repro` stage) too, so a killed `dvc repro` leaves its stage's run
    Running in the UI instead of Crashed. Entered once per command: a settings
    copy costs 35 ms."""
    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def dask_scheduler(params: Params) -> DaskScheduler:
    """The run's Dask scheduler from ``runtime.*`` (use it in a ``with`` block)."""
    return DaskScheduler.from_runtime(params.runtime)


STAGE_FLOWS = {
    "mnist5k": mnist5k_stage,
    "ingest": ingest_stage,
    "validate": validate_stage,
    "partition": partition_stage,
    "preprocess": preprocess_stage,
    "init": init_stage,
    "summary": summary_stage,
}


def as_task(stage: LazyFlow) -> Task:  # type: ignore[type-arg]
    """The function of ``stage``'s flow as a task of the same name, its task runs
    named as the flow names its runs (``round 3``)."""
    return task(
        stage.fn,
        name=stage.name,
        task_run_name=stage.flow_run_name,
        cache_policy=NO_CACHE,
    )


STAGE_TASKS = {name: as_task(f) for name, f in STAGE_FLOWS.items()}

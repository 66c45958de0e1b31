"""Tasks of a federation round: init, the round (its inputs read, the library's
:func:`fedpipe.federation.round.run_round`, its outputs written: see
:mod:`fedpipe.federation.roundfiles`), one group of clients' training
(:func:`fedpipe.model.process.train_group`). These only do I/O, retries and
logging.

A round is one task run (``round 3``) with its clients' ``train-clients`` task
runs nested under it: reading and writing the round's files are plain calls inside
it, not task runs of their own (each task run costs the Prefect server about 25 ms
of CPU, taken from training on a small machine)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from fedpipe.config import layout
from fedpipe.config.params import Params
from fedpipe.core.atomic import remove_paths
from fedpipe.core.errors import FederationStopped
from fedpipe.core.weights import save_state, save_weights
from fedpipe.data.splits import input_spec
from fedpipe.federation.build import client_algorithm_for, model_spec, strategy_for
from fedpipe.federation.clientstate import save_client_states
from fedpipe.federation.round import RoundFailed, run_round
from fedpipe.federation.roundfiles import load_round, write_health, write_round
from fedpipe.model.jobs import ClientFailure, ClientJob, ClientResult, MapClients
from fedpipe.model.process import runner_for, ticks, train_group
from fedpipe.model.training import initial_weights
from fedpipe.model.zoo import describe_model
from fedpipe.observe.history import progress_line
from orchestration.runtime import (
    DaskScheduler,
    result_or_say,
    retry_unless_not_loadable,
)
from tasks.artifacts import publish_round_table


@task(name="init-model", cache_policy=NO_CACHE)
def init_model(params: Params) -> None:
    """Write the initial global model (round 0), the strategy's initial state and
    the clients' (empty) state. Builds the model, strategy and client algorithm
    first, so a bad ``model.*``, ``strategy.*``, ``client.*`` or
    ``personalization.*`` (or user code that does not fit) stops here."""
    spec = model_spec(params, input_spec(layout.PREPARED_DIR, layout.TRANSFORM))
    strategy = strategy_for(params)
    algorithm = client_algorithm_for(params, spec, strategy)
    weights = initial_weights(spec, params.seed)
    save_weights(layout.model_weights(0), weights)
    save_state(layout.server_state(0), strategy.init_state(weights))
    save_client_states(layout.client_state(0), {})
    get_run_logger().info(
        "%s; strategy %s; clients run %r",
        describe_model(spec.build()),
        strategy.name,
        algorithm,
    )


@task(name="federation-round", task_run_name="round {round_}", cache_policy=NO_CACHE)
def federation_round(
    params: Params, round_: int, map_clients: MapClients
) -> tuple[dict, str]:
    """Round K: its inputs read (round K-1's files), :func:`run_round` with
    ``map_clients`` training the clients (the flow's tasks), its outputs written,
    its client table published. Returns the round's summary and its progress
    line."""
    started = time.perf_counter()
    inputs = load_round(params, round_)
    try:
        outputs = run_round(
            inputs, map_clients=map_clients, runner=runner_for(inputs.spec)
        )
    except RoundFailed as failed:
        # what the doctor needs to name the client that sent non-finite values
        # (under DP in the oracle record: .fedpipe/oracle/round-K.json)
        write_health(failed.health, round_, params)
        raise
    except FederationStopped as stopped:
        # the rounds not reached are an earlier run's: not left published as
        # this run's (DVC's cache and git keep what they versioned)
        removed = remove_paths(
            layout.unreached_outputs(stopped.round, params.federation.rounds)
        )
        if removed:
            get_run_logger().info(
                "removed %d file(s) of rounds %d-%d and the summary that an "
                "earlier run left: %s",
                len(removed), stopped.round, params.federation.rounds,
                ", ".join(str(p) for p in removed),
            )  # fmt: skip
        raise
    # what the health record cost is logged, not versioned: the record must be
    # the same bits whenever the round is recomputed (dvc repro, another runner)
    get_run_logger().debug("health record: %.3f s", outputs.health_seconds)
    table = write_round(outputs, round_, params)
    publish_round_table(outputs.record, table)
    summary = outputs.record.summary()
    line = progress_line(
        summary, params.federation.rounds, time.perf_counter() - started
    )
    get_run_logger().info(line)
    return summary, line


@task(name="train-clients", cache_policy=NO_CACHE, retries=1)
def train_clients(
    jobs: list[ClientJob],
    cohort_size: int | None = None,
    on_trained: Callable[[int], None] | None = None,
    threads: int = 1,
) -> list[ClientResult | ClientFailure]:
    """Run clients' jobs on this process's compiled model: one after another
    (side by side on ``threads`` threads, ``runtime.threads``), or as vectorized
    cohorts of ``cohort_size`` (``train.cohort_size``); ``on_trained(n)`` hears
    of each client or cohort done (the console).

    A client whose job raises comes back as a :class:`ClientFailure` (the round
    leaves it out), so the task's one retry is for infrastructure only: a result
    that could not be recorded. A retry recomputes the same bits (and ticks the
    console again: an attempt that fails takes its ticks back)."""
    with ticks(on_trained) as tick:
        results, compiled = train_group(jobs, cohort_size, tick, threads=threads)
    if compiled:
        get_run_logger().info(compiled)
    return results


@task(
    name="train-clients",
    cache_policy=NO_CACHE,
    retries=1,
    retry_condition_fn=retry_unless_not_loadable,
)
def train_on_dask(
    groups: list[list[ClientJob]],
    cohort_size: int | None,
    scheduler: DaskScheduler,
    on_trained: Callable[[int], None] | None = None,
) -> list[ClientResult | ClientFailure]:
    """Each group of jobs trained by :func:`train_group` on a Dask worker of
    ``scheduler``; the results in job order, ``on_trained(n)`` told as each group
    is collected.

    The workers run plain functions, not task runs: a Prefect task run per group
    cost the API traffic of its states from every worker, and the round flow its
    prefect-dask client connection (a round was 2.9x the local runner's at 1,000
    clients of which 100 train). The scheduler gives a lost worker's groups to
    the other workers (``distributed.scheduler.allowed-failures`` times); past
    that, the task's retry resubmits the round's groups (same bits).

    The user's own code goes to the workers first, and each group goes as bytes
    its worker unpickles in the job (:mod:`orchestration.usercode`): a group a
    worker cannot load fails the round with one line naming the cause
    (:class:`~orchestration.usercode.JobNotLoadable`), in seconds."""
    from orchestration.usercode import dump_jobs, ship_user_code, train_shipped

    client = scheduler.run_client()
    ship_user_code(client)
    futures = [
        client.submit(
            train_shipped, dump_jobs(group), cohort_size, pure=False, retries=1
        )
        for group in groups
    ]
    logger = get_run_logger()
    where = scheduler.address()
    out: list[ClientResult | ClientFailure] = []
    with ticks(on_trained) as tick:
        for future in futures:  # in job order (a group done early waits its turn)
            results, compiled = result_or_say(
                future, client, where=where, say=logger.warning
            )
            if compiled:
                logger.info(compiled)
            out.extend(results)
            tick(len(results))
    return out

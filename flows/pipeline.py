"""``fedpipe run``: the whole pipeline as one Prefect flow run in one process.

Stages run in ``dvc.yaml`` order as task runs of the one flow run (their own
tasks nested under them; see :mod:`flows.stages`). Stages that ``dvc.lock`` shows up to
date are skipped; from the first stage that runs on, every later stage runs too
(its inputs were just rewritten). Each finished stage is recorded in ``dvc.lock``
(``dvc commit``) by a task that runs while the next stage computes; records are
chained so they land in stage order, and spaced so that writing ``dvc.lock`` takes
at most a fifth of the time (:mod:`orchestration.dvclock`). Ctrl-C, SIGTERM or a lost
Prefect server during round k record every finished stage first, so the next run
resumes at round k; a run killed outright resumes after its last landed record.

Bad data never becomes the recorded state: a freshly ingested data set is recorded
only once it has passed validation. If validation fails, the previous good
``data/prepared`` is checked out again from DVC's cache and ``dvc.lock`` keeps
describing the last good run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.futures import PrefectFuture
from prefect.task_runners import ThreadPoolTaskRunner

from fedpipe.config import layout
from fedpipe.config.params import Params
from fedpipe.core.jsonio import read_json
from fedpipe.core.stopping import raise_if_stopped, stop_requested
from fedpipe.model.process import older_objects_frozen
from fedpipe.observe.runfiles import report_is_current
from flows.stages import dask_scheduler, run_stage, without_heartbeat
from orchestration import console
from orchestration.dvclock import LockRecorder, restore_stage_outputs
from orchestration.heartbeat import beating
from orchestration.repolock import hold
from orchestration.runtime import DaskScheduler
from tasks.artifacts import flush_artifacts, publish_run_artifacts
from tasks.dvc import record_stages
from tasks.report import doctor_and_report

# stages whose record waits for the stage named here to pass
GATED_BY = {"ingest": "validate"}


def run_title(params: Params) -> str:
    """A readable name for a run: project folder, strategy, model, rounds."""
    return (
        f"{Path.cwd().name} · {params.strategy.name} · {params.model.name} · "
        f"{params.federation.rounds} rounds"
    )


def _run_name() -> str:
    from prefect.runtime import flow_run

    params = flow_run.parameters.get("params")
    if not isinstance(params, Params):
        params = Params.model_validate(params)
    return run_title(params)


@flow(
    name="fedpipe-run",
    flow_run_name=_run_name,
    task_runner=ThreadPoolTaskRunner(max_workers=1),
)
def run_pipeline(
    params: Params, force: bool = False, report: bool = True, fresh: int | None = None
) -> list[str]:
    """Bring every stage up to date; returns the stages that ran.

    ``fresh``: how many stages from the first are up to date, when the caller
    knows (:meth:`fedpipe.observe.status.Staleness.fresh_prefix`); else DVC is
    asked.

    With ``report`` (the default), a run that reaches the summary stage (or
    finds every stage up to date but the report missing or older than the
    metrics) ends with the doctor's findings and the HTML report
    (``reports/report.html``), both also published as artifacts.

    With ``runtime.runner: dask`` one Dask scheduler (a local cluster unless
    ``runtime.dask_address`` names one) serves every round of the run.

    Its heartbeat is fedpipe's when the caller took it over
    (:func:`orchestration.heartbeat.own_heartbeat`, as ``fedpipe run`` does).

    The run holds the project's DVC repo lock throughout (:mod:`orchestration.repolock`;
    ``fedpipe run`` already took it): a second run, or ``dvc repro``, refuses.
    """
    console.run_started(_ui_url())
    with hold(Path(".")), beating(), older_objects_frozen():
        return _run_and_report(params, force, report, fresh)


def _run_and_report(
    params: Params, force: bool, report: bool, fresh: int | None = None
) -> list[str]:
    reported: list[tuple[str, Path]] = []

    def epilogue(ran: list[str], records_landed: Callable[[], None]) -> None:
        """The doctor and the report, while the last records are being written
        (a process of their own: side by side on two cores); the report's
        lineage waits for them (``records_landed``), so its hashes are
        dvc.lock's."""
        if report and (
            "summary" in ran
            or not report_is_current(Path("."), params.federation.rounds)
        ):  # nothing ran, the report missing or older than the metrics: made
            reported.append(doctor_and_report(Path("."), records_landed))

    with dask_scheduler(params) as dask:
        if params.runtime.runner == "dask":
            dask.start()  # workers start while the data stages run
        try:
            ran = _run_stages(params, force, dask, epilogue, fresh)
        finally:
            flush_artifacts()  # the rounds' tables, sent while training went on
    last = layout.round_metrics(params.federation.rounds)
    findings, link = (
        (reported[0][0], reported[0][1].as_uri()) if reported else (None, None)
    )
    publish_run_artifacts(
        read_json(last) if "summary" in ran and last.is_file() else None,
        ran,
        title=f"fedpipe run: {run_title(params)}",
        doctor_findings=findings,
        report_link=link,
    )
    return ran


def _ui_url() -> str | None:
    """This flow run's page in the Prefect UI (the address Prefect logs)."""
    from prefect.context import FlowRunContext
    from prefect.utilities.urls import url_for

    context = FlowRunContext.get()
    return url_for(context.flow_run) if context and context.flow_run else None


def _run_stages(
    params: Params,
    force: bool,
    dask: DaskScheduler,
    epilogue: Callable[[list[str], Callable[[], None]], None] = lambda ran, w: None,
    known_fresh: int | None = None,
) -> list[str]:
    """Run the stages not up to date, recording each; ``epilogue(ran, landed)``
    runs after the last stage, while the last records are being written:
    ``landed()`` waits for them (and raises if one failed)."""
    logger = get_run_logger()
    root = Path(".")
    stages = layout.stage_names(params.federation.rounds, params.data.source)
    ran: list[str] = []
    waiting: list[str] = []  # ran, record deferred until their gate passes
    with LockRecorder(root) as recorder, without_heartbeat():
        # the recorder's process (it imports DVC, about a second of CPU) reads
        # dvc.lock now and records later stages while rounds train
        if force:
            fresh = 0
        elif known_fresh is not None:
            fresh = known_fresh
        else:
            fresh = recorder.fresh_prefix(stages)
        for stage in stages[:fresh]:
            logger.info("%s: up to date (dvc.lock)", stage)
        records = _Records(recorder)
        for stage in stages[fresh:]:
            if stop_requested():  # a Ctrl-C the last stage's flow engine swallowed
                records.finish()  # that stage is complete: record it, then stop
                raise_if_stopped()
            console.stage_started(stage)
            try:
                run_stage(params, stage, dask=dask, nested=True)
            except Exception:
                records.finish(failing=True)
                # a Ctrl-C that landed while Prefect set up a task run comes out
                # as another error ("Task run is not set"): it is the interrupt
                raise_if_stopped()
                for held in waiting:
                    logger.warning("%s: restoring its last recorded outputs", held)
                    restore_stage_outputs(root, held)
                raise
            except BaseException:  # Ctrl-C; SIGTERM, which Prefect's task engine
                records.finish(failing=True)  # raises as its TerminationSignal:
                raise  # the stages done are kept
            ran.append(stage)
            if stage in GATED_BY:
                waiting.append(stage)
                continue
            records.add([s for s in waiting if GATED_BY[s] == stage] + [stage])
            waiting = [s for s in waiting if GATED_BY[s] != stage]
        records.flush()
        try:
            # what reads dvc.lock waits for records.finish (issue 36, defect 6:
            # the report read it beside the last records and named round@1 of
            # 20 as the final model)
            epilogue(ran, records.finish)
        except BaseException:
            records.finish(failing=True)
            raise
        records.finish()
    raise_if_stopped()
    return ran


class _Records:
    """Stages waiting to be recorded in ``dvc.lock``, one record in flight.

    A record starts once the previous one is done and, between rounds, the
    recorder has rested (:meth:`LockRecorder.rested`), and takes every stage that
    finished meanwhile: when stages are quicker than recording, one ``dvc.lock``
    write records several of them.
    """

    def __init__(self, recorder: LockRecorder) -> None:
        self.recorder = recorder
        self.pending: list[str] = []
        # records submitted, oldest first; the task runner's one worker writes
        # them in that order
        self.in_flight: list[PrefectFuture] = []

    def add(self, stages: list[str]) -> None:
        self.recorder.queue(stages)  # recorded even if the run must end abruptly
        self.pending.extend(stages)
        while self.in_flight and self.in_flight[0].wrapped_future.done():
            self.in_flight.pop(0).result()  # raises if that record failed
        # the recorder rests between rounds only: a data stage (ingest, validate,
        # partition...) is recorded as soon as it can be, so that not even a
        # kill -9 makes the next run redo it
        urgent = any(not s.startswith(f"{layout.ROUND_STAGE}@") for s in self.pending)
        if not self.in_flight and (urgent or self.recorder.rested()):
            self.flush()

    def flush(self) -> None:
        """Start recording everything pending now (after the record in flight)."""
        if self.pending:
            self.in_flight.append(record_stages.submit(self.recorder, self.pending))
            self.pending = []

    def finish(self, *, failing: bool = False) -> None:
        """Record everything pending and wait for it. While a stage is ``failing``,
        a failed record is logged, not raised (the stage's error is the one to
        report)."""
        self.flush()
        while self.in_flight:
            future = self.in_flight.pop(0)
            if failing:
                future.wait()
                if future.state.is_failed():
                    get_run_logger().error("recording in dvc.lock failed")
            else:
                future.result()

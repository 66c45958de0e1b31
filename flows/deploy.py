"""The federation as a Prefect deployment: a schedule and a Run button in the UI.

The deployed flow, ``fedpipe-federation``, takes a project directory and a few
overrides a person may want to set when starting a run from the UI. Overrides are
written into the project's ``params.yaml`` (as ``dvc exp run -S`` would), which
stays the one source of settings, so ``dvc.lock`` records what actually ran; then
the flow runs the pipeline (``fedpipe-run``, the same flow ``fedpipe run`` runs)
as a subflow.

Two ways to execute the deployment's runs (both need a Prefect server, not the
temporary one Prefect starts per process):

- ``fedpipe deploy --pool POOL``: register the deployment on a ``process`` work
  pool (created if missing); ``prefect worker start --pool POOL`` runs its runs.
- ``fedpipe serve``: one long-lived process that registers the deployment and runs
  its runs itself (no pool, no worker).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from prefect import flow, get_run_logger
from prefect.deployments.runner import EntrypointType, RunnerDeployment

from fedpipe.config.overrides import set_params
from fedpipe.config.params import (
    PARAMS_FILE,
    STRATEGY_NAMES,
    ParamsError,
    load_params,
    sync_round_chain,
)
from fedpipe.core.errors import SettingError
from fedpipe.data.preflight import preflight

FLOW_NAME = "fedpipe-federation"

# the flow's override parameters and the params.yaml keys they set
OVERRIDES = {
    "rounds": "federation.rounds",
    "strategy": "strategy.name",
    "epochs": "train.epochs",
    "runner": "runtime.runner",
}


def overrides_from(parameters: dict[str, Any]) -> dict[str, Any]:
    """The params.yaml keys to set for the flow parameters that are not None."""
    return {
        key: parameters[name]
        for name, key in OVERRIDES.items()
        if parameters.get(name) is not None
    }


def _run_name() -> str:
    from prefect.runtime import flow_run

    parameters = flow_run.parameters
    name = Path(parameters["project_dir"]).name
    changes = [f"{k.split('.')[-1]}={v}" for k, v in overrides_from(parameters).items()]
    return f"{name} · {', '.join(changes)}" if changes else name


@flow(name=FLOW_NAME, flow_run_name=_run_name)
def federation(
    project_dir: str,
    rounds: int | None = None,
    strategy: Literal[STRATEGY_NAMES] | None = None,  # type: ignore[valid-type]
    epochs: int | None = None,
    runner: Literal["local", "dask"] | None = None,
    force: bool = False,
) -> list[str]:
    """Bring a fedpipe project up to date, as ``fedpipe run`` does.

    Parameters
    ----------
    project_dir : str
        The project (``dvc.yaml``, ``params.yaml``, a git + DVC repository).
    rounds, strategy, epochs, runner : optional
        Written into ``params.yaml`` as ``federation.rounds``, ``strategy.name``,
        ``train.epochs`` and ``runtime.runner`` before the run; empty = as the file
        says.
    force : bool
        Rerun stages even if ``dvc.lock`` shows them up to date.
    """
    logger = get_run_logger()
    project = Path(project_dir)
    if not (project / PARAMS_FILE).is_file():
        raise ParamsError(
            f"{project / PARAMS_FILE}: not found; project_dir must be a fedpipe "
            "project (see `fedpipe init`)"
        )
    back = Path.cwd()
    os.chdir(project)  # stages read and write relative to the project root
    try:
        changed = set_params(
            PARAMS_FILE,
            overrides_from(
                {
                    "rounds": rounds,
                    "strategy": strategy,
                    "epochs": epochs,
                    "runner": runner,
                }
            ),
        )
        for key, value in changed.items():
            logger.info("%s: %s set to %s", PARAMS_FILE, key, value)
        sync_round_chain(PARAMS_FILE)
        params = load_params(PARAMS_FILE)
        preflight(params.data, params.federation, params.partition)
        # imported here: TensorFlow loads with it, and `fedpipe deploy` needs none
        from flows.pipeline import run_pipeline

        return run_pipeline(params, force=force)
    finally:
        os.chdir(back)


def deployment(
    project: Path,
    *,
    name: str | None = None,
    cron: str | None = None,
    timezone: str | None = None,
) -> RunnerDeployment:
    """The deployment of ``project``: ``fedpipe-federation/<name>`` (default: the
    project folder's name), with ``project_dir`` preset and an optional cron
    schedule (``timezone`` an IANA name such as ``Europe/Berlin``; default UTC)."""
    from prefect.schedules import Cron

    project = project.resolve()
    return federation.to_deployment(
        name=name or project.name,
        schedules=[Cron(cron, timezone=timezone or "UTC")] if cron else None,
        parameters={"project_dir": str(project)},
        description=f"fedpipe project {project}: `fedpipe run` on a schedule or "
        "on demand; parameters left empty keep params.yaml's values",
        tags=["fedpipe"],
        # loaded as `flows.deploy.federation` from the installed package, so the
        # worker needs no copy of the code, only the same environment
        entrypoint_type=EntrypointType.MODULE_PATH,
    )


def ensure_process_pool(pool: str) -> bool:
    """Create the ``process`` work pool ``pool`` unless it exists; True if created."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectNotFound
    from prefect.workers.process import ProcessWorker

    with get_client(sync_client=True) as client:
        try:
            found = client.read_work_pool(pool)
        except ObjectNotFound:
            client.create_work_pool(
                WorkPoolCreate(
                    name=pool,
                    type="process",
                    base_job_template=ProcessWorker.get_default_base_job_template(),
                )
            )
            return True
    if found.type != "process":
        raise SettingError(
            f"work pool {pool!r} has type {found.type!r}; fedpipe deploys to a "
            "`process` pool: choose another --pool name"
        )
    return False


def deploy(deployment_: RunnerDeployment, pool: str) -> str:
    """Register ``deployment_`` on the process work pool ``pool``; its full name."""
    from prefect import deploy as prefect_deploy

    prefect_deploy(
        deployment_,
        work_pool_name=pool,
        build=False,
        push=False,
        print_next_steps_message=False,
        ignore_warnings=True,
    )
    return f"{FLOW_NAME}/{deployment_.name}"


def serve(deployment_: RunnerDeployment) -> None:
    """Register ``deployment_`` and run its runs in this process until stopped."""
    from prefect import serve as prefect_serve

    prefect_serve(deployment_)

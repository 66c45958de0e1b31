"""``fedpipe run``: the whole pipeline as one Prefect flow run in one process.

Stages run in ``dvc.yaml`` order as subflows; each is skipped when ``dvc.lock``
says it is up to date, and recorded there as soon as it finishes. So a second run
does nothing, and a run interrupted during round k resumes at round k.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger

from fedpipe import layout
from fedpipe.config import Params
from flows.stages import run_stage
from tasks.dvc import record_stage, stage_is_fresh


@flow(name="fedpipe-run")
def run_pipeline(params: Params, force: bool = False) -> list[str]:
    """Bring every stage up to date; returns the stages that ran."""
    logger = get_run_logger()
    root = Path(".")
    ran: list[str] = []
    for stage in layout.stage_names(params.federation.rounds):
        if not force and stage_is_fresh(root, stage):
            logger.info("%s: up to date (dvc.lock)", stage)
            continue
        run_stage(params, stage)
        record_stage(root, stage)
        ran.append(stage)
    return ran

"""DVC bookkeeping for stages that ran inside ``fedpipe run``.

``fedpipe run`` executes every stage in one process instead of one process per
stage; afterwards each stage is recorded in ``dvc.lock`` exactly as ``dvc repro``
would record it (``dvc commit --force STAGE``), so ``dvc status`` is clean and the
lock file stays the audit trail. The recording runs in a process of its own
(:class:`orchestration.dvclock.LockRecorder`), several finished stages at a time.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from orchestration.dvclock import LockRecorder

os.environ.setdefault("DVC_NO_ANALYTICS", "1")


def _repo(root: Path):  # type: ignore[no-untyped-def]
    from orchestration.repolock import open_repo

    # `import dvc` sets its logger to INFO; every stage would then print "Updating
    # lock file" twice (DVC's handler and Prefect's). Prefect logs the stage already.
    repo = open_repo(root)  # no second lock while this run holds DVC's
    logging.getLogger("dvc").setLevel(logging.WARNING)
    return repo


@task(
    name="record-stages",
    task_run_name="record {stages}",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=[1, 3],
)
def record_stages(recorder: LockRecorder, stages: list[str]) -> None:
    """Record the ``stages``' current deps, params and outputs in ``dvc.lock``.

    The outputs are copied into DVC's cache without relinking the workspace files
    (``relink=False``): this runs while the next stage already reads them, and a
    relink replaces each file for a moment.
    """
    recorder.record(stages)


def restore_stage_outputs(root: Path, stage: str) -> None:
    """Check ``stage``'s outputs out again as ``dvc.lock`` records them (if it does).

    Used when data that was just ingested fails validation: the workspace goes back
    to the last good data set. Without a recorded version there is nothing to
    restore and the (rejected) outputs stay for inspection.
    """
    with _repo(root) as repo:
        try:
            repo.checkout(targets=[stage], force=True)
        except Exception:  # noqa: BLE001 - nothing recorded yet: keep what is there
            return

"""DVC bookkeeping for stages that ran inside ``fedpipe run``: the task that
records them.

``fedpipe run`` executes every stage in one process instead of one process per
stage; afterwards each stage is recorded in ``dvc.lock`` exactly as ``dvc repro``
would record it (``dvc commit --force STAGE``), so ``dvc status`` is clean and the
lock file stays the audit trail. The recording runs in a process of its own
(:class:`orchestration.dvclock.LockRecorder`), several finished stages at a time.
"""

from __future__ import annotations

import os

from prefect import task
from prefect.cache_policies import NO_CACHE

from orchestration.dvclock import LockRecorder

os.environ.setdefault("DVC_NO_ANALYTICS", "1")


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

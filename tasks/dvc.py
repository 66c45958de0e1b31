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
from collections.abc import Sequence
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from orchestration.dvclock import LockRecorder
from orchestration.repolock import ProjectBusy

os.environ.setdefault("DVC_NO_ANALYTICS", "1")


def _repo(root: Path):  # type: ignore[no-untyped-def]
    from orchestration.repolock import open_repo

    # `import dvc` sets its logger to INFO; every stage would then print "Updating
    # lock file" twice (DVC's handler and Prefect's). Prefect logs the stage already.
    repo = open_repo(root)  # no second lock while this run holds DVC's
    logging.getLogger("dvc").setLevel(logging.WARNING)
    return repo


def fresh_prefix(root: Path, stages: Sequence[str]) -> int:
    """How many of ``stages`` (in pipeline order), from the first, are recorded in
    ``dvc.lock`` with nothing they use changed (one repository opened for all)."""
    from dvc.lock import LockError

    with _repo(root) as repo:
        try:
            for n, stage in enumerate(stages):
                if repo.status(targets=[stage]):
                    return n
        except LockError as exc:  # a file another DVC command holds (or held)
            raise ProjectBusy(f"{root.resolve()}: {exc}") from exc
    return len(stages)


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

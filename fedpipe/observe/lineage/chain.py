"""The audit: from a target back to the raw data, every stage checked."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fedpipe.observe.lineage.checks import audit_stage
from fedpipe.observe.lineage.dvcstate import open_project
from fedpipe.observe.lineage.git import git_state
from fedpipe.observe.lineage.records import stage_info
from fedpipe.observe.lineage.result import Lineage, RawData, StageAudit
from fedpipe.observe.lineage.targets import resolve_target

__all__ = ["audit"]


def _role(path: str) -> str:
    """``code`` for the user's code a stage reads (model, strategy, client files
    named in params.yaml), ``input`` for data."""
    return "code" if path.endswith(".py") else "input"


def _raw(stages: Iterable[StageAudit]) -> tuple[RawData, ...]:
    """The chain's roots: outputs of stages without inputs, and inputs no stage
    produces."""
    raw = []
    for stage in stages:
        if not stage.deps:
            raw.extend(
                RawData(stage.name, o.path, o.recorded_md5, "output")
                for o in stage.outs
            )
        raw.extend(
            RawData(stage.name, d.path, d.recorded_md5, _role(d.path))
            for d in stage.deps
            if not d.upstream
        )
    return tuple(raw)


def audit(root: Path, target: Sequence[str] = ()) -> Lineage:
    """Trace ``target`` back to the raw data and verify every step.

    Parameters
    ----------
    root : Path
        The project directory (holding ``dvc.lock``, ``dvc.yaml``, ``params.yaml``).
    target : sequence of str, optional
        Command-line words: ``()`` (the whole pipeline), ``("round", "4")``,
        ``("4",)``, a stage name, or a path a stage produces. Default ``()``.

    Returns
    -------
    Lineage
        ``verified`` is True when nothing was flagged.

    Raises
    ------
    LineageError
        No ``dvc.lock`` (or one DVC cannot read), or a target that names no
        recorded round, stage or output.
    """
    with open_project(root) as project:
        spec, stage_name, path = resolve_target(project, target)

        def info(name: str) -> dict[str, Any]:
            return stage_info(root, name, project.md5_of)

        stages = tuple(
            audit_stage(project, project.stages[name], info)
            for name in project.chain(stage_name)
        )
        target_md5 = project.md5_of(path) if path else None
    return Lineage(
        target=spec,
        target_stage=stage_name,
        target_path=path,
        target_md5=target_md5,
        stages=stages,
        raw=_raw(stages),
        git=git_state(root),
    )

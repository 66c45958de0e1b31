"""The checks on one recorded stage: outputs, inputs, params and command.

Each compares what ``dvc.lock`` recorded (DVC's stage objects, from
:class:`~fedpipe.observe.lineage.dvcstate.DvcProject`) with what DVC computes now, and
says what differs in words: ``changed`` (on disk), ``missing`` or ``stale`` (the
record no longer fits together).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpipe.observe.cachecheck import Damaged, damaged_outs, uncached
from fedpipe.observe.lineage.dvcstate import (
    PROJECT_FILE,
    DvcProject,
    Listing,
    command_text,
)
from fedpipe.observe.lineage.formats import short
from fedpipe.observe.lineage.result import Check, Flag, StageAudit

if TYPE_CHECKING:
    from dvc.dependency import Dependency, ParamsDependency
    from dvc.output import Output
    from dvc.stage import PipelineStage

__all__ = ["audit_stage"]

_MAX_LISTED = 5
_MISSING = object()


def _listed(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return shown + (f" (+{more} more)" if more > 0 else "")


def _dir_detail(recorded: Listing | None, actual: Listing) -> tuple[str, ...]:
    """Which files of a directory differ from the recorded listing."""
    if recorded is None:
        return ("the recorded listing is not in DVC's cache; files not compared",)
    changed = sorted(p for p in recorded if p in actual and actual[p] != recorded[p])
    missing = sorted(p for p in recorded if p not in actual)
    added = sorted(p for p in actual if p not in recorded)
    out = []
    if changed:
        out.append(f"changed: {_listed(changed)}")
    if missing:
        out.append(f"missing: {_listed(missing)}")
    if added:
        out.append(f"added: {_listed(added)}")
    return tuple(out)


def check_out(project: DvcProject, out: Output) -> Check:
    """A recorded output against the disk: ``ok``, ``changed`` or ``missing``."""
    path, recorded, nfiles = project.rel(out), out.hash_info.value, out.meta.nfiles
    if not out.exists:
        return Check(path, recorded, "missing", nfiles=nfiles)
    actual = project.md5(out)
    if actual == recorded:
        return Check(path, recorded, "ok", actual, nfiles=nfiles)
    detail: tuple[str, ...] = ()
    recorded_dir, is_dir = out.hash_info.isdir, out.isdir()
    if recorded_dir and is_dir:
        detail = _dir_detail(project.recorded_listing(out), project.listing(out))
    elif recorded_dir != is_dir:
        detail = (f"recorded as a {'directory' if recorded_dir else 'file'}",)
    return Check(path, recorded, "changed", actual, nfiles=nfiles, detail=detail)


def _out_flags(stage: str, check: Check) -> list[Flag]:
    if check.status == "missing":
        return [Flag("missing", stage, check.path, f"{check.path}: not on disk")]
    if check.status != "changed":
        return []
    more = f" ({'; '.join(check.detail)})" if check.detail else ""
    message = (
        f"{check.path}: md5 on disk {check.actual_md5}, dvc.lock records "
        f"{check.recorded_md5}{more}"
    )
    return [Flag("changed", stage, check.path, message)]


def _cache_damage(
    project: DvcProject, stage: PipelineStage, outs: Sequence[Check]
) -> list[Damaged]:
    """The stage's recorded outputs missing or altered in DVC's cache
    (:mod:`fedpipe.observe.cachecheck`; DVC itself trusts a read-only cache
    file without hashing it). An output missing from the cache and the
    workspace both (a clone before ``dvc pull``) is flagged once, as missing;
    one kept out of the cache (``cache: false``) is not looked for there."""
    gone = {check.path for check in outs if check.status == "missing"}
    gone |= {project.rel(out) for out in stage.outs if not out.use_cache}
    skip = uncached(Path(project.root))  # as fedpipe status reads dvc.yaml
    recorded = [
        (check.path, check.recorded_md5)
        for check in outs
        if check.path not in gone and not any(fnmatch(check.path, p) for p in skip)
    ]
    return damaged_outs(Path(project.root), stage.name, recorded)


def _cache_status(check: Check, damaged: Sequence[Damaged]) -> Check:
    """``check`` marked ``altered`` (its cache object, or one of a directory's,
    is not its md5) or ``uncached`` (missing from DVC's cache) where a cache flag
    names it: the workspace file may be fine, but DVC would reuse the damaged
    object, so the output is not ``ok``."""
    if check.status != "ok":
        return check
    mine = [
        d.problem
        for d in damaged
        if d.path == check.path or d.path.startswith(f"{check.path}/")
    ]
    if not mine:
        return check
    altered = "altered" in mine
    return replace(check, status="altered" if altered else "uncached")


def _upstream_md5(
    project: DvcProject, dep: Dependency
) -> tuple[str | None, str | None]:
    """(producing stage, md5 it records for ``dep``) - None where unknown."""
    found = project.producers(dep.fs_path)
    if not found:
        return None, None
    out = found[0]
    if out.fs_path == dep.fs_path:
        return out.stage.name, out.hash_info.value
    if out.fs.isin(dep.fs_path, out.fs_path):
        return out.stage.name, project.recorded_md5_inside(out, dep.fs_path)
    return out.stage.name, None  # the input is a directory holding outputs


def check_dep(
    project: DvcProject, stage: str, dep: Dependency
) -> tuple[Check, list[Flag]]:
    """A recorded input against its producer's record, or the disk for raw data."""
    path, recorded = project.rel(dep), dep.hash_info.value
    producer, up_md5 = _upstream_md5(project, dep)
    if producer is not None and up_md5 is not None:
        status = "ok" if up_md5 == recorded else "stale"
        check = Check(path, recorded, status, upstream=producer, upstream_md5=up_md5)
        if status == "ok":
            return check, []
        return check, [
            Flag(
                "stale",
                stage,
                path,
                f"{stage} ran on {path} md5 {recorded}, but {producer} now "
                f"records {up_md5} (rerun {stage}: `dvc repro {stage}`)",
            )
        ]
    # raw data (no stage produces it), or a file inside a directory output whose
    # listing is not in the cache: compare with the disk
    actual = project.md5(dep)
    source = None if producer else project.dvc_file_md5(path)
    if actual is None:
        check = Check(path, recorded, "missing", upstream=producer)
        return check, [
            Flag("missing", stage, path, f"{path}: input of {stage} is gone")
        ]
    flags = []
    status = "ok"
    if actual != recorded:
        status = "changed" if producer is None else "stale"
        flags.append(
            Flag(
                status,
                stage,
                path,
                f"{path}: md5 on disk {actual}, {stage} ran on {recorded}",
            )
        )
    if source is not None and source != recorded:
        status = "stale"
        flags.append(
            Flag(
                "stale",
                stage,
                path,
                f"{path}.dvc records {source}, {stage} ran on {recorded}",
            )
        )
    check = Check(
        path,
        recorded,
        status,
        actual,
        upstream=producer,
        upstream_md5=source,
        nfiles=dep.meta.nfiles,
    )
    return check, flags


def check_params(project: DvcProject, stage: str, dep: ParamsDependency) -> list[Flag]:
    """Each recorded param DVC finds changed or gone in its params file now."""
    name = dep.def_path
    now = project.params_now(dep)
    if now.problem is not None:
        return [Flag("stale", stage, name, f"{name}: {now.problem}")]
    flags = []
    for key, value in (dep.hash_info.value or {}).items():
        if key not in now.status:
            continue
        current = now.values.get(key, _MISSING)
        if now.status[key] == "deleted" or current is _MISSING:
            message = f"{name}: {key} is gone; {stage} ran with {key}={short(value)}"
        else:
            message = (
                f"{name}: {_changed_keys(str(key), value, current)}; {stage} ran "
                "with the values before (rerun: `fedpipe run` or `dvc repro`)"
            )
        flags.append(Flag("stale", stage, key, message))
    return flags


def _changed_keys(key: str, was: Any, now: Any) -> str:
    """``a.b: dvc.lock X, now Y`` for each leaf that differs."""
    if isinstance(was, Mapping) and isinstance(now, Mapping):
        parts = [
            _changed_keys(f"{key}.{k}", was.get(k, None), now.get(k, None))
            for k in sorted(set(was) | set(now), key=str)
            if was.get(k, _MISSING) != now.get(k, _MISSING)
        ]
        return "; ".join(parts)
    return f"{key} is {short(now)}, dvc.lock records {short(was)}"


def check_command(
    project: DvcProject, stage: PipelineStage
) -> tuple[str | None, list[Flag]]:
    """The command ``dvc.yaml`` now gives the stage, and a flag when DVC finds it
    differs from the recorded one, the stage is gone or cannot be resolved."""
    entry = project.pipeline_entry(stage.name)
    if entry is None:  # no dvc.yaml: nothing to compare
        return None, []
    if not entry.defined:
        message = f"{stage.name} is no longer defined in {PROJECT_FILE}"
        return None, [Flag("stale", stage.name, PROJECT_FILE, message)]
    if entry.problem is not None:
        return None, [Flag("stale", stage.name, PROJECT_FILE, entry.problem)]
    if not entry.cmd_changed:
        return entry.cmd, []
    message = (
        f"{PROJECT_FILE} now runs `{entry.cmd}`, dvc.lock recorded "
        f"`{command_text(stage.cmd)}`"
    )
    return entry.cmd, [Flag("stale", stage.name, "cmd", message)]


def audit_stage(
    project: DvcProject,
    stage: PipelineStage,
    info: Callable[[str], Mapping[str, Any]],
) -> StageAudit:
    """Every check on one recorded stage; ``info(name)`` adds fedpipe's records."""
    flags: list[Flag] = []
    deps = []
    for dep in project.data_deps(stage):
        check, found = check_dep(project, stage.name, dep)
        deps.append(check)
        flags.extend(found)
    for params in project.params_deps(stage):
        flags.extend(check_params(project, stage.name, params))
    outs = [check_out(project, out) for out in stage.outs]
    for check in outs:
        flags.extend(_out_flags(stage.name, check))
    damaged = _cache_damage(project, stage, outs)
    flags += [Flag("cache", stage.name, d.path, d.text(stage=False)) for d in damaged]
    outs = [_cache_status(check, damaged) for check in outs]
    cmd_expected, found = check_command(project, stage)
    flags.extend(found)
    return StageAudit(
        name=stage.name,
        cmd=command_text(stage.cmd),
        cmd_expected=cmd_expected,
        params=project.recorded_params(stage),
        deps=tuple(deps),
        outs=tuple(outs),
        upstream=tuple(project.upstream(stage.name)),
        flags=tuple(flags),
        info=info(stage.name),
    )

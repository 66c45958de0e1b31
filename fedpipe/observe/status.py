"""``fedpipe status``: the project at a glance.

Where the data comes from and whether it passed validation, how it was dealt to
clients, how many rounds ``dvc.lock`` records against ``federation.rounds``,
which stages are stale and why (the param keys with their recorded and current
values, changed data, changed code), the last round's global metrics and the
doctor's top finding.

Staleness is DVC's own answer: ``Repo.status()`` (what ``dvc status`` prints),
reached through :mod:`fedpipe.observe.lineage.dvcstate`, the one reader of DVC's record;
the values a stage recorded for its params come from the same place. Everything
else is read from the run's files. Nothing here imports TensorFlow or Prefect, so
the command answers in well under a second on a small project (see the README).
The DVC reader is imported only when :func:`collect` runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedpipe.config import layout
from fedpipe.core.dotted import lookup
from fedpipe.core.jsonio import read_json_or_none
from fedpipe.observe.cachecheck import Damaged, damaged_objects
from fedpipe.observe.runfiles import (
    flat_params,
    fmt,
    ignored_text,
    read_commit,
    round_files,
    unread_files,
)

PARAMS_FILE = "params.yaml"
ROUND_PREFIX = f"{layout.ROUND_STAGE}@"


@dataclass(frozen=True)
class Reason:
    """Why a stage is stale.

    ``kind`` is ``params`` (``key`` changed from ``old`` to ``new``), ``data`` or
    ``code`` (the input ``path`` is ``change``: modified, deleted, new),
    ``output`` (the stage's own output ``path`` changed or is missing),
    ``command`` (``dvc.yaml`` gives the stage another command),
    ``not recorded`` (``dvc.lock`` has no entry: the stage never ran) or
    ``always changed`` (``always_changed: true`` in ``dvc.yaml``).
    """

    kind: str
    key: str | None = None
    old: Any = None
    new: Any = None
    path: str | None = None
    change: str | None = None

    def text(self) -> str:
        if self.kind == "params":
            return f"param {self.key} {_value(self.old)} -> {_value(self.new)}"
        if self.kind in ("data", "code", "output"):
            change = "missing" if self.change == "deleted" else self.change
            return f"{self.kind} {self.path} {change}"
        if self.kind == "command":
            return "command changed in dvc.yaml"
        if self.kind == "not recorded":
            return "never ran (not in dvc.lock)"
        return self.kind  # DVC's own words: "always changed", ...


@dataclass(frozen=True)
class Status:
    """What :func:`collect` found; every part may be missing (``None``)."""

    root: str
    git: dict[str, Any]
    data: dict[str, Any] | None
    validation: dict[str, Any] | None
    partition: dict[str, Any] | None
    rounds_planned: int | None
    rounds_recorded: list[int] | None
    stale: dict[str, list[Reason]] | None
    last_round: dict[str, Any] | None
    doctor: dict[str, Any] | None
    prefect_url: str | None = None
    problems: list[str] = field(default_factory=list)
    damaged_cache: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def up_to_date(self) -> bool:
        """True when dvc.lock records every stage and DVC finds nothing changed."""
        return self.stale == {}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: reasons as dicts, ``up_to_date`` included."""
        out = asdict(self)
        if self.stale is not None:
            out["stale"] = {
                stage: [_reason_dict(r) for r in reasons]
                for stage, reasons in self.stale.items()
            }
        out["up_to_date"] = self.up_to_date
        return out


def _reason_dict(reason: Reason) -> dict[str, Any]:
    return {k: v for k, v in asdict(reason).items() if v is not None} | {
        "text": reason.text()
    }


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return (
        json.dumps(value)
        if isinstance(value, (list, dict, bool)) or value is None
        else fmt(value, 6)
    )


# ---------------------------------------------------------------- the parts


def _params(root: Path, problems: list[str]) -> dict[str, Any] | None:
    path = root / PARAMS_FILE
    if not path.is_file():
        problems.append(f"{PARAMS_FILE}: not found")
        return None
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        problems.append(f"{PARAMS_FILE}: not valid YAML: {exc}")
        return None
    if not isinstance(raw, dict):
        problems.append(f"{PARAMS_FILE}: expected a mapping of settings")
        return None
    from fedpipe.config.params import ParamsError, parse_params

    try:
        parse_params(raw, source=PARAMS_FILE)
    except ParamsError as exc:
        problems += str(exc).splitlines()
    return raw


def _data(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    from fedpipe.config.params import DataParams

    defaults = DataParams()
    return {
        "source": lookup(raw, "data.source", defaults.source),
        "path": lookup(raw, "data.path", defaults.path),
    }


def _validation(root: Path) -> dict[str, Any] | None:
    summary = read_json_or_none(root / layout.VALIDATION_DIR / "summary.json")
    if not isinstance(summary, dict):
        return None
    return {
        "passed": bool(summary.get("success")),
        "rows": summary.get("n_rows"),
        "expectations": summary.get("n_expectations"),
        "failures": list(summary.get("failures") or []),
        "warnings": list(summary.get("warnings") or []),
    }


def _partition(root: Path) -> dict[str, Any] | None:
    from fedpipe.data.accounting import dropped_line

    manifest = read_json_or_none(root / layout.MANIFEST)
    if not isinstance(manifest, dict):
        return None
    out = {"method": manifest.get("method"), "clients": manifest.get("n_clients")}
    dropped = dropped_line(manifest)
    if dropped is not None:
        out["dropped"] = len(manifest.get("dropped_duplicates") or [])
        out["dropped_text"] = dropped
    skew = read_json_or_none(root / layout.PARTITION_REPORT_DIR / "skew.json")
    if isinstance(skew, dict):
        out["skew"] = {k: v for k, v in skew.items() if isinstance(v, (int, float))}
    return out


def _skew_text(partition: Mapping[str, Any]) -> str:
    """``; label skew 0.41, feature skew 0.07`` from the partition's skew.json
    (empty when it has neither figure)."""
    skew = partition.get("skew") or {}
    shown = [
        f"{name.replace('_', ' ')} {skew[name]:.3f}"
        for name in ("label_skew", "feature_skew")
        if isinstance(skew.get(name), int | float)
    ]
    return "; " + ", ".join(shown) if shown else ""


def _last_round(root: Path) -> dict[str, Any] | None:
    files = round_files(root, layout.ROUND_METRICS_DIR, ".json")
    if not files:
        return None
    last = max(files)
    record = read_json_or_none(files[last])
    if not isinstance(record, dict):
        return {"round": last, "global": None}
    metrics = record.get("global") or {}
    return {
        "round": last,
        "global": {k: metrics.get(k) for k in ("accuracy", "loss") if k in metrics},
    }


def _doctor(root: Path, problems: list[str]) -> dict[str, Any] | None:
    if not round_files(root, layout.ROUND_METRICS_DIR, ".json"):
        return None
    from fedpipe.observe.doctor import diagnose

    try:
        findings = diagnose(root)
    except Exception as exc:  # noqa: BLE001 - a status never dies of the doctor
        problems.append(f"doctor: {exc}")
        return None
    if not findings:
        return {"findings": 0}
    top = findings[0]
    return {
        "findings": len(findings),
        "severity": top.severity,
        "code": top.code,
        "title": top.title,
        "fix": top.fix,
    }


def _doctor_meanwhile(root: Path):  # type: ignore[no-untyped-def]
    """Start the doctor in a forked process, beside DVC's status in this one (they
    take about as long, and both are CPU-bound Python); returns a function that
    waits for its result. Where ``fork`` is unavailable it runs in this process.
    """
    import multiprocessing as mp

    if not round_files(root, layout.ROUND_METRICS_DIR, ".json"):
        return lambda problems: None
    if "fork" not in mp.get_all_start_methods():
        return lambda problems: _doctor(root, problems)
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("fork"))
    future = pool.submit(_doctor_in_child, root)

    def wait(problems: list[str]) -> dict[str, Any] | None:
        try:
            found, child_problems = future.result()
        except Exception:  # noqa: BLE001 - the child died: do it here instead
            return _doctor(root, problems)
        finally:
            pool.shutdown()
        problems += child_problems
        return found

    return wait


def _doctor_in_child(root: Path) -> tuple[dict[str, Any] | None, list[str]]:
    problems: list[str] = []
    return _doctor(root, problems), problems


# ---------------------------------------------------------------- staleness


def _param_reasons(
    recorded: Mapping[str, Any], changed: Mapping[str, str], raw: Mapping | None
) -> list[Reason]:
    """One reason per leaf key whose value differs (``train`` -> ``train.lr``)."""
    reasons = []
    for key, state in changed.items():
        old = recorded.get(key)
        new = lookup(raw, key, _MISSING)
        if state == "deleted" or new is _MISSING:
            reasons.append(Reason("params", key=key, old=old, new="(deleted)"))
            continue
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            before = dict(flat_params(old, prefix=f"{key}."))
            after = dict(flat_params(new, prefix=f"{key}."))
            for leaf in sorted(set(before) | set(after), key=_order(before, after)):
                if before.get(leaf, _MISSING) != after.get(leaf, _MISSING):
                    reasons.append(
                        Reason(
                            "params",
                            key=leaf,
                            old=before.get(leaf, "(absent)"),
                            new=after.get(leaf, "(absent)"),
                        )
                    )
        else:
            reasons.append(Reason("params", key=key, old=old, new=new))
    return reasons


def _order(*mappings: Mapping[str, Any]):  # type: ignore[no-untyped-def]
    seen: dict[str, int] = {}
    for mapping in mappings:
        for key in mapping:
            seen.setdefault(key, len(seen))
    return seen.__getitem__


_MISSING = object()


def _stage_reasons(
    entries: Sequence[Any], recorded: Mapping[str, Any], raw: Mapping | None
) -> list[Reason]:
    reasons: list[Reason] = []
    for entry in entries:
        if not isinstance(entry, Mapping):  # "always changed", ...
            reasons.append(Reason(str(entry)))
            continue
        for path, change in (entry.get("changed deps") or {}).items():
            if isinstance(change, Mapping):  # a params file: key -> state
                reasons += _param_reasons(recorded.get(path) or {}, change, raw)
            else:
                kind = "code" if str(path).endswith(".py") else "data"
                reasons.append(Reason(kind, path=path, change=change))
        for path, change in (entry.get("changed outs") or {}).items():
            reasons.append(Reason("output", path=path, change=change))
        if entry.get("changed command"):
            reasons.append(Reason("command"))
    return reasons


def _staleness(
    root: Path, raw: Mapping | None, problems: list[str]
) -> tuple[dict[str, list[Reason]] | None, list[int] | None, list[str] | None]:
    """Every stale stage of ``dvc.yaml`` with its reasons; the rounds ``dvc.lock``
    records; ``dvc.yaml``'s stages.

    What ``dvc status`` computes, stage by stage (``Stage.status``): each stage as
    DVC loads it from ``dvc.yaml`` and ``dvc.lock``; its data and code inputs and
    its outputs by their own ``status()`` (DVC's hashes and state database), its
    command by ``changed_stage()``. Params are compared here, recorded value
    against the file's, with ``params.yaml`` read once (by DVC's own loader)
    rather than once per stage (DVC re-reads it for each stage: 15 times for 10
    rounds, most of ``dvc status``'s time).
    """
    from fedpipe.observe.lineage.dvcstate import open_project, read_params_file
    from fedpipe.observe.lineage.result import LineageError

    # the values compare as DVC reads them (YAML 1.2: ``1e-3`` is a number, which
    # PyYAML reads as text), or `dvc status` and this would disagree
    if raw is not None:
        raw = read_params_file(root / PARAMS_FILE) or raw
    try:
        with open_project(root) as project:
            recorded = set(project.stages)
            pipeline = project.dvcfile.stages
            stale = {}
            for name in pipeline:
                if name not in recorded:
                    stale[name] = [Reason("not recorded")]
                    continue
                reasons = _stage_status(project, pipeline[name], root, raw)
                if reasons:
                    stale[name] = reasons
    except LineageError as exc:
        problems.append(str(exc))
        return None, None, None
    except Exception as exc:  # noqa: BLE001 - DVC's errors are many; say what it said
        problems.append(f"DVC cannot tell what is stale: {exc}")
        return None, sorted(_recorded_rounds(root)), None
    rounds = sorted(
        int(n[len(ROUND_PREFIX) :]) for n in recorded if n.startswith(ROUND_PREFIX)
    )
    return stale, rounds, list(pipeline)


def _stage_status(project: Any, stage: Any, root: Path, raw: Mapping | None):  # type: ignore[no-untyped-def]
    """``Stage.status()``'s findings for one recorded stage, as reasons."""
    entries: list[Any] = []
    deps: dict[str, Any] = {}
    if not stage.frozen:
        for dep in project.data_deps(stage):
            deps.update(dep.status())
        for dep in project.params_deps(stage):
            deps.update(_params_status(dep, root, raw))
    if deps:
        entries.append({"changed deps": deps})
    outs: dict[str, Any] = {}
    for out in stage.outs:
        outs.update(out.status())
    if outs:
        entries.append({"changed outs": outs})
    if stage.always_changed:
        entries.append("always changed")
    if stage.changed_stage():
        entries.append({"changed command": True})
    recorded = {
        d.def_path: dict(d.hash_info.value or {}) for d in project.params_deps(stage)
    }
    return _stage_reasons(entries, recorded, raw)


def _params_status(dep: Any, root: Path, raw: Mapping | None) -> dict[str, Any]:
    """``ParamsDependency.workspace_status`` for ``params.yaml`` read once:
    ``{file: {key: modified | deleted | new}}``; other params files by DVC."""
    if Path(dep.def_path).as_posix() != PARAMS_FILE or raw is None:
        return dict(dep.status())
    recorded = dict(dep.hash_info.value or {})
    keys = list(dep.params) or list(recorded)
    changed = {}
    for key in keys:
        now = lookup(raw, key, _MISSING)
        if now is _MISSING:
            if key in recorded:
                changed[key] = "deleted"
        elif key not in recorded:
            changed[key] = "new"
        elif recorded[key] != now:
            changed[key] = "modified"
    return {dep.def_path: changed} if changed else {}


def _recorded_rounds(root: Path) -> list[int]:
    lock = root / "dvc.lock"
    try:
        stages = (yaml.safe_load(lock.read_text()) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError):
        return []
    return [int(n[len(ROUND_PREFIX) :]) for n in stages if n.startswith(ROUND_PREFIX)]


@dataclass(frozen=True)
class Staleness:
    """What a run would redo: the stale stages with their reasons (None when
    DVC cannot tell), the rounds ``dvc.lock`` records, the recorded outputs
    damaged in DVC's cache and what went wrong on the way."""

    stale: dict[str, list[Reason]] | None
    rounds: list[int] | None
    damaged: list[Damaged]
    problems: list[str]
    pipeline: list[str] | None = None
    """``dvc.yaml``'s stages, in its order (None when DVC cannot tell)."""

    @property
    def nothing_to_do(self) -> bool:
        """Every stage recorded and unchanged, no cache object damaged."""
        return self.stale == {} and not self.damaged and not self.problems

    def fresh_prefix(self, names: Sequence[str]) -> int | None:
        """How many of ``names`` (in pipeline order), from the first, are
        recorded and unchanged; None when a name is not a stage of
        ``dvc.yaml``, a cache object is damaged or DVC could not tell."""
        if self.stale is None or self.pipeline is None or self.damaged:
            return None
        if self.problems or not set(names) <= set(self.pipeline):
            return None
        for n, name in enumerate(names):
            if name in self.stale:
                return n
        return len(names)


def staleness(root: Path, raw: Mapping | None) -> Staleness:
    """:class:`Staleness` of the project at ``root`` through DVC
    (``raw``: params.yaml as read, or None)."""
    problems: list[str] = []
    # before DVC's status: DVC deletes a cache object it finds altered (one not
    # read-only), which would then read "missing" here
    damaged = damaged_objects(root)
    stale, rounds, pipeline = _staleness(root, raw, problems)
    return Staleness(stale, rounds, damaged, problems, pipeline)


def git_state(root: Path) -> dict[str, Any]:
    """The commit, the uncommitted changes and whether ``root`` is in a git
    repository (:attr:`Status.git`)."""
    commit = read_commit(root)
    return {
        "commit": commit.sha,
        "uncommitted": commit.dirty,
        "repository": commit.repository,
    }


def collect(
    root: Path, *, check: Callable[[Path, Mapping | None], Staleness] = staleness
) -> Status:
    """The status of the project at ``root`` (reads; never writes but DVC's own
    state database). ``check`` answers what is stale (:func:`staleness`, or one
    that remembers its answers)."""
    start = time.perf_counter()
    root = Path(root)
    problems: list[str] = []
    raw = _params(root, problems)
    planned = lookup(raw, "federation.rounds")
    doctor = _doctor_meanwhile(root)
    found_stale = check(root, raw)
    stale, rounds = found_stale.stale, found_stale.rounds
    damaged = [bad.text() for bad in found_stale.damaged]
    problems += found_stale.problems
    git = git_state(root)
    doctor_problems: list[str] = []
    found = doctor(doctor_problems)
    problems += doctor_problems
    # the doctor (and the report) leave another run's oracle records unread:
    # said once, here too
    not_read = ignored_text(unread_files(root))
    if not_read:
        problems.append(not_read)
    return Status(
        root=str(root.resolve()),
        git=git,
        data=_data(raw) if raw is not None else None,
        validation=_validation(root),
        partition=_partition(root),
        rounds_planned=planned if isinstance(planned, int) else None,
        rounds_recorded=rounds,
        stale=stale,
        last_round=_last_round(root),
        doctor=found,
        problems=problems,
        damaged_cache=damaged,
        seconds=round(time.perf_counter() - start, 3),
    )


# ---------------------------------------------------------------- formats


_EARLY = ("mnist5k", "ingest", "validate", "partition", "preprocess", "init")


def stage_groups(names: Sequence[str]) -> str:
    """``round@1, round@2, round@3`` -> ``round@1-3``, in pipeline order."""
    rounds = sorted(
        int(n[len(ROUND_PREFIX) :]) for n in names if n.startswith(ROUND_PREFIX)
    )
    parts = [n for n in _EARLY if n in names]
    if len(rounds) > 2 and rounds == list(range(rounds[0], rounds[-1] + 1)):
        parts.append(f"{ROUND_PREFIX}{rounds[0]}-{rounds[-1]}")
    else:
        parts += [f"{ROUND_PREFIX}{r}" for r in rounds]
    parts += [n for n in names if n not in _EARLY and not n.startswith(ROUND_PREFIX)]
    return ", ".join(parts)


def _grouped(stale: Mapping[str, list[Reason]]) -> list[tuple[str, list[Reason]]]:
    """Stages with the same reasons together (the rounds of one param change)."""
    groups: dict[tuple[str, ...], tuple[list[Reason], list[str]]] = {}
    for name, reasons in stale.items():
        key = tuple(r.text() for r in reasons)
        groups.setdefault(key, (reasons, []))[1].append(name)
    return [(stage_groups(names), reasons) for reasons, names in groups.values()]


def _validation_text(v: Mapping[str, Any] | None) -> str:
    if v is None:
        return "not validated yet (reports/validation/summary.json missing)"
    state = "passed" if v["passed"] else f"FAILED ({len(v['failures'])} failures)"
    extra = f", {len(v['warnings'])} warning(s)" if v["warnings"] else ""
    return f"validation {state}: {v['rows']} rows, {v['expectations']} checks{extra}"


def format_text(status: Status) -> str:
    """The status as a person reads it: one line per part, stale stages last."""
    rows: list[tuple[str, str]] = []
    git = status.git
    if git.get("commit"):
        dirty = git.get("uncommitted") or 0
        rows.append(("git", f"{git['commit'][:8]}, {dirty} uncommitted change(s)"))
    elif git.get("repository"):
        rows.append(("git", "no commit yet (`git add -A && git commit -m ...`)"))
    if status.data:
        data = status.data
        rows.append(("data", f"{data['source']} ({data['path']})"))
    rows.append(("", _validation_text(status.validation)))
    part = status.partition
    rows.append(
        (
            "partition",
            f"{part['method']}, {part['clients']} clients"
            + _skew_text(part)
            + (f"; {part['dropped_text']}" if part.get("dropped_text") else "")
            if part
            else "not partitioned yet (data/partition/manifest.json missing)",
        )
    )
    recorded = status.rounds_recorded
    planned = status.rounds_planned
    if recorded is not None:
        last = max(recorded, default=0)
        rows.append(
            (
                "rounds",
                f"{len(recorded)} recorded in dvc.lock (last: {last}), "
                f"{planned} planned (federation.rounds)",
            )
        )
    lr = status.last_round
    if lr:
        g = lr.get("global") or {}
        rows.append(
            (
                "last run",
                f"round {lr['round']}: global accuracy "
                f"{fmt(g.get('accuracy'))}, loss {fmt(g.get('loss'))}",
            )
        )
    doc = status.doctor
    if doc is not None:
        rows.append(
            (
                "doctor",
                "no findings"
                if not doc["findings"]
                else f"{doc['severity']}: {doc['title']} "
                f"({doc['findings']} finding(s); `fedpipe doctor` explains)",
            )
        )
    if status.stale is not None:
        if not status.stale:
            rows.append(("stages", "up to date (dvc status: nothing changed)"))
        else:
            rows.append(
                (
                    "stale",
                    f"{len(status.stale)} stage(s); `fedpipe run` "
                    "reruns them and every stage after them",
                )
            )
            for names, reasons in _grouped(status.stale):
                rows.append(("", f"{names}: {reasons[0].text()}"))
                rows += [("", f"  {' ' * len(names)}{r.text()}") for r in reasons[1:]]
    if status.damaged_cache:
        rows.append(
            (
                "cache",
                f"{len(status.damaged_cache)} recorded output(s) damaged in DVC's "
                "cache; `fedpipe run` removes them and reruns their stages",
            )
        )
        rows += [("", text) for text in status.damaged_cache]
    for problem in status.problems:
        rows.append(("note", problem))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}".rstrip() for k, v in rows)


def format_json(status: Status) -> str:
    """The status as JSON (:meth:`Status.to_dict`)."""
    return json.dumps(status.to_dict(), indent=2, default=str)

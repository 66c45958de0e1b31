"""What an audit finds: flags, checked inputs and outputs, stages, the chain.

Plain frozen dataclasses with ``to_dict`` for the JSON format; nothing here reads
a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from fedpipe.core.errors import EXIT_BAD_PARAMS, FedpipeError
from fedpipe.observe.lineage.git import GitState

__all__ = ["Check", "Flag", "Lineage", "LineageError", "RawData", "StageAudit"]


class LineageError(FedpipeError, ValueError):
    """The target cannot be resolved (unknown round, path no stage produces, ...)
    or there is no ``dvc.lock`` to trace (exit status 2: a bad target)."""

    exit_code = EXIT_BAD_PARAMS


@dataclass(frozen=True)
class Flag:
    """One problem found: ``kind`` is ``changed``, ``missing``, ``stale`` or
    ``cache`` (a recorded output missing or altered in DVC's cache)."""

    kind: str
    stage: str
    subject: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "stage": self.stage,
            "subject": self.subject,
            "message": self.message,
        }


@dataclass(frozen=True)
class Check:
    """An input or output of a stage: what dvc.lock records against what is.

    ``status`` is ``ok``, ``changed``, ``missing`` or ``stale``; an output
    whose DVC cache object is altered or missing is ``altered`` or
    ``uncached``. For an input,
    ``upstream`` names the stage that produces it (None for raw data) and
    ``upstream_md5`` what that stage now records; ``actual_md5`` is the md5 on
    disk where it was computed.
    """

    path: str
    recorded_md5: str | None
    status: str
    actual_md5: str | None = None
    upstream: str | None = None
    upstream_md5: str | None = None
    nfiles: int | None = None
    detail: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "md5": self.recorded_md5,
            "status": self.status,
            "disk_md5": self.actual_md5,
            "upstream": self.upstream,
            "upstream_md5": self.upstream_md5,
            "nfiles": self.nfiles,
            "detail": list(self.detail),
        }


@dataclass(frozen=True)
class StageAudit:
    """One stage of the chain: its record in dvc.lock and how it checks out."""

    name: str
    cmd: str
    cmd_expected: str | None
    params: Mapping[str, Mapping[str, Any]]
    deps: tuple[Check, ...]
    outs: tuple[Check, ...]
    upstream: tuple[str, ...]
    flags: tuple[Flag, ...]
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """``ok`` or the kinds of flag raised, e.g. ``changed, stale``."""
        kinds = sorted({f.kind for f in self.flags})
        return ", ".join(kinds) if kinds else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "cmd": self.cmd,
            "cmd_in_dvc_yaml": self.cmd_expected,
            "upstream": list(self.upstream),
            "params": _plain(self.params),
            "deps": [d.to_dict() for d in self.deps],
            "outs": [o.to_dict() for o in self.outs],
            "info": _plain(self.info),
            "flags": [f.to_dict() for f in self.flags],
        }


class RawData(NamedTuple):
    """Where the chain starts: data no stage in the chain was given as input.

    ``role`` is ``"output"`` for what a stage without inputs produced (the
    built-in ``mnist5k`` digits) and ``"input"`` for an input no stage produces
    (your own data, tracked with ``dvc add`` or not at all); ``"code"`` for
    your own code that a stage reads (a ``.py`` file named in params.yaml).
    """

    stage: str
    path: str
    md5: str | None
    role: str


@dataclass(frozen=True)
class Lineage:
    """The chain from a target back to the raw data, oldest stage first."""

    target: str
    target_stage: str
    target_path: str | None
    target_md5: str | None
    stages: tuple[StageAudit, ...]
    raw: tuple[RawData, ...]
    git: GitState

    @property
    def flags(self) -> list[Flag]:
        """Every problem found, in chain order."""
        return [f for s in self.stages for f in s.flags]

    @property
    def verified(self) -> bool:
        """True when nothing was flagged."""
        return not self.flags

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": {
                "spec": self.target,
                "stage": self.target_stage,
                "path": self.target_path,
                "md5": self.target_md5,
            },
            "verified": self.verified,
            "flags": [f.to_dict() for f in self.flags],
            "raw_data": [r._asdict() for r in self.raw],
            "git": self.git.to_dict(),
            "stages": [s.to_dict() for s in self.stages],
        }


def _plain(value: Any) -> Any:
    """JSON-ready copy (mappings to dicts, tuples to lists)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value

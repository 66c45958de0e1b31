"""What DVC records and computes for a project, read through DVC's own API.

The only module of fedpipe that imports DVC at run time (``checks`` names DVC's
classes for type checkers only). Everything the audit knows about
``dvc.lock``, ``dvc.yaml``, hashes, ``.dvcignore`` and DVC's cache comes from
here, so it is what DVC itself would say:

* the record: ``dvc.lock`` loaded and schema-checked by DVC's ``Lockfile``; each
  recorded stage built by DVC's ``StageLoader`` from its lock entry, so its deps,
  params and outs are DVC ``Dependency`` / ``ParamsDependency`` / ``Output``
  objects carrying the recorded hash (legacy DVC 2 ``md5-dos2unix`` entries
  included);
* which stage produced what: DVC's outs trie (``dvc.repo.trie.build_outs_trie``,
  with its duplicate and overlapping-output checks) over the recorded stages,
  queried the way DVC's stage graph is built;
* the disk now: ``Output.get_hash`` (dvc_data's ``build`` with DVC's ignore
  filter and state database), directory listings as ``dvc_data`` trees, recorded
  listings loaded from DVC's cache (wherever ``.dvc/config`` puts it);
* params now: ``ParamsDependency.read_params`` / ``workspace_status``;
* the pipeline now: ``dvc.yaml`` parsed and templated (``vars``, ``${}``,
  ``foreach``, ``matrix``) by DVC's ``DataResolver`` through ``ProjectFile.stages``.

DVC is opened without its git layer (as with ``core.no_scm``): with it, opening a
repository makes DVC add entries to ``.dvc/.gitignore``, and the audit must leave
git's view of the project as it found it. What DVC does write is its own:
``.dvc/tmp/`` (git-ignored by ``dvc init``) and its state database of file hashes
in DVC's site cache. Git state is read by :mod:`fedpipe.observe.lineage.git`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from dvc.dependency import Dependency, ParamsDependency
from dvc.dvcfile import LOCK_FILE, PROJECT_FILE, ProjectFile
from dvc.exceptions import DvcException, NotDvcRepoError
from dvc.output import Output
from dvc.repo import Repo
from dvc.scm import SCM
from dvc.stage import PipelineStage
from dvc.stage.loader import StageLoader
from dvc_data.hashfile.build import build
from dvc_data.hashfile.tree import Tree

from fedpipe.observe.lineage.result import LineageError

__all__ = [
    "LOCK_FILE",
    "PROJECT_FILE",
    "DvcProject",
    "Listing",
    "ParamsNow",
    "PipelineEntry",
    "expected_commands",
    "open_project",
]

Listing = dict[str, str]
"""A directory's files: posix relpath inside the directory -> md5."""


class ParamsNow(NamedTuple):
    """A params file now, by DVC: ``status`` maps each recorded key DVC finds
    changed to ``deleted`` or ``modified``; ``values`` holds the current value of
    each recorded key present; ``problem`` is DVC's error reading the file."""

    status: dict[str, str]
    values: dict[str, Any]
    problem: str | None = None


class PipelineEntry(NamedTuple):
    """What ``dvc.yaml`` now says about a recorded stage.

    ``defined`` is False when the stage is gone from ``dvc.yaml``; ``cmd`` is the
    command DVC resolves for it and ``cmd_changed`` DVC's own comparison with
    the command ``dvc.lock`` recorded; ``problem`` is DVC's error when it cannot
    resolve or load the stage (then ``cmd`` is None).
    """

    defined: bool
    cmd: str | None = None
    cmd_changed: bool = False
    problem: str | None = None


def dvc_says(exc: BaseException) -> str:
    """DVC's message for ``exc`` with the detail it keeps apart (schema errors)."""
    detail = getattr(exc, "exc", None) or exc.__cause__
    return f"{exc} ({detail})" if detail else str(exc)


def read_params_file(path: Path) -> dict[str, Any] | None:
    """A params file as DVC reads it (its own YAML 1.2 loader: ``1e-3`` is a
    number, ``yes`` a string), so values compare as they do in ``dvc status``;
    None when it cannot be read or is not a mapping (the caller says why)."""
    from dvc.utils.serialize import parse_yaml

    try:
        data = parse_yaml(path.read_text(), str(path))
    except (OSError, DvcException):
        return None
    return data if isinstance(data, dict) else None


def command_text(cmd: Any) -> str:
    """A stage command as one line (DVC allows a list of commands)."""
    return " && ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd or "")


def _as_definition(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The ``dvc.yaml`` entry a ``dvc.lock`` stage amounts to: its command and the
    paths and params it recorded, so DVC's loader builds the stage as recorded."""
    return {
        "cmd": entry["cmd"],
        "deps": [d["path"] for d in entry.get("deps") or []],
        "params": [{name: list(v)} for name, v in (entry.get("params") or {}).items()],
        "outs": [o["path"] for o in entry.get("outs") or []],
    }


class DvcProject:
    """A project's DVC record and DVC's view of its disk, for one audit.

    Use :func:`open_project`. Stages are the ones ``dvc.lock`` records, in file
    order; hashes are computed once per path.
    """

    def __init__(self, repo: Repo, root: str) -> None:
        self.repo = repo
        self.root = root
        self.dvcfile = ProjectFile(repo, os.path.join(root, PROJECT_FILE))
        self.stages = self._recorded_stages()
        self._md5: dict[tuple[str, str], str | None] = {}
        self._recorded: dict[tuple[str, str], Listing | None] = {}

    # ------------------------------------------------------------ the record

    def _recorded_stages(self) -> dict[str, PipelineStage]:
        lock_path = os.path.join(self.root, LOCK_FILE)
        try:
            lock = self.dvcfile.lockfile_contents
        except DvcException as exc:
            raise LineageError(f"{lock_path}: {dvc_says(exc)}") from exc
        entries = lock.get("stages") or {}
        if not entries:
            raise LineageError(f"{lock_path}: records no stage")
        stages = {}
        for name, entry in entries.items():
            try:
                stages[name] = StageLoader.load_stage(
                    self.dvcfile, name, _as_definition(entry), entry
                )
            except DvcException as exc:
                raise LineageError(f"{lock_path}: {name}: {dvc_says(exc)}") from exc
        return stages

    def rel(self, item: Output) -> str:
        """``item``'s path relative to the project, posix style."""
        return Path(os.path.relpath(item.fs_path, self.root)).as_posix()

    def fs_path(self, rel: str) -> str:
        """Absolute path of ``rel`` (relative to the project)."""
        return os.path.abspath(os.path.join(self.root, rel))

    @staticmethod
    def data_deps(stage: PipelineStage) -> list[Dependency]:
        """The stage's recorded file and directory inputs (params apart)."""
        return [d for d in stage.deps if not isinstance(d, ParamsDependency)]

    @staticmethod
    def params_deps(stage: PipelineStage) -> list[ParamsDependency]:
        """The stage's recorded params, one per params file."""
        return [d for d in stage.deps if isinstance(d, ParamsDependency)]

    @staticmethod
    def recorded_params(stage: PipelineStage) -> dict[str, dict[str, Any]]:
        """``{params file: {key: value}}`` as ``dvc.lock`` records them."""
        return {
            d.def_path: dict(d.hash_info.value or {})
            for d in stage.deps
            if isinstance(d, ParamsDependency)
        }

    # ------------------------------------------------------------ producers

    @cached_property
    def _outs_trie(self) -> Any:
        from dvc.repo.trie import build_outs_trie

        try:
            with _quiet_pygtrie():
                return build_outs_trie(self.stages.values())
        except DvcException as exc:
            raise LineageError(f"{LOCK_FILE}: {dvc_says(exc)}") from exc

    def holder(self, fs_path: str) -> Output | None:
        """The recorded output that is ``fs_path`` or a directory holding it."""
        node = self._outs_trie.shortest_prefix(self.repo.fs.parts(fs_path))
        return node.value if node else None

    def producers(self, fs_path: str) -> list[Output]:
        """The recorded outputs an input ``fs_path`` comes from, linked as DVC's
        stage graph links them (``dvc.repo.graph.build_graph``): the output that
        is ``fs_path`` or holds it, and the outputs inside a directory
        ``fs_path``; empty for raw data."""
        trie = self._outs_trie
        key = self.repo.fs.parts(fs_path)
        found = [node.value for node in trie.prefixes(key)]
        if trie.has_subtrie(key):
            found.extend(trie.values(prefix=key))
        return found

    def upstream(self, name: str) -> list[str]:
        """Stages whose outputs ``name`` read, in the order of its inputs."""
        found: list[str] = []
        for dep in self.data_deps(self.stages[name]):
            for out in self.producers(dep.fs_path):
                if out.stage.name not in found and out.stage.name != name:
                    found.append(out.stage.name)
        return found

    def chain(self, name: str) -> list[str]:
        """``name`` and every stage upstream of it, in dvc.lock order."""
        seen = {name}
        todo = [name]
        while todo:
            for up in self.upstream(todo.pop()):
                if up not in seen:
                    seen.add(up)
                    todo.append(up)
        return [n for n in self.stages if n in seen]

    # ------------------------------------------------------------ disk now

    def md5(self, item: Output) -> str | None:
        """What DVC computes for ``item`` on disk now; None when nothing is there.

        ``Output.get_hash``: DVC's hash (``.dir`` hash for a directory), with its
        ignore filter and state database.
        """
        key = (item.fs_path, item.hash_name)
        if key not in self._md5:
            exists = item.fs.exists(item.fs_path)
            self._md5[key] = item.get_hash().value if exists else None
        return self._md5[key]

    def md5_of(self, rel: str) -> str | None:
        """DVC's md5 of any path in the project (a file inside an output, ...)."""
        stage = next(iter(self.stages.values()))
        return self.md5(Dependency(stage, self.fs_path(rel)))

    def listing(self, item: Output) -> Listing:
        """The files DVC sees now in the directory ``item`` (its ignore applied)."""
        _, _, obj = build(
            item.local_cache,
            item.fs_path,
            item.fs,
            item.hash_name,
            ignore=item.dvcignore,
            dry_run=True,
        )
        return _listing(obj) or {}

    def recorded_listing(self, item: Output) -> Listing | None:
        """The listing DVC's cache keeps for ``item``'s recorded ``.dir`` hash;
        None when the cache does not hold it (or ``item`` is a file)."""
        if not item.hash_info.isdir:
            return None
        key = (item.hash_info.value or "", item.hash_name)
        if key not in self._recorded:
            self._recorded[key] = _listing(item.get_obj())
        return self._recorded[key]

    def recorded_md5_inside(self, out: Output, fs_path: str) -> str | None:
        """md5 that ``out`` (a directory) recorded for the file ``fs_path`` in it."""
        inner = Path(os.path.relpath(fs_path, out.fs_path)).as_posix()
        return (self.recorded_listing(out) or {}).get(inner)

    def dvc_file_md5(self, rel: str) -> str | None:
        """md5 that ``REL.dvc`` (``dvc add``) records for raw data, if any."""
        path = self.fs_path(f"{rel}.dvc")
        if not os.path.isfile(path):
            return None
        try:
            outs = self.repo.stage.load_one(path=path).outs
        except DvcException:
            return None
        return outs[0].hash_info.value if outs else None

    # ------------------------------------------------------------ params now

    @staticmethod
    def params_now(dep: ParamsDependency) -> ParamsNow:
        """DVC's status of each recorded key and, where one changed, the values
        the params file holds now (DVC parses the file once per call)."""
        recorded = dep.hash_info.value or {}
        if not dep.exists:
            return ParamsNow(dict.fromkeys(recorded, "deleted"), {})
        try:
            status = next(iter(dep.workspace_status().values()), {})
            if not isinstance(status, Mapping):  # the whole file: "deleted", ...
                status = dict.fromkeys(recorded, status)
            values = dep.read_params() if status else {}
        except DvcException as exc:
            return ParamsNow({}, {}, dvc_says(exc))
        return ParamsNow(dict(status), values)

    # ------------------------------------------------------------ dvc.yaml now

    @cached_property
    def _pipeline(self) -> StageLoader | str | None:
        if not self.dvcfile.exists():
            return None
        try:
            return self.dvcfile.stages
        except DvcException as exc:
            return f"DVC cannot read {PROJECT_FILE}: {dvc_says(exc)}"

    def pipeline_entry(self, name: str) -> PipelineEntry | None:
        """What ``dvc.yaml`` now defines for ``name``; None without a dvc.yaml."""
        stages = self._pipeline
        if stages is None:
            return None
        if isinstance(stages, str):
            return PipelineEntry(True, problem=stages)
        try:
            if name not in stages:
                return PipelineEntry(False)
            stage = stages[name]
        except DvcException as exc:
            message = f"DVC cannot resolve {name} in {PROJECT_FILE}: {dvc_says(exc)}"
            return PipelineEntry(True, problem=message)
        return PipelineEntry(True, command_text(stage.cmd), bool(stage.cmd_changed))

    def pipeline_commands(self) -> dict[str, str | None]:
        """Every stage ``dvc.yaml`` now defines (``foreach`` / ``matrix``
        expanded by DVC) and its command; None where DVC cannot resolve it."""
        stages = self._pipeline
        if not isinstance(stages, StageLoader):
            return {}
        try:
            names = list(stages)
        except DvcException:
            return {}
        entries = {name: self.pipeline_entry(name) for name in names}
        return {name: entry.cmd if entry else None for name, entry in entries.items()}


@contextmanager
def _quiet_pygtrie() -> Iterator[None]:
    """DVC 3.67 reads ``shortest_prefix(...).value``, which pygtrie deprecates."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "_NoneStep.value", DeprecationWarning)
        yield


def _listing(obj: Any) -> Listing | None:
    if not isinstance(obj, Tree):
        return None
    return {"/".join(key): hi.value for key, _, hi in obj if hi is not None}


def expected_commands(root: Path) -> dict[str, str | None]:
    """The command ``dvc.yaml`` now gives each stage, as DVC resolves it.

    Stage names as DVC generates them (``round@K`` for ``foreach`` stages);
    None where DVC cannot resolve a stage. Needs a recorded project (a
    ``dvc.lock``), like the audit.
    """
    with open_project(root) as project:
        return project.pipeline_commands()


@contextmanager
def open_project(root: Path) -> Iterator[DvcProject]:
    """The DVC project at ``root``, read through DVC.

    Raises
    ------
    LineageError
        No ``dvc.lock`` (nothing recorded yet), not a DVC project, or a
        ``dvc.lock`` DVC cannot read.
    """
    lock = root / LOCK_FILE
    if not lock.is_file():
        raise LineageError(
            f"{lock}: not found; nothing has been recorded yet (run `fedpipe run` "
            "or `dvc repro` first)"
        )
    where = os.path.abspath(root)
    try:
        repo = Repo(where, scm=SCM(where, no_scm=True))
    except NotDvcRepoError as exc:
        raise LineageError(
            f"{root}: not a DVC project: {exc} (`fedpipe init` makes one)"
        ) from exc
    except DvcException as exc:
        raise LineageError(f"{root}: DVC cannot open it: {dvc_says(exc)}") from exc
    try:
        yield DvcProject(repo, where)
    finally:
        repo.close()

"""The remembered staleness answer (orchestration.staleness) against DVC's.

A tiny DVC project (git + DVC, ``dvc repro`` once in this process): a stage
that lists a data folder, and a ``round@1`` stage (a ``foreach`` stage, so its
cache objects are the model stages' that fedpipe hashes) that copies a file
into a model folder, with a tracked param. Each test first lets the answer be
kept, changes one thing the way a person (or bit rot) would, and checks that
the kept answer is dropped and the new one is DVC's (``Repo.status()``, what
``dvc status --json`` prints), then puts the project back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import chdir, contextmanager
from pathlib import Path
from typing import Any

import pytest
from dvc.repo import Repo
from helpers_dvc import reproduced_project

from fedpipe.observe.status import Reason, Staleness, staleness
from orchestration import staleness as remembered
from orchestration.staleness import kept_staleness, remembered_staleness

pytestmark = pytest.mark.filterwarnings("ignore:_NoneStep.value:DeprecationWarning")
PARAMS = "train:\n  lr: 0.001\n"
PIPELINE = """\
stages:
  listing:
    cmd: ls data > listing.txt
    deps: [data]
    outs: [listing.txt]
  round:
    foreach:
      1: 0
    do:
      cmd: mkdir -p models/round-${key} && cp in.txt models/round-${key}/w.txt
      deps: [in.txt, listing.txt]
      params: [train.lr]
      outs:
        - models/round-${key}
"""
EXTRA = """\
  extra:
    cmd: cp in.txt extra.txt
    deps: [in.txt]
    outs: [extra.txt]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("staleness")
    files = {
        "params.yaml": PARAMS,
        "in.txt": "weights\n",
        "data/a.txt": "a\n",
        "dvc.yaml": PIPELINE,
    }
    with pytest.MonkeyPatch.context() as mp:
        # what these tests check is which answer is given, not the wait for
        # files written this instant to settle (test_a_file_written_now_...)
        mp.setattr(remembered, "SETTLE_S", 0.0)
        site = tmp_path_factory.mktemp("dvc-site")
        yield reproduced_project(root, files, mp, site)


def _raw() -> dict[str, Any]:
    return {"train": {"lr": 0.001}}


def _dvc_status(root: Path) -> dict[str, Any]:
    with chdir(root), Repo(str(root)) as repo:
        return repo.status()


def _as_dvc(reasons: Sequence[Reason]) -> list[Any]:
    """fedpipe's reasons for a stage in the shape of DVC's status entries."""
    deps: dict[str, Any] = {}
    outs: dict[str, str] = {}
    rest: list[str] = []
    for r in reasons:
        if r.kind in ("code", "data"):
            deps[str(r.path)] = r.change
        elif r.kind == "params":
            deps.setdefault("params.yaml", {})[r.key] = "modified"
        elif r.kind == "output":
            outs[str(r.path)] = r.change
        else:
            rest.append(r.kind)
    entries: list[Any] = [{"changed deps": deps}] if deps else []
    return entries + ([{"changed outs": outs}] if outs else []) + rest


def _kept_then(root: Path) -> Staleness:
    """The answer for the project as it is, kept (asserted)."""
    answer = remembered_staleness(root, _raw())
    assert kept_staleness(root) == answer
    return answer


def _after_change(root: Path) -> Staleness:
    """The kept answer is dropped; the new one is fedpipe's fresh answer."""
    assert kept_staleness(root) is None
    answer = remembered_staleness(root, _raw())
    assert answer == staleness(root, _raw())
    return answer


def _agrees_with_dvc(root: Path, answer: Staleness) -> None:
    assert answer.stale is not None
    stale = {
        s: _as_dvc(r) for s, r in answer.stale.items() if r[0].kind != "not recorded"
    }
    assert stale == _dvc_status(root)


@contextmanager
def _changed(path: Path, text: str | None) -> Iterator[None]:
    before = path.read_bytes()
    mode = path.stat().st_mode & 0o777
    if text is None:
        path.unlink()
    else:
        path.chmod(0o644)
        path.write_text(text)
    try:
        yield
    finally:
        path.chmod(0o644) if path.exists() else None
        path.write_bytes(before)
        path.chmod(mode)


def _object(root: Path) -> Path:
    """The cache object of ``models/round-1/w.txt``."""
    lock = (root / "dvc.lock").read_text()
    import yaml

    md5 = yaml.safe_load(lock)["stages"]["round@1"]["outs"][0]["md5"]
    listing = root / ".dvc/cache/files/md5" / md5[:2] / md5[2:]
    entry = json.loads(listing.read_text())[0]["md5"]
    return root / ".dvc/cache/files/md5" / entry[:2] / entry[2:]


# ---------------------------------------------------------------- the cases


def test_an_unchanged_project_is_answered_from_the_record(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _kept_then(project).nothing_to_do
    assert _dvc_status(project) == {}

    def no_dvc(root: Path, raw: Any) -> Staleness:
        raise AssertionError("DVC was asked although nothing changed")

    monkeypatch.setattr(remembered, "staleness", no_dvc)
    assert remembered_staleness(project, _raw()).nothing_to_do


def test_a_changed_param(project: Path) -> None:
    _kept_then(project)
    with _changed(project / "params.yaml", PARAMS.replace("0.001", "0.002")):
        answer = _after_change(project)
        assert [r.text() for r in answer.stale["round@1"]] == [
            "param train.lr 0.001 -> 0.002"
        ]
        _agrees_with_dvc(project, answer)


def test_a_changed_data_file(project: Path) -> None:
    _kept_then(project)
    with _changed(project / "in.txt", "other weights\n"):
        answer = _after_change(project)
        assert list(answer.stale) == ["round@1"]
        _agrees_with_dvc(project, answer)


def test_a_deleted_output(project: Path) -> None:
    _kept_then(project)
    with _changed(project / "listing.txt", None):
        answer = _after_change(project)
        assert answer.stale["listing"] == [
            Reason("output", path="listing.txt", change="deleted")
        ]
        _agrees_with_dvc(project, answer)


def test_a_deleted_cache_object(project: Path) -> None:
    _kept_then(project)
    with _changed(_object(project), None):
        answer = _after_change(project)
        assert [d.problem for d in answer.damaged] == ["missing"]
        _agrees_with_dvc(project, answer)  # "not in cache"
        assert answer.stale


def test_a_cache_object_altered_in_place_with_its_times_kept(project: Path) -> None:
    _kept_then(project)
    obj = _object(project)
    st = obj.stat()
    with _changed(obj, "bit rot\n"):
        obj.chmod(st.st_mode & 0o777)  # read-only again, as DVC left it
        os.utime(obj, ns=(st.st_atime_ns, st.st_mtime_ns))
        answer = _after_change(project)
        assert [d.problem for d in answer.damaged] == ["altered"]
        assert not answer.nothing_to_do
        assert _dvc_status(project) == {}  # DVC trusts its read-only object


def test_a_stage_added_to_dvc_yaml(project: Path) -> None:
    _kept_then(project)
    with _changed(
        project / "dvc.yaml", PIPELINE.replace("  round:", EXTRA + "  round:")
    ):
        answer = _after_change(project)
        assert answer.stale == {"extra": [Reason("not recorded")]}
        assert "extra" in _dvc_status(project)


def test_a_folder_dep_gaining_a_file(project: Path) -> None:
    _kept_then(project)
    new = project / "data" / "b.txt"
    new.write_text("b\n")
    try:
        answer = _after_change(project)
        assert answer.stale["listing"] == [
            Reason("data", path="data", change="modified")
        ]
        _agrees_with_dvc(project, answer)
    finally:
        new.unlink()


def test_the_project_is_left_as_it_was(project: Path) -> None:
    assert remembered_staleness(project, _raw()).nothing_to_do
    assert _dvc_status(project) == {}


def test_a_file_written_now_is_not_trusted_yet(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remembered, "SETTLE_S", 3600.0)
    (project / "in.txt").write_text("weights\n")  # same bytes, a new stat
    assert remembered_staleness(project, _raw()).nothing_to_do
    assert kept_staleness(project) is None

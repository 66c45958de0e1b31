"""``fedpipe status`` against ``dvc status`` on a real DVC project.

One tiny project (git + DVC, one ``cp`` stage with a data input, a code input, a
tracked param and an output), reproduced once by ``dvc repro`` (DVC's API, in
this process: no second DVC start-up). Each test changes one thing the way a
person would, asks both fedpipe (:func:`collect`) and DVC (``Repo.status()``,
what ``dvc status --json`` prints) what is stale and why, and puts the project
back. fedpipe's own run on a real pipeline: tests/e2e/test_status_params.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import chdir, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from dvc.repo import Repo
from helpers_dvc import reproduced_project

from fedpipe.observe.status import Reason, collect, format_text

# DVC 3.67 reads `shortest_prefix(...).value`, which pygtrie deprecates (as in
# fedpipe.observe.lineage.dvcstate)
pytestmark = pytest.mark.filterwarnings("ignore:_NoneStep.value:DeprecationWarning")
PARAMS = "train:\n  lr: 0.001\n  epochs: 1\n"
PIPELINE = """\
stages:
  copy:
    cmd: cp in.txt out.txt
    deps: [in.txt, code.py]
    params: [train.lr]
    outs: [out.txt]
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("status-dvc")
    files = {
        "params.yaml": PARAMS,
        "in.txt": "hello\n",
        "code.py": "print('hello')\n",
        "dvc.yaml": PIPELINE,
    }
    with pytest.MonkeyPatch.context() as mp:
        site = tmp_path_factory.mktemp("dvc-site")
        yield reproduced_project(root, files, mp, site)


@contextmanager
def _changed(path: Path, text: str | None) -> Iterator[None]:
    """``path`` holding ``text`` (deleted for None) for the block, then as before."""
    before = path.read_bytes()
    if text is None:
        path.unlink()
    else:
        path.write_text(text)
    try:
        yield
    finally:
        path.write_bytes(before)


def _dvc_status(root: Path) -> dict[str, Any]:
    """What ``dvc status --json`` prints there: DVC's own ``Repo.status()`` (its
    stage names are relative to the working directory, as on the command line)."""
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
            change = "deleted" if r.new == "(deleted)" else "modified"
            deps.setdefault("params.yaml", {})[r.key] = change
        elif r.kind == "output":
            outs[str(r.path)] = r.change
        elif r.kind == "command":
            rest.append("changed command")
        else:
            rest.append(r.kind)
    entries: list[Any] = [{"changed deps": deps}] if deps else []
    return entries + ([{"changed outs": outs}] if outs else []) + rest


def _both(root: Path) -> tuple[dict[str, list[Reason]], dict[str, Any]]:
    """fedpipe's stale stages and DVC's status; asserts they agree."""
    status = collect(root)
    assert status.stale is not None, status.problems
    dvc = _dvc_status(root)
    assert {stage: _as_dvc(r) for stage, r in status.stale.items()} == dvc
    return status.stale, dvc


def _stale_reasons(root: Path) -> list[str]:
    stale, _ = _both(root)
    assert list(stale) == ["copy"]
    return [r.text() for r in stale["copy"]]


# ---------------------------------------------------------------- params


def test_the_reproduced_project_is_up_to_date(project: Path) -> None:
    assert _both(project) == ({}, {})


def test_1e_3_for_0_001_is_no_change_for_either(project: Path) -> None:
    text = PARAMS.replace("0.001", "1e-3")
    assert yaml.safe_load(text)["train"]["lr"] == "1e-3"  # PyYAML: a string
    with _changed(project / "params.yaml", text):
        assert _both(project) == ({}, {})
        status = collect(project)
        assert "up to date (dvc status: nothing changed)" in format_text(status)


def test_1e_3_to_2e_3_is_a_change_for_both(project: Path) -> None:
    with _changed(project / "params.yaml", PARAMS.replace("0.001", "2e-3")):
        stale, dvc = _both(project)
        assert dvc == {
            "copy": [{"changed deps": {"params.yaml": {"train.lr": "modified"}}}]
        }
        assert stale["copy"] == [Reason("params", key="train.lr", old=0.001, new=0.002)]
        assert stale["copy"][0].text() == "param train.lr 0.001 -> 0.002"


def test_an_untracked_param_is_no_change(project: Path) -> None:
    with _changed(project / "params.yaml", PARAMS.replace("epochs: 1", "epochs: 2")):
        assert _both(project) == ({}, {})


def test_a_deleted_param(project: Path) -> None:
    with _changed(project / "params.yaml", "train:\n  epochs: 1\n"):
        assert _stale_reasons(project) == ["param train.lr 0.001 -> (deleted)"]


# ---------------------------------------------------------------- inputs, outputs


def test_changed_code(project: Path) -> None:
    with _changed(project / "code.py", "print('changed')\n"):
        assert _stale_reasons(project) == ["code code.py modified"]


def test_changed_data(project: Path) -> None:
    with _changed(project / "in.txt", "changed\n"):
        assert _stale_reasons(project) == ["data in.txt modified"]


def test_deleted_output(project: Path) -> None:
    with _changed(project / "out.txt", None):
        assert _dvc_status(project) == {
            "copy": [{"changed outs": {"out.txt": "deleted"}}]
        }
        assert _stale_reasons(project) == ["output out.txt missing"]


def test_modified_output(project: Path) -> None:
    with _changed(project / "out.txt", "edited by hand\n"):
        assert _stale_reasons(project) == ["output out.txt modified"]


# ---------------------------------------------------------------- dvc.yaml


def test_changed_command(project: Path) -> None:
    pipeline = PIPELINE.replace("cp in.txt out.txt", "cp -p in.txt out.txt")
    with _changed(project / "dvc.yaml", pipeline):
        assert _dvc_status(project) == {"copy": ["changed command"]}
        assert _stale_reasons(project) == ["command changed in dvc.yaml"]


def test_always_changed(project: Path) -> None:
    pipeline = PIPELINE.replace("    outs:", "    always_changed: true\n    outs:")
    with _changed(project / "dvc.yaml", pipeline):
        assert _stale_reasons(project) == ["always changed"]


def test_several_reasons_in_dvc_order(project: Path) -> None:
    pipeline = PIPELINE.replace("cp in.txt out.txt", "cp -p in.txt out.txt")
    with (
        _changed(project / "code.py", "print('changed')\n"),
        _changed(project / "out.txt", None),
        _changed(project / "dvc.yaml", pipeline),
    ):
        assert _stale_reasons(project) == [
            "code code.py modified",
            "output out.txt missing",
            "command changed in dvc.yaml",
        ]


def test_the_project_is_left_as_it_was(project: Path) -> None:
    # the tests above put every file back: both see nothing changed again
    assert _both(project) == ({}, {})

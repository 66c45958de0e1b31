"""The dvc.lock reader started before a run's flow (``fedpipe run`` starts it
before importing TensorFlow): its early answer is the one the run asks for, and
a run that asks something else is answered anew."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestration.dvclock import recorder_for, starting_recorder

DVC = [sys.executable, "-m", "dvc"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two stages, ``a`` recorded up to date, ``b`` never run."""
    root = tmp_path_factory.mktemp("early")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*DVC, "init", "-q"], cwd=root, check=True)
    (root / "in.txt").write_text("x\n")
    (root / "dvc.yaml").write_text(
        "stages:\n"
        "  a:\n    cmd: cp in.txt a.txt\n    deps: [in.txt]\n    outs: [a.txt]\n"
        "  b:\n    cmd: cp a.txt b.txt\n    deps: [a.txt]\n    outs: [b.txt]\n"
    )
    subprocess.run([*DVC, "repro", "-q", "a"], cwd=root, check=True)
    return root


def test_the_early_answer_is_the_runs(project: Path) -> None:
    with starting_recorder(project, ["a", "b"]) as early:
        recorder = recorder_for(project)
        assert recorder is early  # handed over, not a second process
        assert recorder._asked == ["a", "b"]
        assert recorder.fresh_prefix(["a", "b"]) == 1
        assert recorder._asked is None
        assert recorder.fresh_prefix(["a"]) == 1  # asked anew, same process
    assert recorder._proc is None  # closed with the block
    assert recorder_for(project) is not early  # not handed out twice


def test_another_question_is_answered_anew(project: Path) -> None:
    (project / "in.txt").write_text("changed\n")
    try:
        with starting_recorder(project, ["b"]):
            recorder = recorder_for(project)
            # the early answer (to ["b"]) is read and dropped, not returned
            assert recorder.fresh_prefix(["a", "b"]) == 0
    finally:
        (project / "in.txt").write_text("x\n")

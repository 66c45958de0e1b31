"""The recorder writes dvc.lock whole (orchestration.dvclock.dump_lock): the same
bytes DVC's own ``Lockfile.dump_stages`` writes in place, and a failed write
leaves the old file as it was."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from fedpipe.core.diskspace import DiskFullError
from orchestration import dvclock

DVC_YAML = """stages:
  one:
    cmd: echo one > one.txt
    outs:
      - one.txt
  two:
    cmd: echo two > two.txt
    deps:
      - one.txt
    outs:
      - two.txt
"""


def _repo(root: Path) -> Path:
    root.mkdir()
    dvc = str(Path(sys.executable).parent / "dvc")
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=root, check=True)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "one.txt").write_text("one\n")
    (root / "two.txt").write_text("two\n")
    return root


def _dvcs_own(root: Path, names: list[str]) -> None:
    """What the recorder did before: DVC's ``dump_stages``, in place."""
    from dvc.repo import Repo

    repo = Repo(str(root))
    with repo.lock:
        by_name = {stage.addressing: stage for stage in repo.index.stages}
        stages = [by_name[n] for n in names]
        for stage in stages:
            stage.save()
            stage.commit(relink=False)
        stages[0].dvcfile.dump_stages(stages, update_pipeline=False)


def test_the_same_bytes_as_dvcs_own_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = _repo(tmp_path / "ours"), _repo(tmp_path / "theirs")
    for names in (["one"], ["two"], ["one", "two"]):
        monkeypatch.chdir(ours)  # as the recorder runs: in its project
        dvclock.commit_stages(ours, names, lock_held=False)
        monkeypatch.chdir(theirs)
        _dvcs_own(theirs, names)
        assert (ours / "dvc.lock").read_bytes() == (theirs / "dvc.lock").read_bytes()
    assert not list(ours.glob("dvc.lock.tmp"))


def test_a_full_disk_leaves_the_old_lock_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _repo(tmp_path / "repo")
    monkeypatch.chdir(root)  # as the recorder runs: in its project
    dvclock.commit_stages(root, ["one"], lock_held=False)
    before = (root / "dvc.lock").read_bytes()

    def no_space(self: Path, data: bytes) -> int:  # the disk, not dump_lock
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", no_space)
    with pytest.raises(DiskFullError, match="dvc.lock"):
        dvclock.commit_stages(root, ["two"], lock_held=False)
    monkeypatch.undo()
    assert (root / "dvc.lock").read_bytes() == before
    assert not (root / "dvc.lock.tmp").exists()

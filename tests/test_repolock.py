"""One run per project: orchestration.repolock holds DVC's own repo lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration import repolock

ROOT = Path(__file__).resolve().parents[1]
TRY_HOLD = (
    "import sys\n"
    "from pathlib import Path\n"
    "from orchestration.repolock import ProjectBusy, hold\n"
    "try:\n"
    "    with hold(Path(sys.argv[1]), command='fedpipe run', retry_s=0.2):\n"
    "        print('held')\n"
    "except ProjectBusy as exc:\n"
    "    print(exc)\n"
)


def _project(tmp_path: Path) -> Path:
    (tmp_path / ".dvc" / "tmp").mkdir(parents=True)
    return tmp_path


def _other_process_tries(project: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", TRY_HOLD, str(project)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_second_process_is_refused_naming_the_holder(tmp_path: Path) -> None:
    project = _project(tmp_path)
    with repolock.hold(project):
        said = _other_process_tries(project)
        assert (project / repolock.LOCK_PATH).read_text() == f" {os.getpid()}\n"
    assert said.startswith(f"{project.resolve()}: pid {os.getpid()} (")
    assert said.endswith(
        "is running in this project (it holds DVC's lock, .dvc/tmp/lock); "
        "`fedpipe run` refused: wait for it to end, or stop it"
    )
    assert _other_process_tries(project) == "held"  # released at the block's end


def test_hold_is_reentrant_and_names_the_holder_for_children(tmp_path: Path) -> None:
    project = _project(tmp_path)
    assert repolock.HOLDER_ENV not in os.environ
    with repolock.hold(project):
        assert os.environ[repolock.HOLDER_ENV] == str(os.getpid())
        with repolock.hold(project):  # the flow inside `fedpipe run`
            assert repolock.held_for_us(project)
        assert repolock.held_fd(project) is not None
    assert repolock.HOLDER_ENV not in os.environ
    assert not repolock.held_for_us(project)


def test_a_live_process_in_dvcs_rwlock_refuses_a_dead_one_does_not(
    tmp_path: Path,
) -> None:
    project = _project(tmp_path)
    dead = subprocess.Popen(["true"])
    dead.wait()
    rwlock = project / repolock.RWLOCK_PATH
    cmd = "dvc repro"
    rwlock.write_text(json.dumps({"write": {"x": {"pid": dead.pid, "cmd": cmd}}}))
    with repolock.hold(project):
        pass
    live = os.getppid()  # pytest's parent: alive, not this process
    rwlock.write_text(json.dumps({"write": {"x": {"pid": live, "cmd": cmd}}}))
    with pytest.raises(repolock.ProjectBusy, match=rf"pid {live}\b.*\.dvc/tmp/rwlock"):
        with repolock.hold(project):
            pass
    assert repolock.held_fd(project) is None


def test_not_a_dvc_project_takes_no_lock(tmp_path: Path) -> None:
    with repolock.hold(tmp_path):
        assert not (tmp_path / repolock.LOCK_PATH).exists()


def test_dvc_takes_no_second_lock_inside_the_run(tmp_path: Path) -> None:
    from dvc.lock import LockNoop
    from dvc.repo import Repo

    Repo.init(str(tmp_path), no_scm=True).close()
    with repolock.hold(tmp_path):
        with repolock.open_repo(tmp_path) as repo:
            assert isinstance(repo.lock, LockNoop)
            assert repo.status() == {}  # @locked: would wait 3 s and fail
    with repolock.open_repo(tmp_path) as repo:
        assert not isinstance(repo.lock, LockNoop)

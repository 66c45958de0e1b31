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


# ------------------------------------------------- a damaged rwlock is repaired

# DVC 3.67 reads `shortest_prefix(...).value`, which pygtrie deprecates
DVC_WARNING = "ignore:_NoneStep.value:DeprecationWarning"
PIPELINE = "stages:\n  copy:\n    cmd: cp in.txt out.txt\n    deps: [in.txt]\n"
PIPELINE += "    outs: [out.txt]\n"


@pytest.fixture(scope="module")
def dvc_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real DVC project with one stage, reproduced (``dvc repro``)."""
    from dvc.repo import Repo

    root = tmp_path_factory.mktemp("rwlock")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DVC_NO_ANALYTICS", "1")
        mp.setenv("DVC_SITE_CACHE_DIR", str(tmp_path_factory.mktemp("dvc-site")))
        mp.chdir(root)
        Repo.init(str(root), no_scm=True).close()
        (root / "in.txt").write_text("hello\n")
        (root / "dvc.yaml").write_text(PIPELINE)
        with Repo(str(root)) as repo:
            repo.reproduce()
    return root


def _dvc_status(root: Path) -> dict:
    """DVC's own ``Repo.status()`` (what ``dvc status`` prints), which reads the
    rwlock (every stage's deps and outs are read-locked)."""
    from dvc.repo import Repo

    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        with Repo(str(root)) as repo:
            return repo.status()


def _dead_pid() -> int:
    dead = subprocess.Popen(["true"])
    dead.wait()
    return dead.pid


def _entry(pid: int) -> dict:
    return {"write": {"out.txt": {"pid": pid, "cmd": "dvc repro"}}}


@pytest.mark.filterwarnings(DVC_WARNING)
@pytest.mark.parametrize(
    ("content", "found"),
    [
        ("", "it was empty (0 bytes: a DVC write cut short)"),
        ('{"write": {"out.txt": {"pid": DEAD', "it was not JSON ("),
        ('{"locks": []}', "it was JSON but not DVC's rwlock format"),
        (None, "it named only processes that are gone (pid "),
    ],
    ids=["empty", "cut-short", "not-dvcs-format", "dead-pids"],
)
def test_a_damaged_rwlock_is_repaired_in_one_line_and_dvc_works_again(
    dvc_project: Path,
    content: str | None,
    found: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dvc.exceptions import DvcException

    rwlock = dvc_project / repolock.RWLOCK_PATH
    dead = _dead_pid()
    text = json.dumps(_entry(dead)) if content is None else content
    rwlock.write_text(text.replace("DEAD", str(dead)))
    if content is not None:  # what wedged the project: DVC stops on it
        with pytest.raises(DvcException, match="rwlock"):
            _dvc_status(dvc_project)
    capsys.readouterr()
    with repolock.hold(dvc_project):  # what `fedpipe run` does first
        pass
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"repaired {dvc_project.resolve()}/.dvc/tmp/rwlock: ")
    assert found in line
    assert line.endswith(
        "no live process is named in it, so it was removed (DVC reads no file as "
        "no paths locked)"
    )
    assert not rwlock.exists()
    assert _dvc_status(dvc_project) == {}  # `dvc status`: up to date
    with repolock.hold(dvc_project):  # nothing left to repair: nothing said
        pass
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("cut_short", [False, True], ids=["sound", "cut-short"])
def test_a_live_process_in_the_rwlock_is_refused_by_name_and_its_file_kept(
    dvc_project: Path, cut_short: bool
) -> None:
    live = os.getppid()  # pytest's parent: alive, not this process
    text = json.dumps(_entry(live))
    rwlock = dvc_project / repolock.RWLOCK_PATH
    rwlock.write_text(text[:-5] if cut_short else text)
    try:
        with pytest.raises(
            repolock.ProjectBusy, match=rf"pid {live}\b.*\.dvc/tmp/rwlock"
        ):
            with repolock.hold(dvc_project):
                pass
        assert rwlock.read_text() == (text[:-5] if cut_short else text)
    finally:
        rwlock.unlink()

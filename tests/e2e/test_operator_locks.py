"""The orchestration's own failures, tried as an operator would (issue 12): two
runs in one project, a damaged DVC lock, a stateful run killed.

- two runs in one project, or a run and ``dvc repro``: the second refuses,
  naming the first;
- an emptied ``.dvc/tmp/rwlock`` (a kill while DVC rewrote it) is repaired by
  the next run, in one line;
- SCAFFOLD (state on the server and every client) killed with SIGKILL at two
  points of a round resumes to the bits of an uninterrupted SCAFFOLD run.

Bits are compared with the session's uninterrupted tiny run (``tiny_run``). Split
from tests/e2e/test_operator_failures.py (the Prefect server's failures) so that
the two test workers share the time.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from e2e_helpers import BIN, file_hashes, run_cli, run_main
from e2e_helpers import start_in_session as _start
from e2e_helpers import wait_for_file as _wait_for
from undone import undo_from

from fedpipe.config.overrides import set_params

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
RUN = [FEDPIPE, "run", "--no-server-start", "--no-report"]
MODELS = "models/round-*/weights.npz"


def _lock_holder(project: Path) -> int | None:
    """The pid in DVC's repo lock while someone holds it (None: free)."""
    fd = os.open(project / ".dvc/tmp/lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return int((project / ".dvc/tmp/lock").read_text().split()[0])
    finally:
        os.close(fd)  # closing drops a lock this test took
    return None


def test_a_second_run_and_dvc_repro_refuse_while_a_run_holds_the_project(
    tiny_fresh: Path, tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = shutil.copytree(tiny_fresh, tmp_path / "busy")
    first = _start(RUN, project, cli_env)
    deadline = time.monotonic() + 120
    while _lock_holder(project) != first.pid and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()[0][-3000:]
        time.sleep(0.05)
    params = (project / "params.yaml").read_text()

    second = run_cli([*RUN, "-S", "train.lr=0.5"], project, cli_env, check=False)
    assert second.returncode == 1, second.stdout + second.stderr
    assert second.stderr.splitlines()[0] == (
        f"error: {project.resolve()}: pid {first.pid} (fedpipe run --no-server-start "
        "--no-report) is running in this project (it holds DVC's lock, "
        ".dvc/tmp/lock); `fedpipe run` refused: wait for it to end, or stop it"
    )
    assert (project / "params.yaml").read_text() == params  # -S not applied
    repro = run_cli([DVC, "repro"], project, cli_env, check=False)
    assert repro.returncode != 0
    assert "Unable to acquire lock" in repro.stderr
    assert "Running stage" not in repro.stdout
    assert first.poll() is None, "the first run ended before the others were tried"

    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out[-3000:]
    assert file_hashes(project, MODELS) == file_hashes(tiny_run["project"], MODELS)


def _rwlock_pids(project: Path) -> set[int]:
    try:
        info = json.loads((project / ".dvc/tmp/rwlock").read_text() or "{}")
    except (OSError, ValueError):
        return set()
    entries = list(info.get("write", {}).values())
    return {e["pid"] for e in entries}


def test_a_run_refuses_while_dvc_repro_runs_a_stage(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = shutil.copytree(tiny_run["project"], tmp_path / "repro-busy")
    repro = _start([DVC, "repro", "-f", "-s", "summary"], project, cli_env)
    deadline = time.monotonic() + 120
    # DVC lets go of its repo lock while a stage's command runs; its rwlock
    # names the stage's files and the dvc process
    while repro.pid not in _rwlock_pids(project) and time.monotonic() < deadline:
        assert repro.poll() is None, repro.communicate()[0][-3000:]
        time.sleep(0.05)
    run = run_cli(RUN, project, cli_env, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    [line] = run.stderr.splitlines()
    assert f"pid {repro.pid} (dvc repro -f -s summary) is running" in line
    assert "`fedpipe run` refused" in line
    out, _ = repro.communicate(timeout=300)
    assert repro.returncode == 0, out[-3000:]


def test_an_emptied_rwlock_is_repaired_by_the_next_run_in_one_line(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A kill while DVC rewrote ``.dvc/tmp/rwlock`` (in place) leaves it empty:
    DVC then refuses every command; the next ``fedpipe run`` repairs it."""
    project = shutil.copytree(tiny_run["project"], tmp_path / "rwlock")
    rwlock = project / ".dvc/tmp/rwlock"
    rwlock.write_text("")
    wedged = run_cli([DVC, "status"], project, cli_env, check=False)
    assert wedged.returncode != 0
    assert "RWLock-file '.dvc/tmp/rwlock'. JSON structure is corrupted" in (
        wedged.stdout + wedged.stderr
    )
    run = run_cli(RUN, project, cli_env, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    said = [line for line in run.stderr.splitlines() if "rwlock" in line]
    assert said == [
        f"repaired {project.resolve()}/.dvc/tmp/rwlock: it was empty (0 bytes: a "
        "DVC write cut short); no live process is named in it, so it was removed "
        "(DVC reads no file as no paths locked)"
    ]
    assert "Traceback" not in run.stdout + run.stderr
    status = run_cli([DVC, "status"], project, cli_env)
    assert "Data and pipelines are up to date" in status.stdout
    assert file_hashes(project, MODELS) == file_hashes(tiny_run["project"], MODELS)


def test_scaffold_killed_at_several_points_of_a_round_resumes_to_the_same_bits(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SCAFFOLD carries state on the server and on every client from round to
    round; ``kill -9`` of the run's process group (its recorder, a process of its
    own, lands what it was writing) during round 2's training, then while round 3
    writes its outputs (model written, state and metrics not yet). Both projects
    start from the session's tiny run taken back to before ``init`` (its data
    stages done: what is killed and compared is the rounds)."""
    reference = shutil.copytree(tiny_run["project"], tmp_path / "scaffold")
    undo_from(reference, 0)
    set_params(reference / "params.yaml", {"strategy.name": "scaffold"})
    killed = shutil.copytree(reference, tmp_path / "scaffold-killed")
    run_main(RUN, reference, cli_env)
    for marker in ("metrics/rounds/round-1.json", "models/round-3/weights.npz"):
        run = _start(RUN, killed, cli_env)
        _wait_for(killed / marker, run)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert not (killed / "metrics/summary.json").exists()
    run_main(RUN, killed, cli_env)
    for files in ("models/round-*/*.npz", "models/round-*/clients/*"):
        assert file_hashes(killed, files) == file_hashes(reference, files), files
    assert len(file_hashes(killed, "models/round-4/clients/*")) > 1  # their state
    status = run_cli([DVC, "status"], killed, cli_env)
    assert "Data and pipelines are up to date" in status.stdout

"""`fedpipe stage` through the project's warm worker (fedpipe_app/stageclient.py,
fedpipe_app/warm.py): same bits, same errors, one worker, gone when idle.

Real DVC, real Prefect server, real Keras (the tiny MLP: copies of the session's
tiny project, its `dvc repro` compared with its `fedpipe run`). What the
worker did is read from its log in the session's FEDPIPE_WARM_DIR: one line when
it starts (pid, project), one per stage (its exit status), one when it exits (why).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from e2e_helpers import BIN, file_hashes, run_cli, start_in_session
from undone import undo_from

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
LINE = re.compile(r"worker (\d+): (.*)$")


def worker_log(warm_dir: Path, project: Path) -> Path:
    """The log of the workers that served ``project`` (one per project and
    environment; its socket is beside it, ``.sock`` for ``.log``)."""
    logs = [
        log
        for log in sorted(warm_dir.glob("*.log"))
        if f"started for {project.resolve()} (" in log.read_text()
    ]
    assert len(logs) == 1, logs
    return logs[0]


def worker_events(warm_dir: Path, project: Path) -> list[tuple[int, str]]:
    """(pid, event) of every worker that served ``project``, in order."""
    lines = worker_log(warm_dir, project).read_text().splitlines()
    return [(int(m[1]), m[2]) for m in map(LINE.search, lines) if m]


def exit_reason(warm_dir: Path, project: Path, pid: int) -> str | None:
    for p, event in worker_events(warm_dir, project):
        if p == pid and event.startswith("exiting: "):
            return event.removeprefix("exiting: ")
    return None


def started(events: list[tuple[int, str]]) -> set[int]:
    return {pid for pid, e in events if e.startswith("started for")}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def test_repro_through_the_worker_gives_the_same_bits_as_run(
    tiny_repro: dict, tiny_run: dict, warm_dir: Path
) -> None:
    by_repro, repro = tiny_repro["project"], tiny_repro["proc"]
    run_models = file_hashes(tiny_run["project"], "models/round-*/weights.npz")
    assert len(run_models) == 5
    assert file_hashes(by_repro, "models/round-*/weights.npz") == run_models
    assert "round   4/4  global acc" in repro.stdout  # the stage's own output
    events = worker_events(warm_dir, by_repro)
    assert len(started(events)) == 1, events  # one worker served every stage
    served = [e for _, e in events if e.startswith("fedpipe stage")]
    assert served == [
        f"fedpipe stage {s}: exit 0"
        for s in ("mnist5k", "ingest", "validate", "partition", "preprocess", "init")
        + ("round 1", "round 2", "round 3", "round 4", "summary")
    ]
    # the worker ends with the `dvc repro` that used it
    (pid,) = started(events)
    assert wait_gone(pid, timeout=30)
    assert re.fullmatch(r"dvc \(pid \d+\) ended", exit_reason(warm_dir, by_repro, pid))


def test_stage_error_is_one_line_and_exits_nonzero_as_in_process(
    tiny_fresh: Path, tmp_path: Path, cli_env: dict[str, str], warm_dir: Path
) -> None:
    project = tmp_path / "fails"
    shutil.copytree(tiny_fresh, project)
    # round 1 before ingest: a failure a person can act on (data not found)
    warm = run_cli([FEDPIPE, "stage", "round", "1"], project, cli_env, check=False)
    cold_env = cli_env | {"FEDPIPE_WARM": "0"}
    cold = run_cli([FEDPIPE, "stage", "round", "1"], project, cold_env, check=False)

    assert warm.returncode == cold.returncode == 1
    for proc in (warm, cold):
        assert "Traceback" not in proc.stdout + proc.stderr

    def said(proc: subprocess.CompletedProcess[str]) -> list[str]:
        """fedpipe's own lines (not TensorFlow's start-up notes), log names out."""
        return [
            re.sub(r"logs/\S+\.log", "LOG", x)
            for x in proc.stderr.splitlines()
            if x.startswith(("error:", "log:"))
        ]

    assert said(warm) == said(cold)
    errors = [x for x in said(warm) if x.startswith("error:")]
    assert len(errors) == 1 and "not found" in errors[0], said(warm)
    events = worker_events(warm_dir, project)
    (pid,) = started(events)  # the in-process run started none
    assert (pid, "fedpipe stage round 1: exit 1") in events
    assert wait_gone(pid, timeout=30)  # a worker that saw an error is not reused
    assert exit_reason(warm_dir, project, pid) == "the stage exited 1"


@pytest.fixture(scope="module")
def racing(
    tiny_fresh: Path, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> tuple[Path, list[subprocess.CompletedProcess[str]]]:
    """Two `fedpipe stage mnist5k` started at once, no worker yet, 3 s idle."""
    project = tmp_path_factory.mktemp("race") / "p"
    shutil.copytree(tiny_fresh, project)
    env = cli_env | {"FEDPIPE_WARM_IDLE": "3"}
    procs = [
        subprocess.Popen(
            [FEDPIPE, "stage", "mnist5k"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return project, done


def test_racing_clients_start_one_worker(racing, warm_dir: Path) -> None:
    project, done = racing
    assert [p.returncode for p in done] == [0, 0], [p.stderr for p in done]
    events = worker_events(warm_dir, project)
    assert len(started(events)) == 1, events
    served = [e for _, e in events if e.startswith("fedpipe stage")]
    assert served == ["fedpipe stage mnist5k: exit 0"] * 2


def test_worker_exits_after_its_idle_timeout(racing, warm_dir: Path) -> None:
    project, _ = racing
    (pid,) = started(worker_events(warm_dir, project))
    assert wait_gone(pid, timeout=60)
    assert exit_reason(warm_dir, project, pid) == "no stage for 3 s"
    assert not worker_log(warm_dir, project).with_suffix(".sock").exists()


def test_ctrl_c_of_repro_stops_the_stage_in_the_worker(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str], warm_dir: Path
) -> None:
    """Ctrl-C in a terminal reaches dvc and the client (their process group),
    not the worker (a session of its own): the client passes it on. The project
    is the session's tiny run taken back to before round 1 (its data stages and
    init done, DVC's run cache gone: tests/e2e/undone.py), so that round 1 is
    the repro's first stage."""
    project = tmp_path / "stopped"
    undo_from(shutil.copytree(tiny_run["project"], project, symlinks=True), 1)
    proc = start_in_session([DVC, "repro"], project, cli_env, merge_stderr=False)
    logs = project / "logs"
    deadline = time.monotonic() + 300
    while (
        not list(logs.glob("fedpipe-stage-round-1-*.log"))
        and proc.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert proc.poll() is None, "repro finished before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)

    assert proc.returncode != 0
    assert "Traceback" not in out + err, err[-3000:]
    [line] = [x for x in err.splitlines() if x.startswith("interrupted")]
    assert line.startswith("interrupted (SIGINT): no round recorded yet"), line
    assert "round@1" not in (project / "dvc.lock").read_text()
    (pid,) = started(worker_events(warm_dir, project))
    assert wait_gone(pid, timeout=30)
    assert exit_reason(warm_dir, project, pid) == "the stage exited 130"

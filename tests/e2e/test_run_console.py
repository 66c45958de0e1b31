"""What a person sees: a live display on a terminal, plain round lines in a pipe,
Prefect's logs in a file, one line on a known failure or an interrupt.

Ctrl-C (SIGINT to the run's process group, as in a terminal) stops the run within
seconds with one line, records only whole stages, and both `fedpipe run` and
`dvc repro` resume from the interrupted round (to the bits of the uninterrupted
tiny run); one interrupted run serves those checks (issue 12's, once in
tests/e2e/test_operator_failures.py, and this module's), each resuming a copy.

The runs start from copies of the session's tiny run taken back to before round 1
(tests/e2e/undone.py: the data stages are done, the rounds are run for real);
each copy pays the rounds of one ``fedpipe run``, shared by the tests below through
module fixtures; the pipe's run is the session's own tiny run
(tests/e2e/conftest.py).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import time
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli, run_main, start_in_session
from undone import undo_from

from fedpipe.config.overrides import set_params

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
RUN = [FEDPIPE, "run", "--no-server-start", "--no-report"]
ROUND_LINE = re.compile(r"^round +(\d+)/4  global acc", re.M)
ESCAPE = re.compile(r"\x1b|\r")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LOG_NAME = re.compile(r"^log: (logs/fedpipe-run-[\d-]+\.log)$", re.M)
MODELS = "models/round-*/weights.npz"


def _in_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[str, int]:
    """Run ``args`` with a pseudo-terminal as stdin, stdout and stderr."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: a terminal of 120 columns, like a person's
        os.chdir(cwd)
        os.execve(args[0], args, {**env, "COLUMNS": "120", "TERM": "xterm"})
    out = b""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if not ready:
            continue
        try:
            data = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        out += data
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return out.decode("utf-8", "replace"), os.waitstatus_to_exitcode(status)


@pytest.fixture(scope="module")
def fresh(tiny_run: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's tiny run taken back to before round 1 (its data stages and
    init recorded, the rounds and the summary to do: :func:`undone.undo_from`);
    copy it before use."""
    project = tmp_path_factory.mktemp("console") / "fresh"
    shutil.copytree(tiny_run["project"], project, symlinks=True)
    return undo_from(project, 1)


def _copy(fresh: Path, name: str) -> Path:
    project = fresh.parent / name
    shutil.copytree(fresh, project, symlinks=True)
    return project


@pytest.fixture(scope="module")
def on_terminal(fresh: Path, cli_env: dict[str, str]) -> dict:
    project = _copy(fresh, "terminal")
    out, code = _in_terminal(RUN, project, cli_env)
    return {"project": project, "out": out, "code": code}


@pytest.fixture(scope="module")
def in_pipe(fresh: Path, tiny_run: dict) -> dict:
    """The session's tiny run (a copy of its project): `fedpipe run` in a pipe."""
    project = shutil.copytree(tiny_run["project"], fresh.parent / "pipe")
    return {"project": project, "proc": tiny_run["proc"]}


def test_terminal_shows_live_progress_and_round_lines(on_terminal: dict) -> None:
    out = on_terminal["out"]
    assert on_terminal["code"] == 0, out[-3000:]
    assert "\x1b[1A\x1b[2K" in out  # the live display redraws itself
    shown = ANSI.sub("", out)
    assert re.search(r"round \d +━+ \d/4 .*eta", shown), "no rounds bar"
    assert re.search(r"clients +━+ \d/2 ", shown), "no clients bar"
    # each round's line is printed once, above the display, and stays
    rounds = re.findall(r"round +(\d+)/4  global acc .*\)\r?\n", shown)
    assert rounds == ["1", "2", "3", "4"]
    assert "| accuracy |" in out
    assert "Task run" not in out and "Finished in state" not in out
    assert out.count("Prefect run: http") == 1


def test_pipe_gets_plain_round_lines(in_pipe: dict) -> None:
    proc = in_pipe["proc"]
    out = proc.stdout
    assert not ESCAPE.search(out + proc.stderr)
    assert [int(k) for k in ROUND_LINE.findall(out)] == [1, 2, 3, 4]
    assert "Task run" not in out + proc.stderr
    assert "Finished in state" not in out + proc.stderr
    assert "Prefect: runs report to" in out
    assert out.count("Prefect run: http") == 1


def test_log_file_holds_prefects_logs(in_pipe: dict) -> None:
    out = in_pipe["proc"].stdout
    named = LOG_NAME.findall(out)
    assert len(named) == 2 and named[0] == named[1]  # at the start and the end
    log = (in_pipe["project"] / named[0]).read_text()
    assert "Task run 'round 2' - round   2/4  global acc" in log
    assert "Finished in state Completed()" in log
    assert "round   4/4  global acc" in log
    status = run_cli(["git", "status", "--porcelain"], in_pipe["project"], {})
    assert "logs/" not in status.stdout


def test_quiet_shows_only_the_table(in_pipe: dict, cli_env: dict[str, str]) -> None:
    project = in_pipe["project"]
    proc = run_cli([*RUN, "-q"], project, cli_env)
    table = (project / "reports/summary.md").read_text()
    assert proc.stdout.strip() == table.strip()
    assert "INFO" not in proc.stderr and "WARNING |" not in proc.stderr


def test_known_failure_is_one_clean_line(
    in_pipe: dict, cli_env: dict[str, str]
) -> None:
    project = _copy(in_pipe["project"], "bad-validation")
    set_params(project / "params.yaml", {"validation.min_rows": 100000})
    proc = run_cli(RUN, project, cli_env, check=False)
    assert proc.returncode == 1
    err = proc.stderr
    assert "Traceback" not in err and "ERROR" not in err, err[-3000:]
    assert err.count("need at least 100000 samples") == 1
    assert "error: data/prepared: data validation failed" in err
    [log] = re.findall(r"^log: (\S+) \(Prefect's logs", err, re.M)
    text = (project / log).read_text()
    assert "Traceback" in text and "ValidationFailed" in text

    verbose = run_cli([*RUN, "-v"], project, cli_env, check=False)
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr


def _finished_rounds(project: Path) -> int:
    """The last round whose metrics file is written (0: none)."""
    done = [
        int(p.stem.partition("-")[2])
        for p in (project / "metrics/rounds").glob("round-*.json")
    ]
    return max(done, default=0)


def _recorded(project: Path) -> list[str]:
    lock = yaml.safe_load((project / "dvc.lock").read_text()) or {}
    return list(lock.get("stages") or {})


def _interrupt(project: Path, env: dict[str, str], sig: int) -> dict:
    """Start ``fedpipe run``, send ``sig`` to its process group during round 3:
    its exit code and output, the seconds it took to end after the signal, and
    the last round whose metrics were written when the signal was sent."""
    proc = start_in_session(RUN, project, env, merge_stderr=False)
    marker = project / "metrics/rounds/round-2.json"
    deadline = time.monotonic() + 300
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "run finished before it could be interrupted"
    os.killpg(proc.pid, sig)
    sent = time.monotonic()
    done_at_signal = _finished_rounds(project)
    out, err = proc.communicate(timeout=120)
    return {
        "code": proc.returncode,
        "out": out + err,
        "took": time.monotonic() - sent,
        "done_at_signal": done_at_signal,
    }


@pytest.fixture(scope="module")
def ctrl_c(fresh: Path, cli_env: dict[str, str]) -> dict:
    """A fresh copy's `fedpipe run` interrupted by Ctrl-C (SIGINT to its process
    group) during round 3, shared by the tests below: ``project`` (copy it
    before resuming it) and what :func:`_interrupt` saw."""
    project = _copy(fresh, "stopped-SIGINT")
    return {"project": project, **_interrupt(project, cli_env, signal.SIGINT)}


@pytest.mark.parametrize(
    ("sig", "code", "name"),
    [(signal.SIGINT, 130, "SIGINT"), (signal.SIGTERM, 143, "SIGTERM")],
)
def test_interrupt_says_where_it_stopped_and_run_resumes(
    request: pytest.FixtureRequest,
    fresh: Path,
    tmp_path: Path,
    cli_env: dict[str, str],
    sig: int,
    code: int,
    name: str,
) -> None:
    if sig == signal.SIGINT:  # the module's Ctrl-C run; resumed in a copy
        stopped = request.getfixturevalue("ctrl_c")
        project = shutil.copytree(
            stopped["project"], tmp_path / "resumed", symlinks=True
        )
    else:
        project = _copy(fresh, f"stopped-{name}")
        stopped = _interrupt(project, cli_env, sig)
    returncode, out = stopped["code"], stopped["out"]
    assert returncode == code, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    [line] = [ln for ln in out.splitlines() if ln.startswith("interrupted")]
    recorded = re.fullmatch(
        rf"interrupted \({name}\): round (\d) is the last recorded round \(dvc\.lock\);"
        r" `fedpipe run` \(or `dvc repro`\) resumes from there",
        line,
    )
    assert recorded, line
    if sig != signal.SIGINT:
        return
    last = int(recorded.group(1))
    resumed = run_main(RUN, project, cli_env)
    ran = resumed.stdout.split("stage(s) ran", 1)[1]
    assert "init" not in ran and f"round@{last}," not in ran
    again = [int(k) for k in ROUND_LINE.findall(resumed.stdout)]
    assert again and again[0] > last and again == list(range(again[0], 5))
    status = run_cli([DVC, "status"], project, cli_env)
    assert "Data and pipelines are up to date" in status.stdout


def test_ctrl_c_stops_in_seconds_records_whole_stages_and_dvc_repro_resumes(
    ctrl_c: dict, tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = shutil.copytree(ctrl_c["project"], tmp_path / "ctrl-c", symlinks=True)
    out, took = ctrl_c["out"], ctrl_c["took"]
    print(f"\nthe run ended {took:.1f} s after Ctrl-C")
    assert ctrl_c["code"] == 130, out[-3000:]
    assert took <= 15, f"{took:.1f} s after Ctrl-C"
    recorded = _recorded(project)
    # every recorded stage is whole: DVC finds nothing changed in any of them
    status = run_cli([DVC, "status", "--json"], project, cli_env)
    changed = set(json.loads(status.stdout or "{}"))
    assert not changed & set(recorded), changed & set(recorded)
    assert "round@1" in recorded  # rounds done before Ctrl-C are kept

    repro = run_cli([DVC, "repro"], project, cli_env)
    again = [
        int(k) for k in re.findall(r"^Running stage 'round@(\d+)'", repro.stdout, re.M)
    ]
    done_at_signal = ctrl_c["done_at_signal"]
    assert again and min(again) >= done_at_signal, repro.stdout[-2000:]
    assert file_hashes(project, MODELS) == file_hashes(tiny_run["project"], MODELS)

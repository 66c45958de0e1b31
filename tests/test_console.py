"""orchestration/console.py without a run: which records reach the console, the
interrupt line, the log file's name. The displays themselves:
tests/e2e/test_console.py."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from orchestration import console


def _record(name: str, level: int, msg: str, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            info = sys.exc_info()
    return logging.LogRecord(name, level, __file__, 1, msg, None, info)


@pytest.mark.parametrize(
    ("name", "msg", "exc", "shown"),
    [
        ("prefect.task_runs", "Finished in state Failed('x')", False, False),
        ("prefect.flow_runs", "Encountered exception during execution: x", True, False),
        (
            "prefect.task_runs",
            "Crash detected! Execution was interrupted",
            False,
            False,
        ),
        ("prefect.task_runs", "3 clients sent NaN", False, True),
        ("prefect.flow_runs", "restoring its last recorded outputs", False, True),
        ("dvc", "anything with a traceback", True, True),
    ],
)
def test_run_failure_trail_is_not_for_the_console(
    name: str, msg: str, exc: bool, shown: bool
) -> None:
    record = _record(name, logging.ERROR, msg, exc)
    assert console._NotRunBookkeeping().filter(record) is shown


def test_errors_of_runs_are_held_until_shown() -> None:
    handler = console._ConsoleHandler(logging.WARNING, None, hold=True)
    shown: list[str] = []
    handler._show = lambda record: shown.append(record.getMessage())  # type: ignore[method-assign]
    handler.handle(_record("prefect.task_runs", logging.ERROR, "client 3 failed"))
    handler.handle(_record("prefect.task_runs", logging.WARNING, "slow client"))
    assert shown == ["slow client"]
    handler.show_held()
    assert shown == ["slow client", "client 3 failed"]


def test_interrupt_names_the_last_round_in_dvc_lock(tmp_path: Path) -> None:
    assert "no round recorded yet" in console.interrupted_message("SIGINT", tmp_path)
    (tmp_path / "dvc.lock").write_text(
        "schema: '2.0'\nstages:\n  init: {}\n  round@1: {}\n  round@2: {}\n"
        "  round@10: {}\n"
    )
    assert console.last_recorded_round(tmp_path) == 10
    assert console.interrupted_message("SIGTERM", tmp_path) == (
        "interrupted (SIGTERM): round 10 is the last recorded round (dvc.lock); "
        "`fedpipe run` (or `dvc repro`) resumes from there"
    )


def test_log_files_are_new_and_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = console.new_log_path("run", now=0)
    first.write_text("")
    second = console.new_log_path("run", now=0)
    assert first != second and second.parent == Path("logs")
    assert (tmp_path / "logs/.gitignore").read_text().splitlines()[-1] == "*"


def test_hooks_do_nothing_outside_a_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert console._active is None  # no `fedpipe run` in this process
    console.run_started("http://127.0.0.1:4200/runs/flow-run/x")
    console.stage_started("partition")
    console.round_started(1, 4)
    console.clients_started(3)
    console.client_finished()
    console.round_finished("round   1/4 ...")
    console.close_display()
    assert console._active is None  # no session was started by a hook
    assert capsys.readouterr() == ("", "")  # and nothing was shown

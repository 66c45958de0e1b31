"""The warm worker's own rules, without a stage (tests/e2e/test_warm_stage.py runs
stages through it): when a worker must not be reused, what a run's status is."""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

import pytest

from fedpipe_app import warm


def _worker(tmp_path: Path) -> warm.Worker:
    return warm.Worker(tmp_path / "w.sock", "key", idle=60)


def test_a_changed_imported_file_makes_the_worker_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "probe_user_code.py"
    source.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("probe_user_code")
    try:
        worker = _worker(tmp_path)
        worker._note_modules()
        assert worker._changed_file() is None
        source.write_text("VALUE = 22\n")  # what an edit between two stages does
        assert worker._changed_file() == str(source)
    finally:
        sys.modules.pop("probe_user_code", None)


def test_a_removed_imported_file_makes_the_worker_stale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "probe_gone.py"
    source.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("probe_gone")
    try:
        worker = _worker(tmp_path)
        worker._note_modules()
        source.unlink()
        assert worker._changed_file() == str(source)
    finally:
        sys.modules.pop("probe_gone", None)


def test_idle_worker_has_a_reason_to_exit(tmp_path: Path) -> None:
    worker = warm.Worker(tmp_path / "w.sock", "key", idle=0.0)
    assert worker._reason_to_exit(time.monotonic()) == "no stage for 0 s"


def test_worker_whose_socket_was_removed_exits(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    worker.inode = 1
    assert worker._reason_to_exit(time.monotonic()).endswith("was removed")


def test_worker_leaves_when_its_dvc_has_ended(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    (tmp_path / "w.sock").write_text("")
    worker.inode = os.stat(tmp_path / "w.sock").st_ino
    worker.owner = os.getpid()
    assert worker._reason_to_exit(time.monotonic()) is None
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    worker.owner = pid
    assert worker._reason_to_exit(time.monotonic()) == f"dvc (pid {pid}) ended"


def test_run_cli_status_is_the_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse's SystemExit(2): its status passes through, its message on stderr
    assert warm.run_cli(["stage", "round", "x"]) == 2
    assert "invalid int value" in capsys.readouterr().err

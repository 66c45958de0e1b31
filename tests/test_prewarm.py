"""A stage's library imported in a process beside the run (orchestration.prewarm)."""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.config.params import DataParams, ValidationParams
from fedpipe.data import sources as fdata
from fedpipe.data.validation import validate_prepared_dir
from orchestration import prewarm


@pytest.fixture
def always(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Processes started whatever the machine's load; none left after."""
    monkeypatch.setenv(prewarm.ENABLE_ENV, "1")
    yield
    prewarm.stop_all()


def _nothing() -> None:
    """A warm-up that imports nothing (the tests' processes start quickly)."""


class _Refused(Exception):
    """An error whose constructor takes other arguments than its ``args``: it
    does not survive pickling, so only the run's own call can raise it."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"{key} is refused: {why}")
        self.key = key


def _refuse(key: str) -> None:
    raise _Refused(key, "anything else is accepted")


def _touch(path: Path) -> None:
    """A warm-up that says it ran (after the process set its signal handlers)."""
    path.touch()


def _fail_to_warm() -> None:
    raise ImportError("no such library")


def _slow_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_the_call_runs_in_the_started_process_and_ends_it(always: None) -> None:
    prewarm.start("pid", _nothing)
    process = prewarm._started["pid"]._process
    assert prewarm.call("pid", os.getpid) == process.pid != os.getpid()
    process.join(timeout=10)
    assert not process.is_alive()
    # one call per process: the next is made here
    assert prewarm.call("pid", os.getpid) == os.getpid()


def test_without_a_started_process_the_call_is_plain() -> None:
    assert prewarm.call("never-started", os.getpid) == os.getpid()


def test_an_error_is_raised_by_the_runs_own_call(always: None) -> None:
    prewarm.start("refuse", _nothing)
    with pytest.raises(_Refused, match="train.lr is refused") as caught:
        prewarm.call("refuse", _refuse, "train.lr")
    assert caught.value.key == "train.lr"  # the error as made here, not a copy


def test_a_failed_warm_up_leaves_the_call_to_the_run(always: None) -> None:
    prewarm.start("broken", _fail_to_warm)
    assert prewarm.call("broken", os.getpid) == os.getpid()


def test_ctrl_c_of_the_terminal_does_not_reach_the_process(
    always: None, tmp_path: Path
) -> None:
    ready = tmp_path / "warmed"
    prewarm.start("sigint", functools.partial(_touch, ready))
    process = prewarm._started["sigint"]._process
    deadline = time.monotonic() + 120
    while not ready.exists():  # its handlers are set before the warm-up runs
        assert process.is_alive() and time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGINT)
    assert prewarm.call("sigint", _slow_pid, 0.1) == process.pid


def test_stop_all_ends_a_busy_and_an_idle_process(always: None) -> None:
    prewarm.start("idle", _nothing)
    idle = prewarm._started["idle"]._process
    prewarm.stop_all()
    idle.join(timeout=10)
    assert not idle.is_alive() and not prewarm._started


def test_off_and_by_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(prewarm.ENABLE_ENV, "0")
    assert not prewarm.enabled()
    prewarm.start("off", _nothing)
    assert "off" not in prewarm._started
    monkeypatch.setenv(prewarm.ENABLE_ENV, "auto")
    # a core free beside the run's own, or not (a test suite's workers)
    monkeypatch.setattr(prewarm, "cores_idle", lambda: 1.9)
    assert prewarm.enabled()
    monkeypatch.setattr(prewarm, "cores_idle", lambda: 1.2)
    assert not prewarm.enabled()
    # no /proc/stat: the load average decides
    monkeypatch.setattr(prewarm, "cores_idle", lambda: None)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.2, 0.2, 0.2))
    assert prewarm.enabled() == ((os.cpu_count() or 1) >= 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (64.0, 64.0, 64.0))
    assert not prewarm.enabled()


def test_idle_cores_are_measured() -> None:
    idle = prewarm.cores_idle(0.05)
    assert idle is None or 0.0 <= idle <= (os.cpu_count() or 1) + 0.01


def _files(folder: Path) -> dict[str, str]:
    """Each file's md5, but Great Expectations' own pages and full result, which
    carry the validation's run time and ids (in their names too): their count."""
    timed = ("data_docs/", "result.json")
    files = [p for p in sorted(folder.rglob("*")) if p.is_file()]
    names = [str(p.relative_to(folder)) for p in files]
    kept = {
        name: hashlib.md5(p.read_bytes()).hexdigest()
        for name, p in zip(names, files, strict=True)
        if not name.startswith(timed)
    }
    return {**kept, "timed files": str(sum(n.startswith(timed) for n in names))}


def test_validation_in_the_process_is_validation_here(
    always: None, tmp_path: Path
) -> None:
    """The validate stage's call (Great Expectations imported in the process):
    the same report and the same files as in the run's process, on a table with
    a failing check and a warning."""
    rng = np.random.default_rng(0)
    table = pd.DataFrame(
        {
            "a": rng.normal(size=120),
            "b": rng.normal(size=120),
            "label": ["yes"] * 117 + ["no"] * 3,  # imbalanced: a warning
        }
    )
    table.to_csv(tmp_path / "t.csv", index=False)
    data = DataParams(source="table", path=str(tmp_path / "t.csv"))
    prepared = tmp_path / "prepared"
    fdata.ingest(data, prepared)
    settings = ValidationParams(min_rows=200)  # 120 rows: a failure
    prewarm.start_validation()
    there = prewarm.call(
        prewarm.VALIDATE, validate_prepared_dir, prepared, settings,
        report_dir=tmp_path / "there",
    )  # fmt: skip
    here = validate_prepared_dir(prepared, settings, report_dir=tmp_path / "here")
    assert there == here and not here.success
    assert _files(tmp_path / "there") == _files(tmp_path / "here")

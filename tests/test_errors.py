"""One error hierarchy (fedpipe.core.errors) and the exit status of each way a
command ends (fedpipe_app.cli.main, fedpipe_app.exits)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fedpipe.core import stopping
from fedpipe.core.errors import (
    EXIT_BAD_PARAMS,
    EXIT_FAILED,
    FedpipeError,
    SettingError,
)
from fedpipe_app import cli, exits

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fedpipe", "orchestration", "tasks", "flows")
CLI_SOURCES = [
    ROOT / "fedpipe_app/cli.py",
    ROOT / "fedpipe_app/exits.py",
    *sorted((ROOT / "fedpipe_app/commands").glob("*.py")),
]


_WALK = """
import importlib, json, pkgutil, sys
from fedpipe.core.errors import FedpipeError
found = {}
for top in sys.argv[1:]:
    package = importlib.import_module(top)
    for info in pkgutil.walk_packages(package.__path__, top + "."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (isinstance(value, type) and issubclass(value, BaseException)
                    and value.__module__ == info.name and not name.startswith("_")):
                found[info.name + "." + name] = {
                    "fedpipe_error": issubclass(value, FedpipeError),
                    "exit_code": getattr(value, "exit_code", None),
                }
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def errors() -> dict[str, dict]:
    """Every public exception class defined in the project's packages: each
    module imported (in a fresh interpreter: importing every module at once
    under pytest's capture leaves it closed), the classes it defines collected."""
    proc = subprocess.run(
        [sys.executable, "-c", _WALK, *PACKAGES],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_walk_finds_the_errors_of_every_layer(errors: dict[str, dict]) -> None:
    # guards the collector itself: a class from each package's depths
    names = {qualified.rsplit(".", 1)[1] for qualified in errors}
    assert {"ParamsError", "ClientsLost", "ValidationFailed", "ProjectBusy"} <= names
    assert len(errors) >= 15


def test_every_error_is_a_fedpipe_error_with_an_exit_code(
    errors: dict[str, dict],
) -> None:
    not_ours = [name for name, e in errors.items() if not e["fedpipe_error"]]
    assert not_ours == []
    for name, error in errors.items():
        assert error["exit_code"] in (EXIT_FAILED, EXIT_BAD_PARAMS), name


def test_errors_keep_their_builtin_bases() -> None:
    # every `except ValueError` written before the hierarchy still catches them
    from fedpipe.config.params import ParamsError
    from fedpipe.data.partition import PartitionError
    from fedpipe.observe.lineage import LineageError
    from fedpipe.strategy import AggregationError
    from orchestration.repolock import ProjectBusy

    for error in (ParamsError, PartitionError, LineageError, AggregationError):
        assert issubclass(error, ValueError)
    assert issubclass(ProjectBusy, RuntimeError)
    assert ParamsError.exit_code == LineageError.exit_code == EXIT_BAD_PARAMS


@pytest.mark.parametrize("source", CLI_SOURCES, ids=lambda p: p.name)
def test_the_cli_does_not_probe_sys_modules(source: Path) -> None:
    assert "sys.modules" not in source.read_text()


# ---------------------------------------------------------------- exit statuses


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A new project (no git); main's chdir is undone after the test."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["init", "--no-git", "study"]) == 0
    return tmp_path / "study"


def _main(project: Path, *argv: str) -> int:
    return cli.main(["-C", str(project), *argv])


def _raising(exc: BaseException):  # type: ignore[no-untyped-def]
    def command(args: object) -> int:
        raise exc

    return command


def test_bad_params_end_with_one_line_and_status_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    params = project / "params.yaml"
    params.write_text(params.read_text().replace("  clients: 10", "  clinets: 10"))
    capsys.readouterr()
    assert _main(project, "run", "--no-server-start") == EXIT_BAD_PARAMS
    err = capsys.readouterr().err
    assert err.startswith("error: params.yaml: federation.clinets: unknown key")
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (project / "data").exists()


def test_a_bad_lineage_target_ends_with_status_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _main(project, "lineage", "round", "3") == EXIT_BAD_PARAMS
    assert capsys.readouterr().err.startswith("error: dvc.lock: not found")


@pytest.mark.parametrize("code", [EXIT_FAILED, EXIT_BAD_PARAMS, 7])
def test_a_fedpipe_error_ends_with_its_exit_code(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    code: int,
) -> None:
    class Refused(FedpipeError):
        exit_code = code

    monkeypatch.setattr(
        "fedpipe_app.commands.status.cmd_status", _raising(Refused("no: why"))
    )
    assert _main(project, "status") == code
    assert capsys.readouterr().err == "error: no: why\n"


@pytest.mark.parametrize(
    "exc",
    [SettingError("model.width: got 0; allowed: >= 1"), FileNotFoundError("gone")],
)
def test_a_bad_setting_or_missing_file_is_one_line_and_status_1(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    exc: Exception,
) -> None:
    monkeypatch.setattr("fedpipe_app.commands.status.cmd_status", _raising(exc))
    assert _main(project, "status") == EXIT_FAILED
    assert capsys.readouterr().err == f"error: {exc}\n"


def _raised(fn) -> Exception:  # type: ignore[no-untyped-def]
    try:
        fn()
    except Exception as exc:
        return exc
    raise AssertionError(f"{fn} raised nothing")


def _zip_strict() -> None:
    list(zip([1, 2], [1], strict=True))  # a bug of fedpipe's: a builtin's ValueError


@pytest.mark.parametrize(
    "bug",
    [RuntimeError("a bug"), ValueError("a bug"), _raised(_zip_strict)],
    ids=["runtime-error", "value-error", "builtin-value-error"],
)
def test_a_bug_keeps_its_traceback(
    project: Path, monkeypatch: pytest.MonkeyPatch, bug: Exception
) -> None:
    """A ValueError fedpipe did not raise as a :class:`SettingError` is a bug
    (a ``zip(strict=True)`` of lists of different lengths once ended a run in
    one line, with the traceback only in the log)."""
    monkeypatch.setattr("fedpipe_app.commands.status.cmd_status", _raising(bug))
    with pytest.raises(type(bug), match=re.escape(str(bug))):
        _main(project, "status")


def _termination(signum: int) -> BaseException:
    from prefect.exceptions import TerminationSignal

    return TerminationSignal(signum)


def _replaced_by_prefect(signum: int) -> BaseException:
    """The ValueError Prefect's task engine raises when the signal lands before
    it has created the task run (seen in CI: "error: Task run is not set")."""
    try:
        try:
            raise KeyboardInterrupt(signum)
        except KeyboardInterrupt:
            raise ValueError("Task run is not set") from None
    except ValueError as exc:
        exc.__suppress_context__ = False  # as Prefect raises it: context kept
        return exc


@pytest.mark.parametrize(
    ("command", "stop", "code"),
    [
        ("run", lambda: KeyboardInterrupt(), 128 + signal.SIGINT),
        ("run", lambda: KeyboardInterrupt(signal.SIGTERM), 128 + signal.SIGTERM),
        ("stage", lambda: _termination(signal.SIGTERM), 128 + signal.SIGTERM),
        ("run", lambda: _replaced_by_prefect(signal.SIGTERM), 128 + signal.SIGTERM),
    ],
    ids=["ctrl-c", "sigterm-as-interrupt", "prefect-termination", "replaced"],
)
def test_a_stopped_run_ends_with_128_plus_the_signal(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    stop,  # type: ignore[no-untyped-def]
    code: int,
) -> None:
    module = f"fedpipe_app.commands.{command}.cmd_{command}"
    monkeypatch.setattr(module, _raising(stop()))
    argv = [command, "partition"] if command == "stage" else [command]
    assert _main(project, *argv) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1


def _interrupt_lost_in_a_message() -> BaseException:
    """The signal latched (fedpipe.core.stopping), then its KeyboardInterrupt
    turned into another error that keeps only its name: pydantic-core's
    serializer does so when Ctrl-C lands in Prefect's import (seen in the suite:
    ``PydanticSerializationError: ... KeyboardInterrupt: 2``)."""
    stopping.install()
    with contextlib.suppress(KeyboardInterrupt):
        stopping._on_signal(signal.SIGINT, None)
    return ValueError("Error calling function `_ser_model`: KeyboardInterrupt: 2")


def test_a_signal_whose_interrupt_a_library_swallowed_still_stops_in_one_line(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        lost = _interrupt_lost_in_a_message()
        assert exits.stop_signal(lost) is None  # nothing in the error says so
        monkeypatch.setattr("fedpipe_app.commands.stage.cmd_stage", _raising(lost))
        assert _main(project, "stage", "partition") == 128 + signal.SIGINT
        err = capsys.readouterr().err
        assert "Traceback" not in err and err.startswith("interrupted (SIGINT)")
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        stopping.install()  # forget the latched signal
        for signum, handler in handlers.items():
            signal.signal(signum, handler)


def test_an_interrupt_outside_run_and_stage_is_raised(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "fedpipe_app.commands.status.cmd_status", _raising(KeyboardInterrupt())
    )
    with pytest.raises(KeyboardInterrupt):
        _main(project, "status")


def test_the_console_keeps_quiet_about_what_the_cli_says() -> None:
    from fedpipe.config.params import ParamsError

    assert exits.said_by_cli(ParamsError("x"))
    assert exits.said_by_cli(_termination(signal.SIGTERM))
    assert exits.stop_signal(_termination(signal.SIGTERM)) == signal.SIGTERM
    assert not exits.said_by_cli(RuntimeError("a bug"))
    assert exits.stop_signal(_replaced_by_prefect(signal.SIGTERM)) == signal.SIGTERM
    assert exits.stop_signal(ValueError("Task run is not set")) is None

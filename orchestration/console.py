"""What the terminal shows during a run: progress for people, Prefect's logs to a file.

On a terminal ``fedpipe run`` shows a live display (the rounds as a bar with an
ETA, the current round's clients ticking) and one permanent line per finished
round; through a pipe (CI, ``dvc repro``) it prints the same round lines and
nothing else, with no control characters. Prefect's own logs go to the Prefect UI
(as always) and to ``logs/fedpipe-<command>-<time>.log`` in the project; ``-v``
also shows them on the console, ``-q`` shows only errors (and the final table
``fedpipe run`` prints).

The flows report progress through four calls (:func:`stage_started`,
:func:`round_started`, :func:`clients_started` / :func:`client_finished`,
:func:`round_finished`) that do nothing unless a :func:`session` is open, so
flows run from tests or the Prefect UI are unaffected. They are explicit calls,
not a parser of Prefect's log records: a task run's state line is emitted where
the task runs (a Dask worker, with ``runtime.runner: dask``), while these calls
run in the flow's process for every runner.

Failures a person can act on (a bad param, data that failed validation, ...) end
with one ``error:`` line from the CLI; Prefect's records of the failed task and
flow runs, tracebacks included, go to the log file only (and to the console with
``-v``). A real bug still shows its traceback: the CLI re-raises it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_LOGGERS = ("prefect.task_runs", "prefect.flow_runs", "prefect.engine")
LOG_DIR = Path("logs")
QUIET, NORMAL, VERBOSE = -1, 0, 1

# Prefect's records of a run ending badly; the CLI says the same in one line
# (a known failure) or re-raises with the traceback (a bug), so on the console
# they are noise. They stay in the log file and the UI.
_RUN_BOOKKEEPING = re.compile(
    r"^(Finished in state (Failed|Crashed)|Crash detected|Encountered exception"
    r"|Task run failed with exception|Unexpected exception|Execution was"
    r" (interrupted|cancelled))"
)


class _NoTracebackFor(logging.Filter):
    def __init__(self, kinds: tuple[type[BaseException], ...]) -> None:
        super().__init__()
        self.kinds = kinds

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, self.kinds):
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_user_errors(kinds: tuple[type[BaseException], ...]) -> None:
    """Drop the traceback from Prefect's run logs for exceptions of ``kinds``.

    Once per process and ``kinds``: a warm worker calls this for every stage.
    """
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(
            isinstance(f, _NoTracebackFor) and f.kinds == kinds for f in logger.filters
        ):
            logger.addFilter(_NoTracebackFor(kinds))


class _NotRunBookkeeping(logging.Filter):
    """Keeps warnings and errors a person should see; drops a run's failure trail."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(RUN_LOGGERS):
            return True
        if record.exc_info and record.exc_info[0] is not None:
            return False
        return not _RUN_BOOKKEEPING.match(record.getMessage())


class _ConsoleHandler(logging.Handler):
    """Log records on stderr, or above the live display when one is shown.

    Errors logged by task and flow runs are held back until the round ends (or
    the command ends well, or with a bug): a run stopped by a known failure ends
    with the CLI's one clean line, which already says what they say.
    """

    def __init__(self, level: int, display: Any | None, *, hold: bool) -> None:
        super().__init__(level)
        self.display = display
        self.hold = hold
        self.held: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if (
            self.hold
            and record.levelno >= logging.ERROR
            and record.name.startswith(RUN_LOGGERS)
        ):
            self.held.append(record)
            return
        self._show(record)

    def show_held(self) -> None:
        held, self.held = self.held, []
        for record in held:
            self._show(record)

    def _show(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if self.display is not None:
                from rich.text import Text

                self.display.console.print(Text(text), soft_wrap=True)
            else:
                print(text, file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - logging must never stop a run
            self.handleError(record)


def _quiet_when_full(
    handle_error: Callable[[logging.LogRecord], None],
) -> Callable[[logging.LogRecord], None]:
    """The log file's error handler, quiet on a full disk: the run stops with one
    line (``fedpipe.core.diskspace``) instead of logging's "--- Logging error ---"
    and a traceback on stderr for every record."""

    def handle(record: logging.LogRecord) -> None:
        from fedpipe.core.diskspace import is_full

        if is_full(sys.exc_info()[1] or Exception()):
            return
        handle_error(record)

    return handle


def _prefect_console_handlers() -> list[logging.Handler]:
    from prefect.logging.handlers import PrefectConsoleHandler

    return [
        h for h in logging.getLogger().handlers if isinstance(h, PrefectConsoleHandler)
    ]


def new_log_path(command: str, *, now: float | None = None) -> Path:
    """``logs/fedpipe-<command>-<YYYYmmdd-HHMMSS>.log``; ``logs/`` ignores itself."""
    LOG_DIR.mkdir(exist_ok=True)
    ignore = LOG_DIR / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# fedpipe run logs: not versioned\n*\n")
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    path = LOG_DIR / f"fedpipe-{command}-{stamp}.log"
    n = 1
    while path.exists():  # two runs in the same second
        n += 1
        path = LOG_DIR / f"fedpipe-{command}-{stamp}-{n}.log"
    return path


@dataclass
class _Session:
    verbosity: int
    log_path: Path
    display: Any | None = None  # rich.progress.Progress on a terminal
    handler: _ConsoleHandler | None = None
    tasks: dict[str, Any] = field(default_factory=dict)
    rounds: int = 0

    def say(self, line: str) -> None:
        if self.display is not None:
            from rich.text import Text

            self.display.console.print(Text(line), soft_wrap=True)
        else:
            print(line, flush=True)

    def run_started(self, url: str | None) -> None:
        if url and self.verbosity > QUIET:
            self.say(f"Prefect run: {url}")

    def stage_started(self, stage: str) -> None:
        if self.display is not None and stage.partition("@")[0] != "round":
            task = self._task("stage", stage, total=None)
            self.display.update(task, description=stage, visible=True)

    def round_started(self, round_: int, rounds: int) -> None:
        self.rounds = rounds
        if self.display is None:
            return
        if "stage" in self.tasks:
            self.display.update(self.tasks["stage"], visible=False)
        bar = self._task("rounds", "rounds", total=rounds)
        self.display.update(bar, completed=round_ - 1, description=f"round {round_}")

    def clients_started(self, n: int) -> None:
        if self.display is not None:
            task = self._task("clients", "clients", total=n)
            self.display.reset(task, total=n, visible=True)

    def client_finished(self, n: int = 1) -> None:
        if self.display is not None and "clients" in self.tasks:
            self.display.advance(self.tasks["clients"], n)

    def round_finished(self, line: str) -> None:
        if self.handler is not None:
            self.handler.show_held()
        if self.verbosity > QUIET:
            self.say(line)
        if self.display is not None and "rounds" in self.tasks:
            self.display.advance(self.tasks["rounds"])
            if "clients" in self.tasks:
                self.display.update(self.tasks["clients"], visible=False)

    def _task(self, key: str, description: str, *, total: float | None) -> Any:
        if key not in self.tasks:
            self.tasks[key] = self.display.add_task(description, total=total)
        return self.tasks[key]


_active: _Session | None = None


def run_started(url: str | None) -> None:
    """The run's Prefect URL, shown once."""
    if _active is not None:
        _active.run_started(url)


def stage_started(stage: str) -> None:
    """A stage (``partition``, ``round@3``, ...) starts."""
    if _active is not None:
        _active.stage_started(stage)


def round_started(round_: int, rounds: int) -> None:
    """Round ``round_`` of ``rounds`` starts."""
    if _active is not None:
        _active.round_started(round_, rounds)


def clients_started(n: int) -> None:
    """The current round trains ``n`` clients."""
    if _active is not None:
        _active.clients_started(n)


def client_finished(n: int = 1) -> None:
    """``n`` of the current round's clients finished training."""
    if _active is not None:
        _active.client_finished(n)


def round_finished(line: str) -> None:
    """A round ended; ``line`` is its progress line (:func:`progress_line`)."""
    if _active is not None:
        _active.round_finished(line)


def close_display() -> None:
    """Take the live display down (cursor back) before a process ends abruptly."""
    if _active is not None and _active.display is not None:
        _active.display.stop()


def _live_display() -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description:<10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=Console(file=sys.stdout, highlight=False),
        transient=True,
    )


def is_terminal() -> bool:
    """Whether stdout is a terminal a live display can redraw."""
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def quiet_workers(verbosity: int) -> None:
    """Before Prefect is imported: processes started later (Dask workers) show only
    warnings on the console unless ``-v``."""
    if verbosity < VERBOSE:
        os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")


@contextmanager
def session(
    command: str,
    *,
    verbosity: int = NORMAL,
    live: bool | None = None,
    said_by_cli: Callable[[BaseException], bool] = lambda exc: False,
) -> Iterator[Path]:
    """Route Prefect's logs for one CLI command; yields the log file's path.

    Prefect must be importable (call after :func:`orchestration.server.ensure_api`).
    ``live`` defaults to :func:`is_terminal`; ``-q`` never shows a display.
    Errors the runs logged are dropped from the console when the command stops
    with an exception ``said_by_cli`` accepts (the CLI prints its one line) or
    is interrupted; they are always in the log file.
    """
    global _active
    import prefect  # noqa: F401 - configures Prefect's logging

    root = logging.getLogger()
    theirs = _prefect_console_handlers()
    formatter = theirs[0].formatter if theirs else logging.Formatter()
    path = new_log_path(command)
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.handleError = _quiet_when_full(to_file.handleError)  # type: ignore[method-assign]
    to_file.setFormatter(formatter)
    show_live = (is_terminal() if live is None else live) and verbosity > QUIET
    display = _live_display() if show_live else None
    level = {QUIET: logging.ERROR, NORMAL: logging.WARNING}.get(verbosity, logging.INFO)
    to_console = _ConsoleHandler(level, display, hold=verbosity < VERBOSE)
    to_console.setFormatter(formatter)
    if verbosity < VERBOSE:
        to_console.addFilter(_NotRunBookkeeping())
    for handler in theirs:
        root.removeHandler(handler)
    root.addHandler(to_file)
    root.addHandler(to_console)
    _active = _Session(
        verbosity=verbosity, log_path=path, display=display, handler=to_console
    )
    try:
        with display if display is not None else nullcontext():
            try:
                yield path
            except BaseException as exc:
                if said_by_cli(exc) or isinstance(exc, KeyboardInterrupt):
                    to_console.held.clear()
                raise
            finally:
                to_console.show_held()
    finally:
        _active = None
        root.removeHandler(to_console)
        root.removeHandler(to_file)
        to_file.close()
        for handler in theirs:
            root.addHandler(handler)


def last_recorded_round(root: Path = Path(".")) -> int | None:
    """The highest round ``dvc.lock`` records, None when it records none."""
    import yaml

    lock = root / "dvc.lock"
    try:
        stages = (yaml.safe_load(lock.read_text()) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError):
        return None
    rounds = [
        int(name.partition("@")[2])
        for name in stages
        if name.startswith("round@") and name.partition("@")[2].isdigit()
    ]
    return max(rounds, default=None)


def interrupted_message(signal_name: str, root: Path = Path(".")) -> str:
    """The one line a stopped ``fedpipe run`` ends with."""
    last = last_recorded_round(root)
    where = (
        f"round {last} is the last recorded round (dvc.lock)"
        if last is not None
        else "no round recorded yet (dvc.lock)"
    )
    return (
        f"interrupted ({signal_name}): {where}; `fedpipe run` (or `dvc repro`) "
        "resumes from there"
    )

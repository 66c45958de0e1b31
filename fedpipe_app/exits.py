"""How a command ends: its exit status, and the failures said in one line.

:func:`fedpipe_app.cli.main` catches :class:`~fedpipe.core.errors.FedpipeError`
once and ends with the error's ``exit_code``; :func:`known_failure` and
:func:`stop_signal` say which other exceptions end with one line instead of a
traceback. Nothing here imports Prefect: its ``TerminationSignal`` is known by its
class's module and name.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from fedpipe.core.diskspace import disk_full_in
from fedpipe.core.errors import EXIT_BAD_PARAMS, EXIT_FAILED, FedpipeError

__all__ = [
    "EXIT_BAD_PARAMS",
    "EXIT_FAILED",
    "EXIT_SIGNAL",
    "exit_code",
    "known_failure",
    "name_log",
    "said_by_cli",
    "stop_signal",
]

EXIT_SIGNAL = 128  # + the signal's number: 130 after Ctrl-C, 143 after kill

_ONE_LINE = (FedpipeError, FileNotFoundError)
"""What ends a command with one line: fedpipe's own errors, and a missing file
(status :data:`EXIT_FAILED`)."""

_TERMINATION_SIGNAL = ("prefect.exceptions", "TerminationSignal")
"""Where Prefect's flow engine defines the exception it raises on SIGTERM."""


def known_failure(exc: BaseException) -> str | None:
    """Message for failures a person can act on; None for bugs (re-raised).

    A full disk anywhere in ``exc``'s chain is one, whoever wrapped it (DVC,
    Prefect): :class:`~fedpipe.core.diskspace.DiskFullError`'s line."""
    full = disk_full_in(exc, where=Path.cwd())
    if full is not None:
        return str(full)
    return str(exc) if isinstance(exc, _ONE_LINE) else None


def exit_code(exc: BaseException) -> int:
    """The exit status of a command stopped by the known failure ``exc``."""
    return exc.exit_code if isinstance(exc, FedpipeError) else EXIT_FAILED


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _signal_of(exc: BaseException) -> int | None:
    if isinstance(exc, KeyboardInterrupt):
        sent = exc.args[0] if exc.args else None
        return signal.SIGTERM if sent == signal.SIGTERM else signal.SIGINT
    if any((c.__module__, c.__name__) == _TERMINATION_SIGNAL for c in type(exc).mro()):
        return int(exc.signal)  # type: ignore[attr-defined]
    return None


def stop_signal(exc: BaseException) -> int | None:
    """SIGINT or SIGTERM when ``exc`` is how one of them stopped the command.

    Also when the signal's exception was replaced on its way up: a SIGTERM that
    lands while Prefect is still creating a task run surfaces as the engine's
    ``ValueError("Task run is not set")``, raised while handling it."""
    for link in _chain(exc):
        signum = _signal_of(link)
        if signum is not None:
            return signum
    return None


def said_by_cli(exc: BaseException) -> bool:
    """Whether :func:`fedpipe_app.cli.main` ends on ``exc`` with one line of its
    own (the console then drops the errors the runs logged about it)."""
    return known_failure(exc) is not None or stop_signal(exc) is not None


def name_log(args: argparse.Namespace) -> None:
    """Name the command's log file on stderr, when it wrote one."""
    log = getattr(args, "log_file", None)
    if log is not None:
        print(f"log: {log} (Prefect's logs, tracebacks included)", file=sys.stderr)

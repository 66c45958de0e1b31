"""The ``fedpipe`` command line.

``fedpipe run`` runs the whole pipeline in one process; ``fedpipe stage NAME`` is
what each ``dvc.yaml`` stage calls. Each command is a module of
:mod:`fedpipe_app.commands`; this one assembles the parser and ends every command
the same way: a :class:`~fedpipe.core.errors.FedpipeError` (and a missing file or
bad value from below) with one line and its exit code, Ctrl-C and SIGTERM with
where the run stopped, a bug with its traceback. Prefect, TensorFlow and DVC are
imported only by the commands that need them, so ``fedpipe --help`` answers at
once.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence

from fedpipe.core import atomic, stopping
from fedpipe_app.commands import COMMANDS
from fedpipe_app.commands.common import (
    PARAMS,
    Examples,
    HelpWithExamples,
    examples_epilog,
    with_examples,
)
from fedpipe_app.exits import (
    EXIT_BAD_PARAMS,
    EXIT_FAILED,
    EXIT_SIGNAL,
    exit_code,
    known_failure,
    name_log,
    stop_signal,
)

__all__ = [
    "EXAMPLES",
    "EXIT_BAD_PARAMS",
    "EXIT_FAILED",
    "EXIT_SIGNAL",
    "PARAMS",
    "build_parser",
    "main",
]

_QUIET_ENV = {
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "TF_DETERMINISTIC_OPS": "1",
    "DVC_NO_ANALYTICS": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_UI_SHOW_PROMOTIONAL_CONTENT": "false",
    "DVCLIVE_LOGLEVEL": "WARNING",
}

START_HERE = """fedpipe: federated-learning experiments as reproducible DVC pipelines.

Start here:
  fedpipe init my-study && cd my-study   a new project (dvc.yaml, params.yaml)
  fedpipe run                            every stage, each recorded in dvc.lock
  fedpipe status                         where the project stands, what is stale
  fedpipe doctor                         what went wrong, with the fix
  fedpipe report                         one HTML page about the run
  fedpipe lineage                        every round's model back to data, params, code

`fedpipe COMMAND --help` shows a command's options and examples."""

EXAMPLES: dict[str, Examples] = {
    "fedpipe": [
        ("fedpipe run", "train the federation in params.yaml"),
        ("fedpipe status", "where the project stands"),
        ("fedpipe -C path/to/project doctor", "diagnose another project's run"),
    ],
    **{c.NAME: c.EXAMPLES for c in COMMANDS if c.EXAMPLES},
}
"""Every command's examples, by command (``fedpipe``: the top-level help's)."""


def build_parser() -> argparse.ArgumentParser:
    """``fedpipe``'s parser: ``-C`` and one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="fedpipe",
        description="Federated-learning experiments as reproducible DVC pipelines, "
        "orchestrated by Prefect. Run from a project directory holding dvc.yaml and "
        "params.yaml (see `fedpipe init`).",
        epilog=examples_epilog(EXAMPLES["fedpipe"]),
        formatter_class=HelpWithExamples,
    )
    parser.add_argument(
        "-C", "--project", default=".", help="project directory (default: .)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def _with_examples(parser: argparse.ArgumentParser) -> None:
    """Every command's help ends with a few real examples: a command whose
    module wrote no epilog gets its :data:`EXAMPLES`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if not sub.epilog:
                    with_examples(sub, EXAMPLES.get(name, []))


def _quiet_env() -> None:
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    from fedpipe_app import deferred, tfnotices

    tfnotices.install()  # TF's C++ start-up lines ignore TF_CPP_MIN_LOG_LEVEL
    deferred.install()  # API modules fedpipe never uses: about 0.8 s of the import


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fedpipe ARGV``; its exit status."""
    _quiet_env()
    parser = build_parser()
    _with_examples(parser)
    args = parser.parse_args(argv)
    if args.command is None:
        print(START_HERE)
        return 0
    if args.command != "init":
        try:
            os.chdir(args.project)
        except OSError as exc:  # bad input: named, no traceback
            print(
                f"error: -C {args.project}: {exc.strerror or exc}; give the "
                "folder of a fedpipe project (`fedpipe init` makes one)",
                file=sys.stderr,
            )
            return EXIT_BAD_PARAMS
    try:
        return int(args.func(args))
    except BrokenPipeError:  # `fedpipe doctor | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # a failed stage: say what, not a 200-line traceback
        atomic.discard_partial()  # a write another thread had under way
        # a stop whose exception a library replaced: one that kept it as the
        # cause (stop_signal), or one that kept only its name in a message
        # (pydantic-core's serializer, when the signal lands in Prefect's import)
        signum = stop_signal(exc) or stopping.received()
        if signum is not None and args.command in ("run", "stage"):
            return _interrupted(args, signum)
        message = known_failure(exc)
        if message is None:
            name_log(args)
            raise
        print(f"error: {message}", file=sys.stderr)
        name_log(args)
        return exit_code(exc)
    except BaseException as exc:  # Ctrl-C, kill: where the run stopped, no traceback
        atomic.discard_partial()
        signum = stop_signal(exc)
        if signum is None or args.command not in ("run", "stage"):
            raise
        return _interrupted(args, signum)


def _interrupted(args: argparse.Namespace, signum: int) -> int:
    """Say where a run stopped by ``signum`` stopped; its exit status."""
    from orchestration.console import interrupted_message

    name = signal.Signals(signum).name
    print(interrupted_message(name), file=sys.stderr, flush=True)
    name_log(args)
    return EXIT_SIGNAL + signum


def entry() -> None:
    """The ``fedpipe`` console script and ``python -m fedpipe_app.cli``:
    :func:`main`, then the end of the process.

    The process ends without Python's teardown of its modules, which takes
    about a second after a run (measured: 0.96-0.99 s from a script's last line
    to its end with TensorFlow, Keras, Prefect and DVC imported, 0.03 s with
    ``os._exit``; the whole ``fedpipe run`` command 14.8 -> 13.5 s). What
    Python does before that teardown is done here first: the
    threads' exit hooks (Prefect's queues of logs and events drained to the
    server) and non-daemon threads joined, the ``atexit`` handlers (logging's
    files flushed and closed), stdout and stderr flushed. Tests call
    :func:`main`, which ends nothing."""
    end_process(main())


def end_process(code: int) -> None:
    """End this process with ``code`` as Python would, less its module
    teardown (see :func:`entry`)."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize runs first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that left; a closed stream
            pass
    os._exit(code)


if __name__ == "__main__":
    entry()

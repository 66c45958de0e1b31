"""What several commands share: the params file, loading and checking it, the
Prefect connection, the console options, and the examples at the end of a help."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedpipe.config.params import Params

PARAMS = "params.yaml"  # the file dvc.yaml's stages track; there is no other

Examples = Sequence[tuple[str, str]]
"""A command's examples: (command line, what it does)."""


def load(params_file: str, *, sync: bool) -> Params:
    """``params_file`` read and checked before any work: the user code it names
    imports and builds, ``dvc.yaml`` lists that code, the data is there.

    With ``sync``, params.yaml's round_chain and dvc.yaml's code dependencies are
    brought up to date first (each change said in one line).
    """
    from fedpipe.config.params import code_files_of, load_params, sync_round_chain
    from fedpipe.core.plugins import check_code_deps, sync_code_deps
    from fedpipe.data.preflight import preflight

    if sync and Path(params_file).is_file() and sync_round_chain(params_file):
        print(f"{params_file}: round_chain regenerated for federation.rounds")
    params = load_params(params_file)
    if _names_user_code(params):
        from fedpipe.federation.build import check_code  # imports TensorFlow

        check_code(params)
    files = code_files_of(params)
    if sync and Path("dvc.yaml").is_file() and sync_code_deps(files):
        print("dvc.yaml: code dependencies updated for your code in params.yaml")
    if sync and Path("dvc.yaml").is_file():
        from fedpipe_app.project import demo_stage_said, sync_demo_stage

        if sync_demo_stage(params.data.source):
            print(demo_stage_said(params.data.source))
    check_code_deps(files)
    preflight(params.data, params.federation, params.partition)
    return params


def _names_user_code(params: Params) -> bool:
    from fedpipe.core.plugins import is_reference

    names = (params.model.name, params.strategy.name, params.client.algorithm or "")
    return any(is_reference(n) for n in names)


def verbosity(args: argparse.Namespace) -> int:
    """``-v`` (1), ``-q`` (-1) or neither (0)."""
    return int(getattr(args, "verbose", False)) - int(getattr(args, "quiet", False))


def connect(args: argparse.Namespace) -> str:
    """The Prefect API the command's runs report to (a local server is started
    unless ``--no-server-start``); its URL."""
    return begin_connect(args)()


def begin_connect(args: argparse.Namespace) -> Callable[[], str]:
    """:func:`connect` in two halves (:func:`orchestration.server.begin_api`):
    call it before Prefect is imported; the function returned waits for the
    API (a server being started) and returns its URL."""
    from fedpipe.config.params import ParamsError
    from orchestration.console import QUIET, quiet_user_errors, quiet_workers
    from orchestration.server import begin_api

    quiet_workers(verbosity(args))  # before Prefect is imported
    quiet_user_errors((ParamsError,))
    answered = begin_api(start=not args.no_server_start)

    def ready() -> str:
        url = answered()
        ui = url.removesuffix("/api")
        if verbosity(args) > QUIET:
            print(f"Prefect: runs report to {url} (UI: {ui})", flush=True)
        return url

    return ready


def add_no_server_start(parser: argparse.ArgumentParser) -> None:
    """``--no-server-start``, as the commands that start Prefect runs take it."""
    parser.add_argument(
        "--no-server-start",
        action="store_true",
        help="fail instead of starting a local Prefect server when none answers",
    )


def add_console_options(parser: argparse.ArgumentParser) -> None:
    """``--no-server-start``, ``-v`` and ``-q`` of ``fedpipe run`` and ``stage``."""
    add_no_server_start(parser)
    talk = parser.add_mutually_exclusive_group()
    talk.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show Prefect's logs (every task run, tracebacks) on the "
        "console; they always go to logs/fedpipe-*.log and the Prefect UI",
    )
    talk.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="show only the final table and errors",
    )


def examples_epilog(rows: Examples) -> str:
    """``rows`` as a help's closing ``examples:`` block, comments aligned."""
    width = max((len(cmd) for cmd, _ in rows), default=0)
    return "examples:\n" + "\n".join(
        f"  {cmd:<{width}}  # {what}" for cmd, what in rows
    )


class HelpWithExamples(argparse.HelpFormatter):
    """Wraps descriptions as usual; keeps the examples' lines as written."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return text
        return super()._fill_text(text, width, indent)


def add_command(
    sub: argparse._SubParsersAction, name: str, rows: Examples, **kwargs: Any
) -> argparse.ArgumentParser:
    """``sub.add_parser(name, **kwargs)``: a command whose help ends with ``rows``."""
    parser: argparse.ArgumentParser = sub.add_parser(name, **kwargs)
    with_examples(parser, rows)
    return parser


def with_examples(parser: argparse.ArgumentParser, rows: Examples) -> None:
    """``parser``'s help ends with ``rows``."""
    parser.epilog = examples_epilog(rows)
    parser.formatter_class = HelpWithExamples

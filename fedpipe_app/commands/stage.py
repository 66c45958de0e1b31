"""``fedpipe stage NAME [ROUND]``: one pipeline stage, what ``dvc.yaml`` calls."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fedpipe.core import stopping
from fedpipe_app import exits
from fedpipe_app.commands.common import (
    PARAMS,
    add_command,
    add_console_options,
    connect,
    load,
    verbosity,
)

if TYPE_CHECKING:
    from fedpipe.config.params import Params

NAME = "stage"
EXAMPLES = [
    ("fedpipe stage round 3", "what dvc.yaml's round@3 runs"),
    ("fedpipe stage partition", "deal the data to clients again"),
]
STAGES = [
    "mnist5k",
    "ingest",
    "validate",
    "partition",
    "preprocess",
    "init",
    "round",
    "summary",
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe stage`` on ``sub``."""
    stage = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="run one pipeline stage (what dvc.yaml's stages call)",
        description="Run one stage as its own Prefect flow run; `dvc repro` calls it. "
        "The stage runs in the project's warm worker, a background process that "
        "keeps TensorFlow, Prefect and compiled models between the stages of a "
        "`dvc repro` (FEDPIPE_WARM=0: in this process; see docs/pipeline.md).",
    )
    stage.add_argument("name", choices=STAGES)
    stage.add_argument("round", nargs="?", type=int, help="round number for `round`")
    stage.set_defaults(func=cmd_stage)
    add_console_options(stage)
    return stage


def cmd_stage(args: argparse.Namespace) -> int:
    """``fedpipe stage``: in the project's warm worker when one can be used
    (FEDPIPE_WARM=0: never), else in this process as its own Prefect flow run."""
    from fedpipe_app import stageclient

    if stageclient.enabled():  # the project's warm worker runs it (FEDPIPE_WARM=0: no)
        code = stageclient.run_warm(_stage_argv(args), verbose=bool(args.verbose))
        if code is not None:
            return code
    params = load(PARAMS, sync=False)
    connect(args)
    from orchestration import console

    stopping.install()  # Prefect's flow engine raises its own inside
    which = args.name if args.round is None else f"{args.name}-{args.round}"
    with console.session(
        f"stage-{which}", verbosity=verbosity(args), said_by_cli=exits.said_by_cli
    ) as log:
        args.log_file = log
        _run_one_stage(args, params)
    return 0


def _stage_argv(args: argparse.Namespace) -> list[str]:
    """The arguments of this ``fedpipe stage`` command, for the warm worker."""
    from fedpipe_app.stageclient import stage_argv

    flags = [
        flag
        for flag, on in (
            ("--no-server-start", args.no_server_start),
            ("-v", args.verbose),
            ("-q", args.quiet),
        )
        if on
    ]
    return stage_argv(args.name, args.round, flags=flags)


def _run_one_stage(args: argparse.Namespace, params: Params) -> None:
    from flows.stages import without_heartbeat

    with without_heartbeat():
        _run_stage_command(args, params)


def _run_stage_command(args: argparse.Namespace, params: Params) -> None:
    from flows.stages import run_stage

    if args.name == "round":
        if args.round is None:
            raise SystemExit(
                "fedpipe stage round: give the round number, e.g. `round 3`"
            )
        if not 1 <= args.round <= params.federation.rounds:
            raise SystemExit(
                f"round {args.round} is outside federation.rounds="
                f"1..{params.federation.rounds}"
            )
        run_stage(params, f"round@{args.round}")
    else:
        run_stage(params, args.name)

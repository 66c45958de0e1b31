"""``fedpipe status``: the project at a glance, in about a second."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpipe_app.commands.common import add_command

NAME = "status"
EXAMPLES = [
    ("fedpipe status", "where the project stands; what a run would redo"),
    ("fedpipe status --format json", "for scripts"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe status`` on ``sub``."""
    status = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="the project at a glance: data, partition, rounds, stale stages and "
        "why, the last run, the doctor's top finding",
        description="Read params.yaml, dvc.lock (through DVC: the stale stages are "
        "what `dvc status` finds, with the param keys and their recorded and "
        "current values, the changed data and code) and the run's files. No "
        "TensorFlow, no Prefect: it answers in about a second.",
    )
    status.add_argument(
        "--format",
        choices=["text", "json"],
        default="text",
        help="output format (default: text)",
    )
    status.set_defaults(func=cmd_status)
    return status


def cmd_status(args: argparse.Namespace) -> int:
    """``fedpipe status``: text or JSON."""
    from fedpipe.observe.status import format_json, format_text
    from orchestration.staleness import remembered_status

    status = remembered_status(Path("."))
    print(format_json(status) if args.format == "json" else format_text(status))
    return 0

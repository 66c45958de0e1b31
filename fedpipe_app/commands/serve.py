"""``fedpipe serve``: the project as a Prefect deployment served by this process."""

from __future__ import annotations

import argparse

from fedpipe_app.commands.common import add_command
from fedpipe_app.commands.deploy import (
    add_deployment_options,
    deployment_for,
    schedule_text,
)

NAME = "serve"
EXAMPLES = [("fedpipe serve --cron '0 * * * *'", "hourly runs from this process")]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe serve`` on ``sub``."""
    serve = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="serve the project as a Prefect deployment from this process",
        description="Register this project as deployment fedpipe-federation/NAME, "
        "optionally on a cron schedule, and run its runs from this process until "
        "stopped (no work pool or worker needed).",
    )
    serve.set_defaults(func=cmd_serve)
    add_deployment_options(serve)
    return serve


def cmd_serve(args: argparse.Namespace) -> int:
    """``fedpipe serve``: until Ctrl-C."""
    dep = deployment_for(args)
    from flows.deploy import FLOW_NAME, serve

    print(
        f"serving deployment '{FLOW_NAME}/{dep.name}' (schedule: "
        f"{schedule_text(args)}); runs "
        "start from the UI or `prefect deployment run`; Ctrl-C stops",
        flush=True,
    )
    serve(dep)
    return 0

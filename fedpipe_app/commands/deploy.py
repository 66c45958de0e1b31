"""``fedpipe deploy``: the project as a Prefect deployment on a process work pool.

:func:`add_deployment_options` and :func:`deployment_for` are shared with
``fedpipe serve`` (:mod:`fedpipe_app.commands.serve`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fedpipe_app.commands.common import (
    PARAMS,
    add_command,
    add_no_server_start,
    connect,
    load,
)

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment

NAME = "deploy"
EXAMPLES = [
    ("fedpipe deploy --cron '0 3 * * *'", "a nightly run on the fedpipe pool"),
    ("prefect worker start --pool fedpipe", "then: the worker that runs them"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe deploy`` on ``sub``."""
    deploy = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="register the project as a Prefect deployment on a process work pool",
        description="Register this project as deployment fedpipe-federation/NAME "
        "on a `process` work pool (created if missing), optionally on a cron "
        "schedule; `prefect worker start --pool POOL` then runs its runs. Runs can "
        "be started from the Prefect UI with overrides (rounds, strategy, epochs, "
        "runner), which are written into params.yaml.",
    )
    deploy.add_argument(
        "--pool", default="fedpipe", help="process work pool (default: fedpipe)"
    )
    deploy.set_defaults(func=cmd_deploy)
    add_deployment_options(deploy)
    return deploy


def add_deployment_options(parser: argparse.ArgumentParser) -> None:
    """``--name``, ``--cron``, ``--timezone`` and ``--no-server-start``."""
    parser.add_argument(
        "--name", help="deployment name (default: the project folder's name)"
    )
    parser.add_argument(
        "--cron", help="schedule, e.g. '0 3 * * *' (03:00 daily); default none"
    )
    parser.add_argument(
        "--timezone", help="IANA time zone of --cron, e.g. Europe/Berlin (UTC)"
    )
    add_no_server_start(parser)


def deployment_for(args: argparse.Namespace) -> RunnerDeployment:
    """The project's deployment as ``args`` name and schedule it, once its
    params check (bad params stop here, not in a scheduled run)."""
    load(PARAMS, sync=True)  # bad params stop here, not in a scheduled run
    connect(args)
    from flows.deploy import deployment

    return deployment(
        Path.cwd(), name=args.name, cron=args.cron, timezone=args.timezone
    )


def schedule_text(args: argparse.Namespace) -> str:
    """``args``' schedule in words, e.g. ``cron '0 3 * * *' (UTC)``, or ``none``."""
    return f"cron {args.cron!r} ({args.timezone or 'UTC'})" if args.cron else "none"


def cmd_deploy(args: argparse.Namespace) -> int:
    """``fedpipe deploy``: the deployment, and how to start its worker."""
    dep = deployment_for(args)
    from flows.deploy import deploy, ensure_process_pool

    if ensure_process_pool(args.pool):
        print(f"created work pool {args.pool!r} (type process)")
    full = deploy(dep, args.pool)
    print(
        f"deployment {full!r} on work pool {args.pool!r}; "
        f"schedule: {schedule_text(args)}\n"
        f"next: start a worker (it runs the deployment's runs):\n"
        f"  PREFECT_API_URL={os.environ['PREFECT_API_URL']} "
        f"prefect worker start --pool {args.pool}\n"
        f"then trigger a run from the UI (Deployments -> {full} -> Run) or:\n"
        f"  prefect deployment run {full!r} [--param rounds=20]"
    )
    return 0

"""``fedpipe init DIRECTORY``: a new project (dvc.yaml, params.yaml, git, DVC)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fedpipe_app.commands.common import add_command

NAME = "init"
EXAMPLES = [
    ("fedpipe init my-study", "a new project with git, DVC and a remote"),
    ("fedpipe init my-study --remote s3://bucket/fl", "with your own DVC remote"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe init`` on ``sub``."""
    init = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="create a new fedpipe project (dvc.yaml, params.yaml, git, dvc)",
    )
    init.add_argument("directory")
    init.add_argument(
        "--no-git", action="store_true", help="do not run git init / dvc init"
    )
    init.add_argument(
        "--remote",
        metavar="URL",
        help="default DVC remote (any `dvc remote add` URL: a folder, s3://..., "
        "ssh://...); default: $FEDPIPE_DVC_REMOTE, else a folder of the project's "
        "own under ~/.local/share/fedpipe/dvc-remote/",
    )
    init.set_defaults(func=cmd_init)
    return init


def cmd_init(args: argparse.Namespace) -> int:
    """``fedpipe init``: the project, and what to type next."""
    from fedpipe_app.project import REMOTE_ENV, init_project

    remote = args.remote or os.environ.get(REMOTE_ENV) or None
    path = init_project(Path(args.directory), git=not args.no_git, remote=remote)
    print(f"initialized a fedpipe project in {path}; next: cd {path} && fedpipe run")
    return 0

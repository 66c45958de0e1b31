"""``fedpipe sync``: params.yaml's round_chain, dvc.yaml's code dependencies and
its demo-data stage (only for ``data.source: mnist5k``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpipe_app.commands.common import (
    PARAMS,
    add_command,
)

NAME = "sync"
EXAMPLES = [
    ("fedpipe sync && dvc repro", "after changing federation.rounds"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe sync`` on ``sub``."""
    sync = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="regenerate params.yaml's round_chain from federation.rounds and "
        "dvc.yaml's dependencies on your own code (model/strategy/client files)",
    )
    sync.set_defaults(func=cmd_sync)
    return sync


def cmd_sync(args: argparse.Namespace) -> int:
    """``fedpipe sync``: each file said updated or already in sync."""
    from fedpipe.config.params import code_files_of, load_params, sync_round_chain
    from fedpipe.core.plugins import sync_code_deps

    changed = sync_round_chain(PARAMS)
    params = load_params(PARAMS)
    state = "updated" if changed else "already in sync"
    print(f"{PARAMS}: round_chain {state} ({params.federation.rounds} rounds)")
    files = code_files_of(params)
    if Path("dvc.yaml").is_file():
        state = "updated" if sync_code_deps(files) else "already in sync"
        listed = sorted({f for fs in files.values() for f in fs})
        print(f"dvc.yaml: code dependencies {state} ({', '.join(listed) or 'none'})")
        from fedpipe_app.project import demo_stage_said, sync_demo_stage

        if sync_demo_stage(params.data.source):
            print(demo_stage_said(params.data.source))
    return 0

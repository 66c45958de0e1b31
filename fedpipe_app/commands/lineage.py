"""``fedpipe lineage [TARGET]``: an artifact back to the raw data, verified
against dvc.lock."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpipe.core.errors import EXIT_FAILED

NAME = "lineage"
EXAMPLES: list[tuple[str, str]] = []  # in EPILOG, with the targets
EPILOG = """targets:
  (none)                     the whole pipeline (up to the last stage recorded)
  round N | N                round N's global model (0 = the initial model)
  STAGE                      a stage: mnist5k, ingest, validate, partition, init,
                             round@K, summary
  PATH                       a file or directory a stage produces, e.g.
                             models/round-4/weights.npz, data/prepared/schema.json

flagged (exit 1):
  changed  a file's md5 on disk differs from dvc.lock
  missing  a recorded input or output is not on disk
  stale    a stage ran on an input its upstream stage no longer records, on
           params that differ from params.yaml now, or with another command
           than dvc.yaml now gives it
The git state (HEAD, uncommitted changes) is reported but never flagged.

exit status: 0 everything verifies, 1 something is flagged, 2 bad target
(unknown round, a path no stage produces) or no dvc.lock.

examples:
  fedpipe lineage round 4
  fedpipe lineage models/round-4/weights.npz --format json
  fedpipe lineage --format mermaid > lineage.mmd"""


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe lineage`` on ``sub``."""
    lineage = sub.add_parser(
        NAME,
        help="trace an artifact back to the raw data and verify it against dvc.lock",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Print the chain of stages from TARGET back to the raw data: "
        "each stage's\ncommand, the params it read, its input and output md5s "
        "(dvc.lock), the\nvalidation result, the partition manifest, the clients of "
        "each round and the\ngit commit. Files on disk are hashed and compared with "
        "dvc.lock.",
        epilog=EPILOG,
    )
    lineage.add_argument(
        "target", nargs="*", help="round N, N, a stage name or a path (see below)"
    )
    lineage.add_argument(
        "--format",
        choices=["text", "json", "mermaid"],
        default="text",
        help="text (default), json, or a mermaid flowchart with flagged stages styled",
    )
    lineage.set_defaults(func=cmd_lineage)
    return lineage


def cmd_lineage(args: argparse.Namespace) -> int:
    """``fedpipe lineage``: 0 when everything verifies, 1 when something is
    flagged; a bad target is a :class:`~fedpipe.observe.lineage.LineageError`
    (exit status 2)."""
    from fedpipe.observe.lineage import (
        audit,
        format_json,
        format_mermaid,
        format_text,
    )

    lineage = audit(Path("."), args.target)
    formats = {"text": format_text, "json": format_json, "mermaid": format_mermaid}
    print(formats[args.format](lineage))
    return 0 if lineage.verified else EXIT_FAILED

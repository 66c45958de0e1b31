"""``fedpipe audit``: the promises every run keeps, checked on this project."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedpipe_app.commands.common import add_command

NAME = "audit"
EXAMPLES = [
    ("fedpipe audit", "every invariant; exit status 1 if one is broken"),
    ("fedpipe audit --only cells", "one invariant"),
    ("fedpipe audit --format json", "for scripts"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe audit`` on ``sub``."""
    from fedpipe.observe.audit import INVARIANTS

    audit = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="check the invariants every run keeps (rows accounted for, public "
        "files hold nothing private, views of this run, no small cell)",
        description="Read this project's files and check what every run promises, "
        "whatever its settings: "
        + "; ".join(f"{name}: {promise}" for name, (promise, _) in INVARIANTS.items())
        + ". Exit status 0 when every promise holds, 1 when one is broken (each "
        "broken promise named with its file).",
    )
    audit.add_argument(
        "--only",
        action="append",
        choices=list(INVARIANTS),
        metavar="NAME",
        help=f"check this invariant only (repeatable; one of {', '.join(INVARIANTS)})",
    )
    audit.add_argument(
        "--format", choices=["text", "json"], default="text", help="output format"
    )
    audit.set_defaults(func=cmd_audit)
    return audit


def cmd_audit(args: argparse.Namespace) -> int:
    """``fedpipe audit``: one line per invariant, the violations under it."""
    from fedpipe.observe.audit import audit

    results = audit(Path("."), tuple(args.only or ()))
    if args.format == "json":
        print(
            json.dumps(
                [
                    {"invariant": r.name, "ok": r.ok, "violations": list(r.violations)}
                    for r in results
                ],
                indent=2,
            )
        )
    else:
        for r in results:
            verdict = "ok" if r.ok else f"BROKEN ({len(r.violations)})"
            print(f"{r.name:6s} {verdict}: {r.promise}")
            for message in r.violations[:20]:
                print(f"  - {message}")
            if len(r.violations) > 20:
                print(f"  ... and {len(r.violations) - 20} more (--format json)")
    return 0 if all(r.ok for r in results) else 1

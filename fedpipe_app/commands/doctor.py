"""``fedpipe doctor``: diagnose a finished (or stopped) run from its files."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpipe_app.commands.common import add_command

NAME = "doctor"
EXAMPLES = [
    ("fedpipe doctor", "findings, most important first"),
    ("fedpipe doctor --format json", "for scripts"),
    ("fedpipe doctor --fail-on warning", "a CI gate"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe doctor`` on ``sub``."""
    doctor = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="diagnose a finished (or stopped) run from its recorded files",
        description="Read metrics/rounds, metrics/health, metrics/clients, "
        "params.yaml, the prepared data and the partition manifest; print findings "
        "(most important first) with evidence and a suggested fix, or 'no "
        "findings'. Exit 0 when no finding reaches --fail-on, 1 otherwise.",
    )
    doctor.add_argument(
        "--format",
        choices=["text", "json", "markdown"],
        default="text",
        help="output format (default: text)",
    )
    doctor.add_argument(
        "--fail-on",
        choices=["error", "warning", "info", "never"],
        default="error",
        help="exit 1 if a finding of this severity or worse exists (default: error)",
    )
    doctor.set_defaults(func=cmd_doctor)
    return doctor


def cmd_doctor(args: argparse.Namespace) -> int:
    """``fedpipe doctor``: the findings; 1 when one reaches ``--fail-on``."""
    import json

    from fedpipe.observe.doctor import diagnose, exit_code, format_markdown, format_text
    from fedpipe.observe.runfiles import load_run

    run = load_run(Path("."))
    findings = diagnose(run)
    view = f"{run.view_text}\n\n" if run.view_text else ""  # a DP run's view
    if args.format == "json":
        print(json.dumps([f.to_dict() for f in findings], indent=2))
    elif args.format == "markdown":
        print(view + format_markdown(findings))
    else:
        print(view + format_text(findings))
    return exit_code(findings, fail_on=args.fail_on)

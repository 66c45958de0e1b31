"""``fedpipe report``: one self-contained HTML page about the run."""

from __future__ import annotations

import argparse
from pathlib import Path

from fedpipe_app.commands.common import add_command

NAME = "report"
EXAMPLES = [
    ("fedpipe report", "writes reports/report.html"),
    ("fedpipe report --out /tmp/run.html", "somewhere else"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe report`` on ``sub``."""
    report = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="write one self-contained HTML page about the run (reports/report.html)",
        description="Metrics per round, layer divergence, client update norms, label "
        "distribution, the doctor's findings and lineage, in one offline HTML file. "
        "Sections whose inputs are missing say which command records them.",
    )
    report.add_argument(
        "--out",
        type=Path,
        default=None,
        help="where to write, relative to the project (default: reports/report.html)",
    )
    report.set_defaults(func=cmd_report)
    return report


def cmd_report(args: argparse.Namespace) -> int:
    """``fedpipe report``: prints the page's path."""
    from fedpipe.observe.report import write_report

    print(write_report(Path("."), args.out).resolve())
    return 0

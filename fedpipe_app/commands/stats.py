"""``fedpipe stats``: the federated statistics of the clients' training rows."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fedpipe_app.commands.common import add_command

NAME = "stats"
EXAMPLES = [
    ("fedpipe stats", "every column, globally and per client"),
    ("fedpipe stats --client 0 --client 3", "two clients only"),
    ("fedpipe stats --column age --column income", "two columns only"),
    ("fedpipe stats --json", "the file itself (data/preprocess/stats.json)"),
]


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe stats`` on ``sub``."""
    stats = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="show per-column statistics, globally and per client, and the "
        "feature skew between clients",
        description="Per column, globally and per client: count, missing, mean, "
        "std, quartiles (from the federated histogram; global min/max too), a "
        "categorical column's top values (a text column's top tokens) and the "
        "held-out rows whose category goes to 'other', each column's kind and "
        "why (numeric, boolean, date, categorical, text; when the table has "
        "more than numbers), each "
        "client's label counts, and the feature skew (each client's column mean "
        "in global standard deviations; heatmap in "
        "reports/preprocess/feature_skew.png). Read from data/preprocess/stats.json, "
        "which the preprocess stage writes from the same client statistics it fits "
        "the transform from (the clients' training splits only). No count below "
        "preprocess.min_count_shown is shown: it reads <k.",
    )
    stats.add_argument(
        "--client",
        type=int,
        action="append",
        metavar="N",
        help="show this client only (repeatable; default: every client)",
    )
    stats.add_argument(
        "--column",
        action="append",
        metavar="NAME",
        help="show this column only (repeatable; default: every column)",
    )
    stats.add_argument(
        "--json", action="store_true", help="print data/preprocess/stats.json as is"
    )
    stats.set_defaults(func=cmd_stats)
    return stats


def cmd_stats(args: argparse.Namespace) -> int:
    """``fedpipe stats``: prints the statistics."""
    from fedpipe.config import layout
    from fedpipe.core.jsonio import read_json
    from fedpipe.observe.clientstats import check_stats, render_stats

    path = Path(layout.CLIENT_STATS)
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: not found; run `fedpipe run` (or `dvc repro preprocess`) first"
        )
    stats = check_stats(read_json(path), str(path))
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
        return 0
    png = layout.SKEW_PNG
    print(
        render_stats(
            stats,
            source=str(path),
            clients=args.client,
            columns=args.column,
            skew_png=str(png) if png.is_file() else None,
        )
    )
    schema = Path(layout.PREPARED_SCHEMA)
    for line in id_like_lines(read_json(schema) if schema.is_file() else {}):
        print(line)
    return 0


def id_like_lines(schema: dict) -> list[str]:
    """The columns the ingest left out of the features as row ids (kind ``id``),
    each with why and the key to set (``schema.json`` ``id_like_columns``)."""
    left_out = schema.get("id_like_columns") or {}
    return [
        f"column {column!r}: kind id ({why}), not a feature; set data.id_column: "
        f"{column!r} to name the rows by it, or list it in data.feature_columns"
        for column, why in left_out.items()
    ]

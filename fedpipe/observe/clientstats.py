"""The federated statistics of ``data/preprocess/stats.json`` as text a person
reads (``fedpipe stats``) and as table rows (the report's section).

What the file holds, and the minimum-count rule it was written under, is
:mod:`fedpipe.data.preprocess.summary`'s; nothing here sees a client's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedpipe.core.errors import FedpipeError
from fedpipe.data.preprocess.summary import FORMAT, skew_matrix
from fedpipe.observe.runfiles import fmt

__all__ = [
    "CLIENT_HEADER",
    "GLOBAL_HEADER",
    "StatsError",
    "category_lines",
    "check_stats",
    "client_rows",
    "global_rows",
    "heldout_lines",
    "largest_skews",
    "render_stats",
]

_COMMON = ("column", "count", "missing", "mean", "std")
GLOBAL_HEADER = (*_COMMON, "min", "q25", "median", "q75", "max")
CLIENT_HEADER = (*_COMMON, "q25", "median", "q75", "skew (std)")


class StatsError(FedpipeError, ValueError):
    """``fedpipe stats`` cannot show what was asked (a client or column the
    statistics do not have, a file of another format)."""


def check_stats(stats: Any, source: str) -> dict[str, Any]:
    """``stats`` if it is a ``stats.json`` this fedpipe reads; else
    :class:`StatsError` naming ``source``."""
    if not isinstance(stats, dict) or stats.get("format") != FORMAT:
        found = stats.get("format") if isinstance(stats, dict) else None
        raise StatsError(
            f"{source}: format {found!r}, this fedpipe reads format {FORMAT}; run "
            "`fedpipe stage preprocess` (or `dvc repro preprocess`) again"
        )
    return stats


def _cell(value: Any) -> str:
    return value if isinstance(value, str) else fmt(value, 4)


def global_rows(stats: dict[str, Any], columns: Sequence[str]) -> list[list[str]]:
    """One row per column of the merged statistics (:data:`GLOBAL_HEADER`)."""
    rows = []
    for name in columns:
        g = stats["global"][name]
        keys = ("count", "missing", "mean", "std", "min", "q25", "q50", "q75", "max")
        rows.append([name, *(_cell(g[k]) for k in keys)])
    return rows


def client_rows(
    stats: dict[str, Any], client: int, columns: Sequence[str]
) -> list[list[str]]:
    """One row per column of client ``client``'s statistics (:data:`CLIENT_HEADER`)."""
    block = stats["per_client"][client]["columns"]
    z = skew_matrix(stats)[client]
    index = {name: j for j, name in enumerate(stats["columns"])}
    rows = []
    for name in columns:
        c = block[name]
        skew = z[index[name]]
        rows.append(
            [name]
            + [_cell(c[k]) for k in ("count", "missing", "mean", "std")]
            + [_cell(c[k]) for k in ("q25", "q50", "q75")]
            + [f"{skew:+.2f}" if np.isfinite(skew) else "n/a"]
        )
    return rows


def category_lines(block: dict[str, Any], columns: Sequence[str], k: int) -> list[str]:
    """One line per string column of ``block`` (``stats["global"]`` or a
    client's ``columns``): its top values with their rows (tokens: rows
    holding them), then the rows of the values not shown."""
    lines = []
    for name in columns:
        c = block[name]
        if "top" not in c:
            continue
        # most rows first (the JSON file may hold the values sorted by name)
        # (a value hidden by difference, ">=k", ranks below the shown ones)
        ranked = sorted(
            c["top"].items(),
            key=lambda item: (-item[1] if isinstance(item[1], int) else 0, item[0]),
        )
        top = ", ".join(f"{v} {n}" for v, n in ranked) or (f"none of {k} rows or more")
        what = "tokens" if c.get("type") == "text" else "values"
        other = f"; other {c['other']}" if "other" in c else ""
        lines.append(f"  {name} ({what}): {top}{other}")
    return lines


def kind_lines(stats: dict[str, Any], columns: Sequence[str]) -> list[str]:
    """``  when: date (every value an ISO date: days since 1970-01-01)`` per
    column, when the ingest recorded the kinds (a table with a column that is
    not plain numbers)."""
    kinds = stats.get("column_kinds") or {}
    return [
        f"  {name}: {kinds[name].get('kind')} ({kinds[name].get('why')})"
        for name in columns
        if isinstance(kinds.get(name), dict)
    ]


def heldout_lines(stats: dict[str, Any], columns: Sequence[str]) -> list[str]:
    """The held-out rows whose category goes to "other", per column."""
    counts = stats.get("heldout_other") or {}
    return [
        f"  {name}: {c['unseen']} unseen (in no client's training rows), "
        f"{c['rare']} rare (below preprocess.min_category_count)"
        for name, c in counts.items()
        if name in columns
    ]


def largest_skews(
    stats: dict[str, Any],
    n: int = 5,
    *,
    clients: Sequence[int] | None = None,
    columns: Sequence[str] | None = None,
) -> list[tuple[int, str, float]]:
    """The ``n`` (client, column, skew) with the largest absolute skew (among
    ``clients`` and ``columns``, default all)."""
    z = skew_matrix(stats)
    cells = [
        (abs(v), i, stats["columns"][j], float(v))
        for (i, j), v in np.ndenumerate(z)
        if np.isfinite(v)
        and (clients is None or i in clients)
        and (columns is None or stats["columns"][j] in columns)
    ]
    cells.sort(key=lambda c: (-c[0], c[1], c[2]))
    return [(i, name, v) for _, i, name, v in cells[:n]]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[j]) for r in [header, *rows]) for j in range(len(header))]
    lines = ["  ".join(h.rjust(w) if j else h.ljust(w) for j, (h, w) in
                       enumerate(zip(header, widths, strict=True)))]  # fmt: skip
    for row in rows:
        lines.append(
            "  ".join(
                c.rjust(w) if j else c.ljust(w)
                for j, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return lines


def render_stats(
    stats: dict[str, Any],
    *,
    source: str,
    clients: Sequence[int] | None = None,
    columns: Sequence[str] | None = None,
    skew_png: str | None = None,
) -> str:
    """The statistics as plain text: the global table, then each client's.

    Parameters
    ----------
    clients, columns
        Only these (default: all); an unknown one raises :class:`StatsError`.
    skew_png
        The heatmap's path, named at the end when given.
    """
    k = stats["min_count"]
    names = list(stats["columns"]) if not columns else list(columns)
    unknown = [c for c in names if c not in stats["global"]]
    if unknown:
        raise StatsError(
            f"--column {unknown[0]!r}: not a column of {source}; its columns: "
            f"{', '.join(stats['columns'][:20])}"
        )
    n = int(stats["clients"])
    wanted = list(range(n)) if clients is None else list(clients)
    bad = [c for c in wanted if not 0 <= c < n]
    if bad:
        raise StatsError(f"--client {bad[0]}: {source} has clients 0..{n - 1}")
    lines = [
        f"{source}: {stats['kind']}, {n} clients, {stats['rows']} training rows "
        f"(the clients' training splits only; counts below {k} shown as <{k})",
        "",
        "global",
        *_table(GLOBAL_HEADER, global_rows(stats, names)),
    ]
    kinds = kind_lines(stats, names)
    if kinds:
        lines += ["column kinds (data/prepared/schema.json):", *kinds]
    values = category_lines(stats["global"], names, k)
    if values:
        lines += [f"top values (values of fewer than {k} rows not shown):", *values]
    held = heldout_lines(stats, names)
    if held:
        lines += ['held-out rows whose category goes to "other":', *held]
    for i in wanted:
        c = stats["per_client"][i]
        labels = ", ".join(f"{name} {v}" for name, v in c["labels"].items())
        lines += [
            "",
            f"client {i}: {c['rows']} rows; labels {labels}",
            *_table(CLIENT_HEADER, client_rows(stats, i, names)),
            *category_lines(c["columns"], names, k),
        ]
    top = largest_skews(stats, clients=wanted, columns=names)
    lines += ["", "feature skew (client mean - global mean, in global std):"]
    if top:
        lines += [f"  client {i} {name}: {v:+.2f}" for i, name, v in top]
    else:
        lines.append("  none shown (every cell withheld or constant)")
    if skew_png:
        lines.append(f"  heatmap: {skew_png}")
    return "\n".join(lines)

"""Checks of a run's files against the promises every run must keep (issue 36).

:func:`public_leaks` is "public means public": under any ``privacy.mechanism``,
no public file (:func:`fedpipe.config.layout.is_public`: git-tracked or a DVC
output) holds a client's model or state, a per-client unnoised quantity, or
which clients were sampled. It reads the files as they are on disk, not the code
that wrote them, so it also catches a file left by an older version.

Pure library: no Prefect, no DVC; pandas is imported when a table is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedpipe.config import layout
from fedpipe.federation.clientstate import INDEX
from fedpipe.federation.privacy.views import ORACLE_KEYS, SERVER_TABLE_COLUMNS

if TYPE_CHECKING:
    from fedpipe.config.params import Params

__all__ = ["public_leaks"]

#: a DP-SGD round's privacy-block keys that name clients (who trained, and how
#: much: the steps grow with each round a client takes part in)
PER_CLIENT_PRIVACY_KEYS = ("epsilon_clients", "steps_clients", "stopped")

#: history.csv columns computed from the clients' own unnoised evaluations
_HISTORY_ORACLE_PREFIXES = ("global_on_clients_", "local_", "personalized_")


def _keys_in(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys_in(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys_in(v)}
    return set()


def _record(path: Path) -> Iterator[str]:
    """A round, health or summary record: no oracle key, no per-client privacy
    entry."""
    record = json.loads(path.read_text())
    found = sorted(_keys_in(record) & set(ORACLE_KEYS))
    if found:
        yield f"holds the oracle's per-client or sampling keys {', '.join(found)}"
    privacy = record.get("privacy") if isinstance(record, dict) else None
    if isinstance(privacy, dict):
        named = [k for k in PER_CLIENT_PRIVACY_KEYS if privacy.get(k)]
        if named:
            yield (
                f"privacy.{', privacy.'.join(named)} name the clients that trained "
                "(per client)"
            )


def _client_table(path: Path) -> Iterator[str]:
    """The per-client table: no row (its rows are who was sampled or scored), no
    column but the server's."""
    import pandas as pd

    table = pd.read_csv(path)
    if len(table):
        yield f"lists {len(table)} clients: which clients were sampled or scored"
    extra = [c for c in table.columns if c not in SERVER_TABLE_COLUMNS]
    if extra:
        yield f"has per-client unnoised columns {', '.join(map(str, extra))}"


def _client_state(path: Path) -> Iterator[str]:
    """A file of a public client-state folder: only an index naming no client."""
    if path.name != INDEX:
        yield "is a client's own model or state, trained without clip or noise"
        return
    clients = json.loads(path.read_text()).get("clients") or []
    if clients:
        yield f"names the {len(clients)} clients that keep state (who trained)"


def _history(path: Path) -> Iterator[str]:
    """history.csv: no column of the clients' own evaluations with a value, no
    count of sampled clients."""
    import pandas as pd

    table = pd.read_csv(path)
    filled = [
        c
        for c in table.columns
        if str(c).startswith(_HISTORY_ORACLE_PREFIXES) and table[c].notna().any()
    ]
    if filled:
        yield f"has the clients' unnoised evaluations in {', '.join(filled)}"
    if "n_selected" in table and (table["n_selected"].fillna(0) > 0).any():
        yield "has n_selected, the number of clients each round sampled"


#: the public files whose content could hold what DP hides, and their check
_CHECKS: tuple[tuple[str, Callable[[Path], Iterator[str]]], ...] = (
    (f"{layout.MODELS_DIR.as_posix()}/round-*/clients/*", _client_state),
    (f"{layout.CLIENT_METRICS_DIR.as_posix()}/*.csv", _client_table),
    (f"{layout.ROUND_METRICS_DIR.as_posix()}/*.json", _record),
    (f"{layout.HEALTH_METRICS_DIR.as_posix()}/*.json", _record),
    (layout.SUMMARY_METRICS.as_posix(), _record),
    (layout.HISTORY_CSV.as_posix(), _history),
)


def public_leaks(project_root: Path, params: Params) -> list[str]:
    """One line for each public file of the run under ``project_root`` that,
    under ``params``' DP mechanism, holds a client's model or state, a
    per-client unnoised quantity or which clients were sampled (empty without
    ``privacy.mechanism``: nothing is promised then).

    A file that cannot be read is a line too (it cannot be shown to keep the
    promise). Round files past ``federation.rounds`` are not this run's (an
    earlier, longer run left them) and are not looked at.
    """
    if not params.split_views():
        return []
    root = Path(project_root)
    deliberate = (
        " (privacy.publish_oracle: true publishes it deliberately)"
        if params.privacy.publish_oracle
        else ""
    )
    rounds = params.federation.rounds
    leaks: list[str] = []
    for pattern, check in _CHECKS:
        for path in sorted(root.glob(pattern), key=_natural):
            relative = path.relative_to(root).as_posix()
            if not path.is_file() or not layout.is_public(relative):
                continue
            if (k := _round_of(relative)) is not None and k > rounds:
                continue
            try:
                found = list(check(path))
            except (OSError, ValueError) as exc:
                found = [f"cannot be read to check it ({exc})"]
            leaks += [f"{relative}: {what}{deliberate}" for what in found]
    return leaks


def _round_of(relative: str) -> int | None:
    """K of a round's file (``.../round-K...``), None for a run-wide file."""
    found = _ROUND.search(relative)
    return None if found is None else int(found.group(1))


_ROUND = re.compile(r"round-(\d+)")


def _natural(path: Path) -> tuple:
    """round-2 before round-10."""
    parts = path.as_posix().replace("-", "/").replace(".", "/").split("/")
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts)

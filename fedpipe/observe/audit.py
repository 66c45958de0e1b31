"""The promises every run keeps, checked on a project's files (``fedpipe audit``).

Each feature has its own tests; these are the invariants that must hold for
*every* run, whatever settings meet in it (issue 36):

- ``rows`` — every row accounted for: each row of the user's file is in a
  client's training or local-test split, in the held-out set, or dropped with a
  reason, and the numbers add up.
- ``public`` — public means public: under any DP mechanism no public file
  (git- or DVC-tracked, pushable) holds a per-client model, a per-client
  unnoised quantity, or which clients were sampled.
- ``views`` — views of this run: what ``fedpipe status``, ``doctor`` and
  ``report`` read belongs to the run ``dvc.lock`` records.
- ``cells`` — no small cell: no published count below
  ``preprocess.min_count_shown``, directly or by difference from a total
  beside it.

An invariant is one function ``check(root) -> list of messages`` in
:data:`INVARIANTS`; a check whose files are not there (a project that has not
run that far) has nothing to say. The test suite runs :func:`audit` on every
end-to-end project it makes (``tests/e2e/conftest.py``).
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpipe.config import layout
from fedpipe.core.errors import SettingError
from fedpipe.core.jsonio import read_json_or_none
from fedpipe.core.smallcells import Relation, disclosures
from fedpipe.observe.runfiles import PARAMS_YAML

__all__ = [
    "INVARIANTS",
    "AuditResult",
    "audit",
    "public_means_public",
    "rows_accounted",
    "small_cells",
    "views_of_this_run",
]

Check = Callable[[Path], list[str]]

#: ``preprocess.min_count_shown``'s default, when params.yaml does not say
DEFAULT_MIN_COUNT = 5


@dataclass(frozen=True)
class AuditResult:
    """One invariant's verdict on a project.

    Attributes
    ----------
    name : str
        The invariant (a key of :data:`INVARIANTS`).
    promise : str
        What it promises, in one line.
    violations : tuple of str
        One message per broken promise, naming the file.
    """

    name: str
    promise: str
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def _min_count(root: Path) -> int:
    import yaml

    try:
        raw = yaml.safe_load((root / PARAMS_YAML).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return DEFAULT_MIN_COUNT
    pre = raw.get("preprocess") if isinstance(raw, Mapping) else None
    value = pre.get("min_count_shown") if isinstance(pre, Mapping) else None
    return int(value) if isinstance(value, int) else DEFAULT_MIN_COUNT


def small_cells(root: Path) -> list[str]:
    """Published counts below ``preprocess.min_count_shown``, directly or by
    difference: ``data/preprocess/stats.json``, the partition's class counts,
    and the counts ``data/preprocess/transform.json`` keeps."""
    from fedpipe.data.preprocess.summary import count_cells, count_relations

    k = _min_count(root)
    found: list[str] = []
    stats = read_json_or_none(root / layout.CLIENT_STATS)
    if isinstance(stats, Mapping) and "per_client" in stats:
        where = layout.CLIENT_STATS.as_posix()
        found += [
            f"{where}: {m}"
            for m in disclosures(count_cells(stats), count_relations(stats), k)
        ]
    counts_csv = root / layout.PARTITION_REPORT_DIR / "class_counts.csv"
    if counts_csv.is_file():
        found += _class_count_cells(counts_csv, root, k)
    transform = read_json_or_none(root / layout.TRANSFORM)
    if isinstance(transform, Mapping):
        where = layout.TRANSFORM.as_posix()
        found += [f"{where}: {m}" for m in _transform_cells(transform, k)]
    return found


def _class_count_cells(path: Path, root: Path, k: int) -> list[str]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    where = path.relative_to(root).as_posix()
    found = []
    for i, row in enumerate(rows):
        cells: dict[Any, object] = {}
        for key, text in row.items():
            cells[key] = int(text) if text.lstrip("-").isdigit() else text
        cells.pop("client", None)
        parts = tuple(c for c in cells if c not in ("n_train", "n_test"))
        found += [
            f"{where}, row {i + 1} (client {row.get('client')}): {m}"
            for m in disclosures(cells, [Relation("n_train", parts)], k)
        ]
    return found


def _transform_cells(transform: Mapping[str, Any], k: int) -> list[str]:
    """Exact counts in the fit's record: a category's, the rare values', the
    held-out rows that go to "other"."""
    found = []
    columns = (transform.get("statistics") or {}).get("columns") or {}
    for name, entry in columns.items():
        if not isinstance(entry, Mapping):
            continue
        counted = {
            **{
                f"categories.{v}": n for v, n in (entry.get("categories") or {}).items()
            },
            **{f"top.{v}": n for v, n in (entry.get("top") or {}).items()},
            "<other>.rows": (entry.get("<other>") or {}).get("rows"),
            "missing": entry.get("missing"),
        }
        found += [
            f"statistics.columns.{name}.{key}: a count of {n} (fewer than {k})"
            for key, n in counted.items()
            if isinstance(n, int) and 0 < n < k
        ]
    other = (transform.get("heldout") or {}).get("other") or {}
    for name, entry in other.items():
        for key in ("rare", "unseen"):
            n = entry.get(key) if isinstance(entry, Mapping) else None
            if isinstance(n, int) and 0 < n < k:
                found.append(
                    f"heldout.other.{name}.{key}: a count of {n} (fewer than {k})"
                )
    return found


def rows_accounted(root: Path) -> list[str]:
    """Every prepared row (one per row of the user's file, or per image) held
    out, in a client's train or local-test split, or dropped with a reason,
    each exactly once (:func:`fedpipe.data.accounting.row_accounting`)."""
    from fedpipe.data.accounting import accounting_problems, row_accounting

    if not (root / layout.MANIFEST).is_file():
        return []
    if not (root / layout.PREPARED_DIR / "samples.parquet").is_file():
        return []
    where = f"{layout.MANIFEST.as_posix()} against {layout.PREPARED_DIR.as_posix()}"
    return [f"{where}: {m}" for m in accounting_problems(row_accounting(root))]


def public_means_public(root: Path) -> list[str]:
    """Under any DP mechanism, no public file holds a client's model or state,
    a per-client unnoised quantity, or which clients were sampled
    (:func:`fedpipe.observe.leaks.public_leaks`, on the params the run used)."""
    from fedpipe.config.params import ParamsError, load_params
    from fedpipe.observe.leaks import public_leaks

    if not (root / PARAMS_YAML).is_file():
        return []
    try:
        params = load_params(root / PARAMS_YAML)
    except ParamsError as exc:
        return [f"{PARAMS_YAML}: cannot be read to check the public files ({exc})"]
    return public_leaks(root, params)


def views_of_this_run(root: Path) -> list[str]:
    """What ``fedpipe status``, ``doctor`` and ``report`` read belongs to the
    run ``dvc.lock`` records (:func:`fedpipe.observe.runfiles.stale_views`)."""
    from fedpipe.observe.runfiles import stale_views

    if not (root / "dvc.lock").is_file():
        return []
    return stale_views(root)


#: name -> (promise, check), in the order ``fedpipe audit`` shows them
INVARIANTS: dict[str, tuple[str, Check]] = {
    "rows": (
        "every row is held out, in a client's split, or dropped with a reason, "
        "exactly once",
        rows_accounted,
    ),
    "public": (
        "under DP no public file holds a client's model or state, a per-client "
        "unnoised quantity, or which clients were sampled",
        public_means_public,
    ),
    "views": (
        "status, doctor and report read only the files of the run dvc.lock records",
        views_of_this_run,
    ),
    "cells": (
        "no published count below preprocess.min_count_shown, directly or by "
        "difference",
        small_cells,
    ),
}


def audit(root: Path | str, only: tuple[str, ...] = ()) -> list[AuditResult]:
    """Every invariant's verdict on the project at ``root`` (or those named
    in ``only``), in :data:`INVARIANTS` order."""
    root = Path(root)
    unknown = sorted(set(only) - set(INVARIANTS))
    if unknown:
        raise SettingError(
            f"unknown invariant(s) {', '.join(unknown)}; known: {', '.join(INVARIANTS)}"
        )
    return [
        AuditResult(name, promise, tuple(_checked(check, root)))
        for name, (promise, check) in INVARIANTS.items()
        if not only or name in only
    ]


def _checked(check: Check, root: Path) -> list[str]:
    """``check(root)``; a file it cannot read (truncated, not what it should
    be) is a broken promise too: nothing shows the promise holds."""
    try:
        return check(root)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        return [f"cannot be checked: {type(exc).__name__}: {exc}"]

"""Every row accounted for: where each row of the user's data went.

The ingest writes one prepared sample per row of the file (``samples.parquet``;
a row it could not read keeps its place with a non-``ok`` status, and the
validation stage stops the run on it), and the partition deals every prepared
sample to exactly one place: the held-out test split, one client's local train
or local test split, or the list of samples dropped as repeats
(``dropped_duplicates``, by ``data.dedupe``). :func:`row_accounting` reads both
files and counts each place; :func:`accounting_problems` says where the counts
do not add up. :func:`dropped_line` is the one sentence the console, ``fedpipe
status``, the report and the doctor show for the drop.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedpipe.config import layout
from fedpipe.config.dedupe import DROP_REASONS

__all__ = [
    "accounting_problems",
    "dropped_line",
    "manifest_rows",
    "placement_line",
    "row_accounting",
]


def drop_reason(manifest: Mapping[str, Any]) -> str:
    """Why the manifest's ``dropped_duplicates`` were dropped (the ``data.dedupe``
    mode that dropped them; a manifest without ``dedupe`` was made by
    ``content``, the only mode that dropped before the modes had names)."""
    mode = str(manifest.get("dedupe") or "content")
    return DROP_REASONS.get(mode, f"data.dedupe: {mode}")


def manifest_rows(manifest: Mapping[str, Any]) -> int:
    """The prepared samples the partition dealt out: held out, every client's
    train and test split, and those dropped."""
    return (
        len(manifest.get("heldout") or [])
        + sum(
            len(c.get("train") or []) + len(c.get("test") or [])
            for c in manifest.get("clients") or []
        )
        + len(manifest.get("dropped_duplicates") or [])
    )


def dropped_line(manifest: Mapping[str, Any]) -> str | None:
    """``"971 of 1309 rows (74.2 %) dropped before the held-out split: repeated
    content (data.dedupe: content)"``; ``None`` when none was dropped."""
    dropped = len(manifest.get("dropped_duplicates") or [])
    if not dropped:
        return None
    total = manifest_rows(manifest)
    return (
        f"{dropped} of {total} rows ({100 * dropped / max(total, 1):.1f} %) dropped "
        f"before the held-out split: {drop_reason(manifest)}"
    )


def placement_line(manifest: Mapping[str, Any]) -> str:
    """``"1309 rows: 262 held out, 838 local train, 209 local test; none dropped
    (data.dedupe)"`` (or the :func:`dropped_line`)."""
    clients = manifest.get("clients") or []
    train = sum(len(c.get("train") or []) for c in clients)
    test = sum(len(c.get("test") or []) for c in clients)
    return (
        f"{manifest_rows(manifest)} rows: {len(manifest.get('heldout') or [])} "
        f"held out, {train} local train, {test} local test; "
        + (dropped_line(manifest) or "none dropped (data.dedupe)")
    )


def row_accounting(project_root: Path | str) -> dict[str, Any]:
    """Where each row of the project's data went, counted.

    Parameters
    ----------
    project_root : Path or str
        The project directory (``data/prepared/samples.parquet`` and
        ``data/partition/manifest.json`` under it).

    Returns
    -------
    dict
        ``rows`` (samples the ingest wrote: one per row of the user's file, or
        per image), ``problems`` (of those, rows the ingest could not read, by
        status; the validation stage stops the run on any), ``heldout``,
        ``clients`` (per client: ``client``, ``train``, ``test``), ``train`` and
        ``test`` (their sums), ``dropped`` (reason -> count; empty when none),
        ``accounted`` (held out + train + test + dropped), ``unknown`` (ids in the
        manifest that are not prepared samples), ``repeated`` (ids dealt to more
        than one place), ``missing`` (prepared samples dealt nowhere) and
        ``adds_up`` (whether every row is in exactly one place).

    Raises
    ------
    FileNotFoundError
        If either file is missing (the data stages have not run).
    """
    import pyarrow.parquet as pq

    from fedpipe.core.jsonio import read_json

    root = Path(project_root)
    samples = pq.read_table(
        root / layout.PREPARED_DIR / "samples.parquet", columns=["sample_id", "status"]
    ).to_pandas()
    manifest = read_json(root / layout.MANIFEST)
    ids = samples["sample_id"].astype(str).tolist()
    problems = Counter(s for s in samples["status"].astype(str) if s != "ok")
    dealt: Counter[str] = Counter()
    heldout = [str(i) for i in manifest.get("heldout") or []]
    dealt.update(heldout)
    clients = []
    for entry in manifest.get("clients") or []:
        train = [str(i) for i in entry.get("train") or []]
        test = [str(i) for i in entry.get("test") or []]
        dealt.update(train)
        dealt.update(test)
        clients.append(
            {"client": int(entry["client"]), "train": len(train), "test": len(test)}
        )
    dropped_ids = [str(i) for i in manifest.get("dropped_duplicates") or []]
    dealt.update(dropped_ids)
    known = set(ids)
    out: dict[str, Any] = {
        "rows": len(ids),
        "problems": dict(sorted(problems.items())),
        "heldout": len(heldout),
        "clients": clients,
        "train": sum(c["train"] for c in clients),
        "test": sum(c["test"] for c in clients),
        "dropped": {drop_reason(manifest): len(dropped_ids)} if dropped_ids else {},
        "accounted": sum(dealt.values()),
        "unknown": sorted(i for i in dealt if i not in known),
        "repeated": sorted(i for i, n in dealt.items() if n > 1),
        "missing": sorted(i for i in ids if i not in dealt),
    }
    out["adds_up"] = not accounting_problems(out)
    return out


def accounting_problems(accounting: Mapping[str, Any]) -> list[str]:
    """One line per way ``accounting`` (:func:`row_accounting`) does not add
    up: held out + train + test + dropped must equal the rows ingested, each
    row in exactly one place. Empty when every row is accounted for."""
    out = []
    parts = (
        accounting["heldout"]
        + accounting["train"]
        + accounting["test"]
        + sum(accounting["dropped"].values())
    )
    if parts != accounting["rows"]:
        out.append(
            f"{accounting['rows']} rows ingested but {parts} placed (held out "
            f"{accounting['heldout']}, train {accounting['train']}, local test "
            f"{accounting['test']}, dropped {sum(accounting['dropped'].values())})"
        )
    for key, what in (
        ("missing", "rows placed nowhere"),
        ("repeated", "rows placed more than once"),
        ("unknown", "ids in the manifest that are not ingested rows"),
    ):
        ids = accounting[key]
        if ids:
            shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
            out.append(f"{len(ids)} {what} (e.g. {shown})")
    return out

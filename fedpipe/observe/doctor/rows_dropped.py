"""Rows of the user's data the partition dropped as repeats (``data.dedupe``).

A drop is always said on the console and in ``fedpipe status``; the doctor
names it when it is more than :data:`SHARE` of the rows, since a table whose
people share feature values (sex, class, age band) loses most of them to a
dedupe by content, and what the model is then trained and tested on is not the
user's table.
"""

from __future__ import annotations

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import knobs
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles

#: dropped share of the rows above this: a finding (one copied image in a
#: hundred is a folder's odd duplicate; more changes what the run measures)
SHARE = 0.01


def check_rows_dropped(run: RunFiles) -> list[Finding]:
    """More than :data:`SHARE` of the rows dropped before the held-out split."""
    from fedpipe.data.accounting import dropped_line, manifest_rows

    manifest = run.manifest
    if not manifest:
        return []
    dropped = len(manifest.get("dropped_duplicates") or [])
    total = manifest_rows(manifest)
    if not total or dropped / total <= SHARE:
        return []
    table = (run.schema or {}).get("source") == "table"
    fix = (
        "a table's rows are distinct people unless an id says otherwise: set "
        "data.dedupe: none (or auto) to keep them, row to drop only whole rows "
        "repeated with their label"
        if table
        else "check the data for copied files; data.dedupe: none keeps them "
        "(a repeat across the held-out split is then refused)"
    )
    return [
        Finding(
            code=codes.ROWS_DROPPED,
            severity="warning",
            title=f"{dropped} of {total} rows dropped as repeats before training",
            evidence=[
                f"data/partition/manifest.json: {dropped_line(manifest)}",
                "e.g. " + ", ".join(str(i) for i in manifest["dropped_duplicates"][:5]),
            ],
            fix=f"{fix}; then rerun from the partition (now "
            + knobs(run, "data.dedupe")
            + ")",
            side="data",
        )
    ]

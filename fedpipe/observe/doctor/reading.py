"""What the doctor could not read, and a run read as far as it can be.

:func:`fedpipe.observe.runfiles.load_run` keeps a part (all health records, all round
metrics) empty when one of its files cannot be read. The doctor should diagnose a
run stopped mid-round or partly written anyway: :func:`readable_run` reads such
a part again file by file, keeping every file that parses, and says which file
could not be read and why. :func:`records_finding` turns those notes (and the
checks that could not run on an older record format) into one info finding.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from fedpipe.config import layout
from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import (
    FEATURES_NPY,
    PARAMS_YAML,
    RunFiles,
    round_files,
    rounds_text,
)

#: the per-round parts, each a folder of round-K files, and how to read one
_PER_ROUND: dict[str, tuple[Path, str]] = {
    "rounds": (layout.ROUND_METRICS_DIR, ".json"),
    "health": (layout.HEALTH_METRICS_DIR, ".json"),
    "clients": (layout.CLIENT_METRICS_DIR, ".csv"),
}

#: where a part that is one file lives, to name it in a note
_FILES = {
    "params": PARAMS_YAML,
    "config": PARAMS_YAML,
    "schema": layout.PREPARED_SCHEMA,
    "manifest": layout.MANIFEST,
    "columns": FEATURES_NPY,
}


def why(exc: BaseException) -> str:
    """``"JSONDecodeError: Expecting value: line 1 ..."``: an error in one line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _read_record(path: Path) -> dict[str, Any]:
    value = json.loads(path.read_text())
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object but {type(value).__name__}")
    return value


def _read_table(path: Path) -> Any:
    import pandas as pd

    return pd.read_csv(path)


def _per_file(root: Path, part: str, notes: list[str]) -> dict[int, Any]:
    folder, suffix = _PER_ROUND[part]
    reader: Callable[[Path], Any] = _read_table if suffix == ".csv" else _read_record
    out = {}
    for k, path in round_files(root, folder, suffix).items():
        try:
            out[k] = reader(path)
        except Exception as exc:  # any unreadable file: say which and why
            notes.append(f"{folder / path.name}: not read ({why(exc)})")
    return out


def readable_run(run: RunFiles) -> tuple[RunFiles, list[str]]:
    """``run`` with its per-round parts read file by file where a file failed,
    and one note per file or part that could not be read."""
    notes: list[str] = []
    parts: dict[str, Any] = {}
    for part in _PER_ROUND:
        if part in run.errors:
            parts[part] = _per_file(run.root, part, notes)
    for part, exc in run.errors.items():
        if part in _PER_ROUND:
            continue
        where = _FILES.get(part, part)
        notes.append(f"{where}: not read ({why(exc)})")
    stopped = sorted(
        set(parts.get("health", run.health)) - set(parts.get("rounds", run.rounds))
    )
    last = max(parts.get("rounds", run.rounds), default=0)
    after = [k for k in stopped if k > last]
    if after:
        notes.append(
            f"{rounds_text(after)}: a health record but no metrics/rounds file (the "
            "run stopped during or right after it)"
        )
    errors = {p: e for p, e in run.errors.items() if p not in _PER_ROUND}
    return replace(run, errors=errors, **parts), notes


def records_finding(notes: Sequence[str]) -> list[Finding]:
    """One info finding listing what could not be read or checked ([] if none)."""
    if not notes:
        return []
    return [
        Finding(
            code=codes.RECORDS_UNREADABLE,
            severity="info",
            title="some of the run's records could not be read or checked; the "
            "findings come from the rest",
            evidence=list(notes),
            fix="rerun the rounds concerned (fedpipe run) or restore the files; a "
            "record of an older fedpipe lacks fields the newer checks read",
            side="run records",
        )
    ]

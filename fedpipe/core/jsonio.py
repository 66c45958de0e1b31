"""JSON files with deterministic bytes (sorted keys, fixed indent), atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedpipe.core import atomic


def write_json(path: Path, payload: Any) -> None:
    """Write JSON deterministically (sorted keys, fixed indent), atomically and
    durably (:mod:`fedpipe.core.atomic`)."""
    atomic.write_text(path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def read_json(path: Path) -> Any:
    """Read a JSON file written by :func:`write_json`."""
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: not found; run the stage that writes it first"
        )
    return json.loads(path.read_text())


def read_json_or_none(path: Path) -> Any:
    """A JSON file's value, or None when it is missing or not valid JSON (for
    readers that report what is there and say nothing of what is not)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None

"""fedpipe's own records about a stage, beside DVC's: the validation summary,
the partition manifest, the fitted transform and each round's metrics; and the
round stages' names."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fedpipe.config import layout
from fedpipe.core.jsonio import read_json_or_none

__all__ = ["ROUND_PREFIX", "round_of", "stage_info"]

ROUND_PREFIX = f"{layout.ROUND_STAGE}@"


def round_of(stage: str) -> int | None:
    """K for the stage ``round@K``; None for any other stage."""
    if stage.startswith(ROUND_PREFIX) and stage[len(ROUND_PREFIX) :].isdigit():
        return int(stage[len(ROUND_PREFIX) :])
    return None


def stage_info(
    root: Path, stage: str, md5_of: Callable[[str], str | None]
) -> dict[str, Any]:
    """What fedpipe's own records add to a stage: validation, partition, clients.

    Parameters
    ----------
    root : Path
        The project directory.
    stage : str
        A stage name as dvc.lock records it.
    md5_of : callable
        The md5 of a project path (DVC's), for the manifest.
    """
    if stage == "validate":
        summary = read_json_or_none(root / layout.VALIDATION_DIR / "summary.json")
        if not isinstance(summary, Mapping):
            return {"validation": None}
        return {
            "validation": {
                "success": summary.get("success"),
                "n_rows": summary.get("n_rows"),
                "n_expectations": summary.get("n_expectations"),
                "warnings": summary.get("warnings", []),
                "failures": summary.get("failures", []),
            }
        }
    if stage == "partition":
        manifest = read_json_or_none(root / layout.MANIFEST)
        if not isinstance(manifest, Mapping):
            return {"manifest": None}
        clients = manifest.get("clients") or []
        return {
            "manifest": {
                "path": layout.MANIFEST.as_posix(),
                "md5": md5_of(layout.MANIFEST.as_posix()),
                "method": manifest.get("method"),
                "clients": manifest.get("n_clients", len(clients)),
                "train_sizes": [len(c.get("train", [])) for c in clients],
                "test_sizes": [len(c.get("test", [])) for c in clients],
                "heldout": len(manifest.get("heldout") or []),
                "dropped_duplicates": len(manifest.get("dropped_duplicates") or []),
                "params": manifest.get("params"),
            }
        }
    if stage == "preprocess":
        return {"transform": _transform_info(root, md5_of)}
    k = round_of(stage)
    if k is not None:
        metrics = read_json_or_none(root / layout.round_metrics(k))
        if not isinstance(metrics, Mapping):
            return {"clients_selected": None}
        accuracy = (metrics.get("global") or {}).get("accuracy")
        out = {
            "clients_selected": metrics.get("clients_selected"),
            "global_accuracy": accuracy,
        }
        if "malicious" in metrics:  # a planted attack (attack.*)
            out["malicious"] = metrics["malicious"]
        return out
    return {}


def _transform_info(
    root: Path, md5_of: Callable[[str], str | None]
) -> dict[str, Any] | None:
    """What the preprocess stage fitted (``data/preprocess/transform.json``)."""
    raw = read_json_or_none(root / layout.TRANSFORM)
    if not isinstance(raw, Mapping):
        return None
    settings = raw.get("settings") or {}
    stats = raw.get("statistics") or {}
    return {
        "path": layout.TRANSFORM.as_posix(),
        "md5": md5_of(layout.TRANSFORM.as_posix()),
        "kind": raw.get("kind"),
        "numeric": settings.get("numeric"),
        "fit": settings.get("fit"),
        "missing": settings.get("missing"),
        "columns": len(raw.get("columns") or []),
        "indicators": list(raw.get("indicators") or []),
        "encoded": [
            f"{e.get('column')} ({e.get('kind')}, {len(e.get('vocabulary') or [])})"
            for e in raw.get("encodings") or []
            if isinstance(e, Mapping)
        ],
        "clients": stats.get("clients"),
        "rows": stats.get("rows"),
    }

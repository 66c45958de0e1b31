"""The files a validation writes: ``summary.json``, ``result.json``, Data Docs."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedpipe.core import atomic
from fedpipe.data.validation.results import ValidationReport
from fedpipe.data.validation.spec import Outcome

_DOCS_DIRNAME = "data_docs"
_SUMMARY_FILE = "summary.json"
_RESULT_FILE = "result.json"


def prepare_report_dir(report_dir: Path) -> Path:
    """Create ``report_dir``, remove files this module wrote there before.

    Returns
    -------
    pathlib.Path
        The Data Docs directory (``report_dir / "data_docs"``), not yet created.
    """
    report_dir.mkdir(parents=True, exist_ok=True)
    for name in (_SUMMARY_FILE, _RESULT_FILE):
        (report_dir / name).unlink(missing_ok=True)
    docs_dir = report_dir / _DOCS_DIRNAME
    if docs_dir.is_dir():
        shutil.rmtree(docs_dir)
    return docs_dir.resolve()


def write_reports(
    report_dir: Path, report: ValidationReport, outcomes: Sequence[Outcome]
) -> None:
    """Write ``summary.json`` (deterministic) and ``result.json`` (full GX)."""
    summary = json.dumps(report.to_dict(), sort_keys=True, indent=2) + "\n"
    atomic.write_text(report_dir / _SUMMARY_FILE, summary)
    full = {
        "success": report.success,
        "checkpoints": {o.name: _checkpoint_json(o) for o in outcomes},
    }
    text = json.dumps(_json_safe(full), sort_keys=True, indent=2, allow_nan=False)
    atomic.write_text(report_dir / _RESULT_FILE, text + "\n")


def _checkpoint_json(outcome: Outcome) -> dict[str, Any]:
    """Checkpoint name, success, run id and each suite result's to_json_dict()."""
    result = outcome.checkpoint_result
    return {
        "name": result.name,
        "success": bool(result.success),
        "run_id": str(result.run_id),
        "validation_results": [r.to_json_dict() for r in result.run_results.values()],
    }


def _json_safe(value: Any) -> Any:
    """Replace NaN/inf (which GX leaves in results) with None, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value

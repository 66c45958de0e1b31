"""Rounds without a health record, whose clients and layers went unchecked."""

from __future__ import annotations

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, rounds_text


def check_health_present(run: RunFiles) -> list[Finding]:
    """Rounds without a health record: the per-client and per-layer checks skip them."""
    missing = sorted(set(run.rounds) - set(run.health))
    if not missing:
        return []
    return [
        Finding(
            code=codes.HEALTH_RECORDS_MISSING,
            severity="info",
            title="some rounds have no health record; their clients and layers "
            "were not checked",
            evidence=[f"no metrics/health/round-K.json for {rounds_text(missing)}"],
            fix="rerun those rounds with a fedpipe that writes metrics/health",
            rounds=missing,
            side="run records",
        )
    ]

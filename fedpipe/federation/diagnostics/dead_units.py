"""The dead-unit probe of the new global model."""

from __future__ import annotations

from typing import Any

from fedpipe.federation.diagnostics.base import FinishedRound
from fedpipe.federation.health import json_ready
from fedpipe.model.probe import PROBE_SAMPLES, dead_unit_shares


class DeadUnits:
    """``dead_units``: per ReLU layer of the new global model, the share of
    units whose output is 0 on every row of the held-out set's first
    :data:`~fedpipe.model.probe.PROBE_SAMPLES` (:func:`dead_unit_shares`).
    Nothing for a round that did not complete or a model without ReLU layers.
    Reads the runner's model, which holds the new global weights."""

    def __repr__(self) -> str:
        return "DeadUnits()"

    def __call__(
        self, finished: FinishedRound, health: dict[str, Any]
    ) -> dict[str, Any]:
        if not finished.completed:
            return health
        probe = finished.inputs.data.x_test_lazy[:PROBE_SAMPLES]
        shares = dead_unit_shares(finished.runner.model, probe)
        if shares is None:
            return health
        return {
            **health,
            "dead_units": json_ready({str(k): v for k, v in shares.items()}),
        }

"""What the round's cross-cutting steps add to its health record."""

from __future__ import annotations

from typing import Any

from fedpipe.federation.diagnostics.base import FinishedRound


class StepNotes:
    """Each step's :meth:`~fedpipe.federation.steps.RoundStep.health` in turn,
    for the clients whose results came back (an attack names its attackers,
    secure aggregation says the server saw no update alone)."""

    def __repr__(self) -> str:
        return "StepNotes()"

    def __call__(
        self, finished: FinishedRound, health: dict[str, Any]
    ) -> dict[str, Any]:
        clients = [r.client for r in finished.results]
        for step in finished.steps:
            health = step.health(finished.inputs.round, clients, health)
        return health

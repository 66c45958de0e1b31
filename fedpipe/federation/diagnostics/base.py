"""The finished round a diagnostic sees, and the health record made of their parts."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from fedpipe.data.splits import FederatedData
    from fedpipe.federation.records import RoundRecord
    from fedpipe.federation.steps import RoundStep
    from fedpipe.model.jobs import ClientResult
    from fedpipe.model.training import ModelRunner
    from fedpipe.strategy import Strategy
    from fedpipe.strategy.aggregate import Weights


class RoundStart(Protocol):
    """What of a round's inputs (:class:`fedpipe.federation.round.RoundInputs`,
    which imports this package) its diagnostics read."""

    @property
    def round(self) -> int: ...
    @property
    def global_weights(self) -> Weights: ...
    @property
    def data(self) -> FederatedData: ...
    @property
    def strategy(self) -> Strategy: ...


@dataclass(frozen=True)
class FinishedRound:
    """A round as its diagnostics see it, once it is over (or has stopped).

    Attributes
    ----------
    inputs : RoundStart
        What the round started from (its ``RoundInputs``).
    runner : ModelRunner
        The server's model; after a completed round it holds the new global
        weights (the evaluation set them).
    results : sequence of ClientResult
        The replies that came back, as the server received them (an attack's
        forged updates in place), in client order.
    excluded : mapping of int to str
        Every client left out of aggregation, and why.
    steps : sequence of RoundStep
        The round's cross-cutting steps, the strategy (wrapped) last.
    weights : list of ndarray or None
        The new global weights; None when aggregation refused the round or the
        round stopped short of clients.
    record : RoundRecord or None
        The round's record (None when it did not complete).
    probs, losses : ndarray or None
        The new global model's held-out probabilities and per-sample losses.
    """

    inputs: RoundStart = field(repr=False)
    runner: ModelRunner = field(repr=False)
    results: Sequence[ClientResult] = field(repr=False)
    excluded: Mapping[int, str]
    steps: Sequence[RoundStep] = ()
    weights: Weights | None = field(default=None, repr=False)
    record: RoundRecord | None = None
    probs: np.ndarray | None = field(default=None, repr=False)
    losses: np.ndarray | None = field(default=None, repr=False)

    @property
    def completed(self) -> bool:
        """Whether the round produced new global weights."""
        return self.weights is not None


class RoundDiagnostic(Protocol):
    """What sees a finished round and returns its part of the health record."""

    def __call__(
        self, finished: FinishedRound, health: dict[str, Any]
    ) -> dict[str, Any]:
        """The health record with this diagnostic's part laid over ``health``
        (the parts of the diagnostics before it)."""


def health_record(
    finished: FinishedRound, diagnostics: Sequence[RoundDiagnostic]
) -> tuple[dict[str, Any], float]:
    """The round's health record (JSON-ready) from ``diagnostics`` in order,
    and the seconds they took (logged, not versioned)."""
    started = time.perf_counter()
    health: dict[str, Any] = {}
    for diagnostic in diagnostics:
        health = diagnostic(finished, health)
    return health, time.perf_counter() - started

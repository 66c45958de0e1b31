"""What a finished round reports about itself, as callbacks the round calls.

:func:`fedpipe.federation.round.run_round` trains, aggregates, evaluates and
records; then each of its diagnostics (:data:`ROUND_DIAGNOSTICS` unless the
caller passes others) sees the finished round (:class:`FinishedRound`: its
inputs, the results the server received, who was left out, the new weights,
the record) and returns its part of the round's health record, in the manner of
pfl-research's callbacks. One diagnostic a file:

* :class:`~fedpipe.federation.diagnostics.updates.UpdateHealth`: how the
  clients' updates relate, layer by layer
  (:func:`fedpipe.federation.health.round_health`), and the weight sum the
  doctor expects;
* :class:`~fedpipe.federation.diagnostics.dead_units.DeadUnits`: the share of
  dead ReLU units of the new global model (:mod:`fedpipe.model.probe`);
* :class:`~fedpipe.federation.diagnostics.step_notes.StepNotes`: what each of
  the round's steps adds (the attackers, secure aggregation's note).
"""

from fedpipe.federation.diagnostics.base import (
    FinishedRound,
    RoundDiagnostic,
    health_record,
)
from fedpipe.federation.diagnostics.dead_units import DeadUnits
from fedpipe.federation.diagnostics.step_notes import StepNotes
from fedpipe.federation.diagnostics.updates import UpdateHealth

ROUND_DIAGNOSTICS: tuple[RoundDiagnostic, ...] = (
    UpdateHealth(),
    DeadUnits(),
    StepNotes(),
)
"""A round's diagnostics, in the order their parts are laid over each other."""

__all__ = [
    "ROUND_DIAGNOSTICS",
    "DeadUnits",
    "FinishedRound",
    "RoundDiagnostic",
    "StepNotes",
    "UpdateHealth",
    "health_record",
]

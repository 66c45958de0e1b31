"""The run doctor: read a run's recorded files, name what went wrong, suggest a fix.

:func:`diagnose` reads what the pipeline wrote (``metrics/rounds``,
``metrics/health``, ``metrics/clients``, ``params.yaml``, the prepared data and the
partition manifest; :func:`fedpipe.observe.runfiles.load_run`) and returns
:class:`Finding` s, most important first: root causes (labels the loss cannot take,
table columns left on scales far apart, a learning rate that blows up, aggregation
weights that do not sum to 1, an outlier client, normalization statistics that
disagree, client drift) before the symptoms they cause (a global loss that rises
while accuracy holds). Each finding carries its evidence (rounds, layers, clients,
numbers), the side its cause is on (:data:`SIDES`: client training, server
aggregation, data, ...) and a fix naming that side's ``params.yaml`` keys with their
current values. Files it cannot read and checks that cannot run on a record are
listed, never raised (:mod:`~fedpipe.observe.doctor.reading`).

One check per module (:mod:`~fedpipe.observe.doctor.labels`,
:mod:`~fedpipe.observe.doctor.inputs`,
:mod:`~fedpipe.observe.doctor.learning_rate`,
:mod:`~fedpipe.observe.doctor.aggregation`, :mod:`~fedpipe.observe.doctor.outliers`,
:mod:`~fedpipe.observe.doctor.attackers`,
:mod:`~fedpipe.observe.doctor.norm_statistics`, :mod:`~fedpipe.observe.doctor.drift`,
:mod:`~fedpipe.observe.doctor.loss_rising`, :mod:`~fedpipe.observe.doctor.not_learning`,
:mod:`~fedpipe.observe.doctor.health_present`, :mod:`~fedpipe.observe.doctor.failures`,
:mod:`~fedpipe.observe.doctor.privacy`, :mod:`~fedpipe.observe.doctor.server_step`,
:mod:`~fedpipe.observe.doctor.collapse`, :mod:`~fedpipe.observe.doctor.predictions`,
:mod:`~fedpipe.observe.doctor.dead_units`,
:mod:`~fedpipe.observe.doctor.rare_classes`,
:mod:`~fedpipe.observe.doctor.rows_dropped`), each with its thresholds as named
constants and the reason for their values. They are set so that a healthy run (the
default: small_cnn, IID, 10 clients, lr 0.05, 10 rounds) has no findings, and each
symptom produced on purpose in ``tests/test_doctor.py`` is found. The finding codes
are in :mod:`~fedpipe.observe.doctor.codes`; :mod:`~fedpipe.observe.doctor.findings`
ranks and explains findings, :mod:`~fedpipe.observe.doctor.format` prints them.
"""

from __future__ import annotations

from pathlib import Path

from fedpipe.config import layout
from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.aggregation import check_aggregation, expected_weight_sum
from fedpipe.observe.doctor.attackers import check_attackers
from fedpipe.observe.doctor.base import Check, robust_z
from fedpipe.observe.doctor.collapse import check_collapse
from fedpipe.observe.doctor.dead_units import check_dead_units
from fedpipe.observe.doctor.drift import check_drift
from fedpipe.observe.doctor.failures import check_failures
from fedpipe.observe.doctor.findings import (
    EXPLAINS,
    PRIORITY,
    SEVERITIES,
    SIDES,
    Finding,
    exit_code,
    explain,
    rank,
)
from fedpipe.observe.doctor.format import format_markdown, format_text
from fedpipe.observe.doctor.health_present import check_health_present
from fedpipe.observe.doctor.inputs import check_inputs
from fedpipe.observe.doctor.labels import check_labels
from fedpipe.observe.doctor.learning_rate import check_learning_rate
from fedpipe.observe.doctor.loss_rising import check_loss_rising
from fedpipe.observe.doctor.norm_statistics import check_norm_statistics
from fedpipe.observe.doctor.not_learning import check_not_learning
from fedpipe.observe.doctor.outliers import check_outliers, outlier_rounds
from fedpipe.observe.doctor.predictions import check_predictions
from fedpipe.observe.doctor.privacy import check_privacy
from fedpipe.observe.doctor.rare_classes import (
    check_majority_class,
    check_under_training,
)
from fedpipe.observe.doctor.reading import readable_run, records_finding, why
from fedpipe.observe.doctor.rows_dropped import check_rows_dropped
from fedpipe.observe.doctor.server_step import check_server_step
from fedpipe.observe.runfiles import RunFiles, load_run

__all__ = [
    "CHECKS",
    "EXPLAINS",
    "PRIORITY",
    "SEVERITIES",
    "SIDES",
    "Check",
    "Finding",
    "check_aggregation",
    "check_attackers",
    "check_collapse",
    "check_dead_units",
    "check_drift",
    "check_failures",
    "check_health_present",
    "check_inputs",
    "check_labels",
    "check_learning_rate",
    "check_loss_rising",
    "check_majority_class",
    "check_norm_statistics",
    "check_not_learning",
    "check_outliers",
    "check_predictions",
    "check_privacy",
    "check_rows_dropped",
    "check_server_step",
    "check_under_training",
    "codes",
    "diagnose",
    "exit_code",
    "expected_weight_sum",
    "explain",
    "format_markdown",
    "format_text",
    "outlier_rounds",
    "rank",
    "robust_z",
]

CHECKS: tuple[Check, ...] = (
    check_labels,
    check_rows_dropped,
    check_inputs,
    check_server_step,
    check_learning_rate,
    check_aggregation,
    check_attackers,
    check_outliers,
    check_norm_statistics,
    check_drift,
    check_privacy,
    check_loss_rising,
    check_not_learning,
    check_collapse,
    check_predictions,
    check_majority_class,
    check_under_training,
    check_dead_units,
    check_health_present,
    check_failures,
)


def diagnose(root: Path | RunFiles) -> list[Finding]:
    """Findings about the run under ``root``, most important first.

    What cannot be read (a truncated or garbage file, a part of the run missing)
    or checked (a record of an older format without the fields a check reads) does
    not stop the diagnosis: the other files and checks still give their findings,
    and one info finding (``records-unreadable``) lists each file and check left
    out and why.

    Parameters
    ----------
    root : Path or RunFiles
        The project directory, or its files already read
        (:func:`fedpipe.observe.runfiles.load_run`).

    Raises
    ------
    FileNotFoundError
        If the run has no recorded round (no file in ``metrics/rounds`` or
        ``metrics/health``, readable or not).
    """
    run = root if isinstance(root, RunFiles) else load_run(Path(root))
    run, notes = readable_run(run)
    if not run.rounds and not run.health and not notes:
        raise FileNotFoundError(
            f"{run.root / layout.ROUND_METRICS_DIR}: no round-K.json; run the pipeline "
            "(fedpipe run) before asking the doctor"
        )
    findings: list[Finding] = []
    for check in CHECKS:
        try:
            findings += check(run)
        except Exception as exc:  # an older or partial record: say so, go on
            notes.append(f"check {check.__name__} could not run: {why(exc)}")
    return rank(explain([*findings, *records_finding(notes)]))

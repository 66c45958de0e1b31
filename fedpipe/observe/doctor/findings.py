"""What the doctor reports: :class:`Finding`, its severities, and their order.

:func:`explain` demotes a finding that another present finding explains (see
:data:`EXPLAINS`); :func:`rank` orders findings errors first and root causes
before the symptoms they cause (:data:`PRIORITY`); :func:`exit_code` turns them
into the CLI's exit status.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from fedpipe.observe.doctor import codes

SEVERITIES = ("error", "warning", "info")

#: where a finding's cause is, so its fix names the params of that side: local
#: training (``train.*``), how the server applies the aggregate (``strategy.*``,
#: ``faults.aggregation_weight_sum``), the data itself, how it is split
#: (``partition.*``), the clients as participants (failures, attackers:
#: ``federation.*``, ``attack.*``), differential privacy (``privacy.*``); and the
#: run's own records (files missing or unreadable)
SIDES = (
    "client training",
    "server aggregation",
    "data",
    "partition",
    "clients",
    "privacy",
    "run records",
)

#: root causes before the symptoms they cause (used after severity); a code not
#: listed ranks at 8
PRIORITY = {
    codes.LABELS_OUTSIDE_LOSS_RANGE: 0,
    codes.LEARNING_RATE_TOO_HIGH: 1,
    codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED: 2,
    codes.CLIENTS_AGAINST_FEDERATION: 3,
    codes.CLIENT_UPDATE_OUTLIER: 3,
    codes.NORM_STATISTICS_DISAGREE: 4,
    codes.CLIENT_DRIFT: 5,
    codes.LOSS_RISING_ACCURACY_HOLDS: 6,
    codes.NOT_LEARNING: 7,
    codes.HEALTH_RECORDS_MISSING: 9,
    codes.RECORDS_UNREADABLE: 9,
    # the server's step, before the client learning rate it looks like: clients'
    # updates were of normal size, the server amplified them
    codes.SERVER_STEP_TOO_LARGE: 1,
    # a collapse names its likely cause and that side's knobs (train.lr when
    # local training blew up), so it goes before the learning-rate finding; a
    # root cause that explains it (labels, aggregation weights, the server's
    # step, privacy noise) demotes it to info (EXPLAINS)
    codes.ACCURACY_COLLAPSED: 0,
    codes.PREDICTIONS_CONSTANT: 6,
    codes.DEAD_UNITS: 6,
    # a model that stops at the majority class, or at a few steps a round: the
    # cause is in local training (too short, unweighted), named before the
    # symptoms that follow from it
    codes.PREDICTS_MAJORITY_CLASS: 5,
    codes.UNDER_TRAINED: 5,
    # above the learning rate: noised global weights make local training look
    # like it blows up (the fix is sigma or the clip, not train.lr)
    codes.PRIVACY_NOISE_DOMINATES: 1,
    # above the learning rate: columns 1e4 apart blow up local training at any
    # learning rate that moves the small ones (the seed case: the doctor blamed
    # train.lr on an unscaled table); after the labels only by the checks' order
    codes.INPUTS_UNSCALED: 0,
}

#: a finding on the left, when present, explains these others: they are kept but
#: demoted to info and marked as its likely consequence, so the fix a person reads
#: first is the root cause's (lowering train.lr does not cure labels of 2)
EXPLAINS: dict[str, tuple[str, ...]] = {
    codes.LABELS_OUTSIDE_LOSS_RANGE: (
        codes.NOT_LEARNING,
        codes.LEARNING_RATE_TOO_HIGH,
        codes.SERVER_STEP_TOO_LARGE,
        codes.ACCURACY_COLLAPSED,
        codes.PREDICTIONS_CONSTANT,
        codes.DEAD_UNITS,
        codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED,
        codes.CLIENT_UPDATE_OUTLIER,
        codes.CLIENT_DRIFT,
        codes.LOSS_RISING_ACCURACY_HOLDS,
    ),
    codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED: (
        codes.LEARNING_RATE_TOO_HIGH,
        codes.LOSS_RISING_ACCURACY_HOLDS,
        codes.SERVER_STEP_TOO_LARGE,
        codes.ACCURACY_COLLAPSED,
        codes.PREDICTIONS_CONSTANT,
        codes.DEAD_UNITS,
    ),
    codes.LEARNING_RATE_TOO_HIGH: (
        codes.LOSS_RISING_ACCURACY_HOLDS,
        codes.NOT_LEARNING,
        codes.PREDICTIONS_CONSTANT,
        codes.DEAD_UNITS,
    ),
    codes.CLIENT_UPDATE_OUTLIER: (codes.LOSS_RISING_ACCURACY_HOLDS,),
    codes.PRIVACY_NOISE_DOMINATES: (
        codes.LEARNING_RATE_TOO_HIGH,
        codes.NOT_LEARNING,
        codes.LOSS_RISING_ACCURACY_HOLDS,
        codes.SERVER_STEP_TOO_LARGE,
        codes.ACCURACY_COLLAPSED,
        codes.PREDICTIONS_CONSTANT,
    ),
    codes.CLIENTS_AGAINST_FEDERATION: (
        codes.CLIENT_UPDATE_OUTLIER,
        codes.LOSS_RISING_ACCURACY_HOLDS,
        codes.NOT_LEARNING,
    ),
    codes.SERVER_STEP_TOO_LARGE: (
        codes.LEARNING_RATE_TOO_HIGH,
        codes.ACCURACY_COLLAPSED,
        codes.PREDICTIONS_CONSTANT,
        codes.DEAD_UNITS,
        codes.LOSS_RISING_ACCURACY_HOLDS,
        codes.NOT_LEARNING,
    ),
    codes.ACCURACY_COLLAPSED: (
        codes.PREDICTIONS_CONSTANT,
        codes.DEAD_UNITS,
        codes.NOT_LEARNING,
        codes.LOSS_RISING_ACCURACY_HOLDS,
    ),
    codes.DEAD_UNITS: (codes.PREDICTIONS_CONSTANT, codes.NOT_LEARNING),
    # the learning rate that makes training on raw columns blow up, and what a
    # model that cannot use its small columns looks like
    codes.INPUTS_UNSCALED: (
        codes.LEARNING_RATE_TOO_HIGH,
        codes.ACCURACY_COLLAPSED,
        codes.NOT_LEARNING,
        codes.PREDICTIONS_CONSTANT,
        codes.DEAD_UNITS,
        codes.LOSS_RISING_ACCURACY_HOLDS,
    ),
}


@dataclass(frozen=True)
class Finding:
    """One thing the doctor found.

    Attributes
    ----------
    code : str
        Stable id, one of :mod:`fedpipe.observe.doctor.codes`, e.g.
        ``"loss-rising-accuracy-holds"``.
    severity : str
        ``"error" | "warning" | "info"``.
    title : str
        The line a person reads first.
    evidence : list of str
        Lines naming the rounds, layers, clients and numbers.
    fix : str
        Suggested fix, naming ``params.yaml`` keys where one applies.
    rounds : list of int
        The rounds concerned.
    side : str
        Where the cause is, one of :data:`SIDES` (``""``: not said).
    """

    code: str
    severity: str
    title: str
    evidence: list[str] = field(default_factory=list)
    fix: str = ""
    rounds: list[int] = field(default_factory=list)
    side: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return asdict(self)


def explain(findings: Sequence[Finding]) -> list[Finding]:
    """Demote findings that another present finding explains (see EXPLAINS)."""
    present = {f.code for f in findings}
    explained = {c for c in present if any(c in EXPLAINS.get(o, ()) for o in present)}
    out = []
    for f in findings:
        causes = [c for c in present if f.code in EXPLAINS.get(c, ())]
        if causes:
            # name the root cause, not a symptom that is itself explained
            roots = [c for c in causes if c not in explained] or causes
            cause = min(roots, key=lambda c: PRIORITY.get(c, 8))
            f = replace(
                f,
                severity="info",
                title=f"{f.title} (likely a consequence of {cause})",
                evidence=[*f.evidence, f"explained by the {cause} finding"],
            )
        out.append(f)
    return out


def rank(findings: Sequence[Finding]) -> list[Finding]:
    """Errors first, then warnings, then info; root causes before symptoms."""
    return sorted(
        findings,
        key=lambda f: (
            SEVERITIES.index(f.severity),
            PRIORITY.get(f.code, 8),
            f.rounds[:1] or [0],
        ),
    )


def exit_code(findings: Sequence[Finding], *, fail_on: str = "error") -> int:
    """1 if a finding is at least as severe as ``fail_on``, else 0.

    ``fail_on`` is a severity (``error``, ``warning``, ``info``) or ``never``.
    """
    if fail_on == "never":
        return 0
    worst = SEVERITIES.index(fail_on)
    return int(any(SEVERITIES.index(f.severity) <= worst for f in findings))

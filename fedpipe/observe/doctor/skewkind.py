"""Which kind of heterogeneity a run's partition has: label, feature, quantity.

Read from ``reports/partition/skew.json`` (the partition report's summary
figures, :func:`fedpipe.data.partition.diagnostics.skew_summary` and
``feature_skew``), as NIID-Bench (Li et al., ICDE 2022) names the families: the
clients differ in *which labels* they hold (``label_skew``), in *what their
inputs look like* (``feature_skew``) or in *how many rows* they hold
(``size_cv``). The drift and normalization-statistics findings say which, since
the methods made for each differ (FedProx and SCAFFOLD for label skew, FedBN for
feature skew).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedpipe.observe.runfiles import RunFiles

#: label skew (mean total-variation distance to the pool's labels) above this:
#: the clients hold different classes (an IID split of the digits sits at
#: 0.06-0.11 with 400 images a client; Dirichlet(1): 0.27-0.38)
LABEL_SKEW = 0.2
#: feature skew (the clients' mean distance from the federation's inputs, in
#: pooled standard deviations) above this, with the labels alike: the inputs
#: differ (IID digits: 0.09; noise sigma 0.2: 0.39, 0.3: 0.63; domains: 1.16)
FEATURE_SKEW = 0.3
#: ... and with label skew, above this: digits differ in ink, so label skew alone
#: moves the figure (Dirichlet(0.1): 0.54, pathological 2: 0.38, shards 2: 0.45;
#: Dirichlet(0.3) with domains: 1.25)
FEATURE_SKEW_WITH_LABELS = 0.8
#: coefficient of variation of the client sizes above this: quantity skew (IID and
#: label-skew splits: 0-0.1; quantity sigma 1: 0.5-2.4)
SIZE_CV = 0.3

KIND_NAMES = {
    "label": "label skew",
    "feature": "feature skew",
    "quantity": "quantity skew",
}


@dataclass(frozen=True)
class SkewKinds:
    """The kinds a run's partition has and the figures that say so.

    Attributes
    ----------
    kinds : tuple of str
        ``"label"``, ``"feature"``, ``"quantity"``, in that order; empty when the
        clients are alike (or ``skew.json`` is missing).
    label_skew, feature_skew, size_cv : float or None
        The figures from ``skew.json`` (``None`` when absent).
    setting : str or None
        The manifest's ``partition.feature_skew`` (``noise`` / ``domains``) when
        one was laid over the partition.
    """

    kinds: tuple[str, ...] = ()
    label_skew: float | None = None
    feature_skew: float | None = None
    size_cv: float | None = None
    setting: str | None = None

    @property
    def has_feature_skew(self) -> bool:
        """Whether the clients' inputs differ."""
        return "feature" in self.kinds

    @property
    def has_label_skew(self) -> bool:
        """Whether the clients hold different classes."""
        return "label" in self.kinds

    def names(self) -> str:
        """``"label skew and feature skew"`` (``"no skew"`` when none)."""
        names = [KIND_NAMES[k] for k in self.kinds]
        if not names:
            return "no skew"
        return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]

    def evidence(self) -> str | None:
        """One evidence line: the kinds and the figures (``None`` without
        ``skew.json``)."""
        figures = [
            f"{name} {value:.2f}"
            for name, value in (
                ("label skew", self.label_skew),
                ("feature skew", self.feature_skew),
                ("size CV", self.size_cv),
            )
            if value is not None
        ]
        if not figures:
            return None
        setting = (
            f"; partition.feature_skew: {self.setting}"
            if self.setting not in (None, "none")
            else ""
        )
        return (
            f"kind of skew: {self.names()} (skew.json: {', '.join(figures)}{setting})"
        )


def skew_kinds(run: RunFiles) -> SkewKinds:
    """The kinds of skew in ``run``'s partition, from its ``skew.json``."""
    skew = run.skew or {}
    label = _number(skew.get("label_skew"))
    feature = _number(skew.get("feature_skew"))
    size_cv = _number(skew.get("size_cv"))
    kinds = []
    labels_differ = label is not None and label > LABEL_SKEW
    if labels_differ:
        kinds.append("label")
    limit = FEATURE_SKEW_WITH_LABELS if labels_differ else FEATURE_SKEW
    if feature is not None and feature > limit:
        kinds.append("feature")
    if size_cv is not None and size_cv > SIZE_CV:
        kinds.append("quantity")
    params = (run.manifest or {}).get("params", {})
    setting = params.get("feature_skew") if isinstance(params, dict) else None
    return SkewKinds(
        kinds=tuple(kinds),
        label_skew=label,
        feature_skew=feature,
        size_cv=size_cv,
        setting=setting if isinstance(setting, str) else None,
    )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)

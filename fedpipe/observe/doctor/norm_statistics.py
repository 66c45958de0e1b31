"""(g) Normalization layers whose moving statistics the clients pull apart."""

from __future__ import annotations

import statistics

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import knobs, norm_layers
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.doctor.skewkind import skew_kinds
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: divergence of the clients' moving-statistics changes above this: the clients
#: pull the statistics in different directions (IID clients move them together,
#: D ~0.001; clients with differently scaled inputs: ~0.5)
STATS_DIVERGENCE = 0.3
#: ... and the clients' statistics spread by more than this share of their size
#: (IID ~0.001; a client population with two input scales: ~0.2)
STATS_SPREAD = 0.05
#: in at least this share of the rounds
STATS_MIN_SHARE = 0.5


def check_norm_statistics(run: RunFiles) -> list[Finding]:
    """Normalization layers whose moving statistics the clients pull apart."""
    judged = [k for k, h in run.health.items() if norm_layers(h)]
    flagged: dict[str, dict[int, tuple[float, float]]] = {}
    for k in judged:
        for layer in norm_layers(run.health[k]):
            d, spread = layer.get("stats_divergence"), layer.get("stats_spread")
            if d is None or spread is None:
                continue
            if d > STATS_DIVERGENCE and spread > STATS_SPREAD:
                flagged.setdefault(layer["name"], {})[k] = (d, spread)
    persistent = {
        name: rounds
        for name, rounds in flagged.items()
        if len(rounds) >= STATS_MIN_SHARE * len(judged)
    }
    if not persistent:
        return []
    evidence = []
    for name, rounds in persistent.items():
        ds = [v[0] for v in rounds.values()]
        spreads = [v[1] for v in rounds.values()]
        evidence.append(
            f"{name}: in {rounds_text(sorted(rounds))} the clients' moving-statistics "
            f"changes diverge {fmt(min(ds), 3)}-{fmt(max(ds), 3)} and the clients' "
            f"statistics differ by {fmt(min(spreads), 2)}-{fmt(max(spreads), 2)} of "
            "their size"
        )
    gaps = [
        h["gap"]["loss"]
        for h in run.health.values()
        if h.get("gap", {}).get("loss") is not None
    ]
    if gaps:
        evidence.append(
            f"global model on client tests minus local models: loss "
            f"{statistics.mean(gaps):+.3g} on average"
        )
    kinds = skew_kinds(run)
    kind_line = kinds.evidence()
    if kind_line is not None:
        evidence.append(kind_line)
    if kinds.has_label_skew and not kinds.has_feature_skew:
        cause = (
            "the clients hold different classes (label skew) and their inputs "
            "are alike, so the statistics differ with the classes: FedBN's local "
            "batch norm is made for differing inputs and helps less here; correct "
            "the label skew's drift (strategy.name: fedprox or scaffold) or build "
            "without batch norm (model.batch_norm: false). Now "
            + knobs(run, "partition.method", "strategy.name", "model.name")
        )
    else:
        which = (
            "the clients' inputs differ (feature skew)"
            if kinds.has_feature_skew
            else "the clients' inputs differ in scale or distribution"
        )
        cause = (
            f"{which}, so one averaged batch-norm statistic fits none of them: "
            "keep batch norm local with personalization.method: fedbn, or build "
            "without it (model.batch_norm: false); also check each client's input "
            "scaling. Now " + knobs(run, "personalization.method", "model.name")
        )
    rounds_all = sorted({k for rounds in persistent.values() for k in rounds})
    return [
        Finding(
            code=codes.NORM_STATISTICS_DISAGREE,
            severity="warning",
            title="normalization statistics disagree between clients",
            evidence=evidence,
            fix=cause,
            rounds=rounds_all,
            side="data",
        )
    ]

"""(f) Client drift: client updates with little in common (non-i.i.d. data).

The clients' updates diverge, point away from their mean, and the local models
beat the global one on their own data, in most of the judged rounds.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import finite_clients, knobs, param
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.doctor.outliers import outlier_rounds
from fedpipe.observe.doctor.skewkind import skew_kinds
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: divergence normalized by its value for K unrelated updates (1 - 1/K) above
#: this: the clients' updates have almost nothing in common (healthy IID runs
#: stay below ~0.7, Dirichlet(0.1) label skew is at ~0.95)
DRIFT_DIVERGENCE = 0.85
#: ... and the median cosine of an update to the mean update below this, at 10
#: clients (about sqrt(1 - D): 0.5 for D = 0.75). Unrelated updates have a cosine
#: to their mean of about 1/sqrt(K), so the limit scales with sqrt(10 / K) (0.79
#: at 4 clients, where Dirichlet(0.08) skew sits at 0.41-0.65), capped at
#: DRIFT_COSINE_CAP (healthy IID clients sit at 0.9 and above)
DRIFT_COSINE = 0.5
DRIFT_COSINE_CAP = 0.8
#: ... and the local models beat the global model on their own test splits by
#: more than this accuracy (gap.accuracy below -DRIFT_GAP). Near convergence
#: IID updates are mostly SGD noise, so divergence alone rises there too (the
#: default run reaches D/(1-1/K) ~0.8 by round 10); what drift adds is local
#: optima that differ, which the local models' edge on their own data shows
#: (Dirichlet(0.1): -0.2 .. -0.4; IID: >= 0)
DRIFT_GAP = 0.05
#: in at least this share of the rounds
DRIFT_MIN_SHARE = 0.5


def cosine_limit(n_clients: int) -> float:
    """The median cosine to the mean update below which ``n_clients`` updates
    have little in common (see DRIFT_COSINE)."""
    return min(DRIFT_COSINE_CAP, DRIFT_COSINE * math.sqrt(10 / n_clients))


def check_drift(run: RunFiles) -> list[Finding]:
    """Client updates with little in common: drift from non-i.i.d. data."""
    outliers = {k for rounds in outlier_rounds(run).values() for k in rounds}
    method, partition_params, skew = _partition(run)
    kinds = skew_kinds(run)
    # an iid split with its inputs transformed per client is not i.i.d. either
    non_iid = (method is not None and method != "iid") or bool(kinds.kinds)
    judged: list[int] = []
    flagged: dict[int, tuple[float, float, float]] = {}
    for k, h in run.health.items():
        clients = finite_clients(h)
        d = h.get("global", {}).get("divergence")
        cos = [
            c["cosine_to_mean"] for c in clients if c.get("cosine_to_mean") is not None
        ]
        if len(clients) < 2 or d is None or not cos or k in outliers:
            continue
        judged.append(k)
        normalized = d / (1.0 - 1.0 / len(clients))
        median_cos = statistics.median(cos)
        gap = h.get("gap", {}).get("accuracy")
        local_wins = gap < -DRIFT_GAP if gap is not None else non_iid
        if (
            normalized > DRIFT_DIVERGENCE
            and median_cos < cosine_limit(len(clients))
            and local_wins
        ):
            flagged[k] = (d, normalized, median_cos)
    if not flagged or len(flagged) < DRIFT_MIN_SHARE * len(judged):
        return []
    evidence = [
        f"{rounds_text(sorted(flagged))} of {len(judged)}: divergence "
        f"{fmt(min(v[0] for v in flagged.values()), 3)}-"
        f"{fmt(max(v[0] for v in flagged.values()), 3)} (unrelated updates: "
        f"{1 - 1 / len(finite_clients(run.health[min(flagged)])):.2g}); median cosine "
        f"to the mean update {fmt(min(v[2] for v in flagged.values()), 3)}-"
        f"{fmt(max(v[2] for v in flagged.values()), 3)}"
    ]
    layers = _mean_layer(run, sorted(flagged), "divergence")
    if layers:
        evidence.append(
            "most divergent layers: "
            + ", ".join(f"{name} {fmt(v, 3)}" for name, v in layers[:3])
        )
    if method is not None:
        settings = ", ".join(
            f"{key}={partition_params[key]}"
            for key in ("alpha", "classes_per_client", "shards_per_client")
            if key in partition_params and method != "iid"
        )
        evidence.append(
            f"partition: {method}{f' ({settings})' if settings else ''}"
            + (
                f", label skew {skew:.2f} (0 = every client has the pool's mix)"
                if skew is not None
                else ""
            )
        )
    kind_line = kinds.evidence()
    if kind_line is not None:
        evidence.append(kind_line)
    gaps = [
        run.health[k]["gap"].get("accuracy")
        for k in flagged
        if run.health[k].get("gap", {}).get("accuracy") is not None
    ]
    if gaps:
        evidence.append(
            f"global model on client tests minus local models: accuracy "
            f"{statistics.mean(gaps):+.3f} on average"
        )
    epochs = param(run, "train.epochs")
    less = f" (now {epochs})" if epochs is not None else ""
    if kinds.has_feature_skew and not kinds.has_label_skew:
        fix = (
            "the clients' inputs differ (feature skew), not their labels: keep "
            "batch norm on the clients (personalization.method: fedbn, with a "
            "batch-norm model) or personalize (personalization.method: ditto or "
            "fedper); fedprox and scaffold correct label skew's drift, here they "
            f"only slow it; fewer local epochs train.epochs{less} also help. Now "
            + knobs(
                run,
                "partition.feature_skew",
                "personalization.method",
                "strategy.name",
                "train.epochs",
            )
        )
        side = "partition"
    elif non_iid:
        inputs_too = (
            " The clients' inputs differ too (feature skew): "
            "personalization.method: fedbn keeps batch norm local."
            if kinds.has_feature_skew
            else ""
        )
        fix = (
            "correct for drift: strategy.name: fedprox (strategy.proximal_mu: 0.01) "
            f"or scaffold; fewer local epochs train.epochs{less}; more clients per "
            "round (federation.fraction_fit); with personalization the local models "
            f"may be the goal.{inputs_too} Now "
            + knobs(
                run,
                "partition.method",
                "partition.alpha",
                "strategy.name",
                "train.epochs",
                "federation.fraction_fit",
            )
        )
        side = "partition"
    else:
        fix = (
            "the data is split i.i.d., so the clients drift by over-fitting their "
            f"own samples: fewer local epochs train.epochs{less} or a lower train.lr;"
            " strategy.name: fedprox (strategy.proximal_mu) also holds them together."
            " Now " + knobs(run, "train.lr", "train.epochs", "strategy.name")
        )
        side = "client training"
    return [
        Finding(
            code=codes.CLIENT_DRIFT,
            severity="warning",
            title="client updates have little in common (client drift)",
            evidence=evidence,
            fix=fix,
            rounds=sorted(flagged),
            side=side,
        )
    ]


def _mean_layer(
    run: RunFiles, rounds: Sequence[int], key: str
) -> list[tuple[str, float]]:
    """Layers by their mean ``key`` over ``rounds``, largest first."""
    values: dict[str, list[float]] = {}
    for k in rounds:
        for layer in run.health[k].get("layers", []):
            if layer.get(key) is not None:
                values.setdefault(layer["name"], []).append(layer[key])
    means = [(name, statistics.mean(v)) for name, v in values.items()]
    return sorted(means, key=lambda item: -item[1])


def _partition(run: RunFiles) -> tuple[str | None, dict[str, Any], float | None]:
    if run.manifest is None:
        method = param(run, "partition.method")
        alpha = param(run, "partition.alpha")
        return method, ({} if alpha is None else {"alpha": alpha}), None
    from fedpipe.data.partition.manifest import label_skew

    try:
        skew: float | None = label_skew(run.manifest)
    except (KeyError, ValueError):
        skew = None
    return run.manifest.get("method"), dict(run.manifest.get("params", {})), skew

"""(b) Aggregation weights that do not sum to what the strategy applies.

The health record fits the server's step as a combination of the client updates
(``aggregation.weight_sum``, ``fit_residual``); where that fit is exact, the
weights must sum to 1 (or ``strategy.server_lr`` for server-side momentum).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedpipe.core import registry
from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import param
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: the fit explains the server's step as a combination of client updates only if
#: the residual is below this share of the step (linear rules leave ~1e-6 from
#: float32 rounding; server optimizers and medians leave 0.1 .. 1)
FIT_RESIDUAL_MAX = 0.01
#: effective weights may sum to the expected value +- this (rounding leaves ~1e-6)
WEIGHT_SUM_TOL = 0.02
#: a client whose update norm is below this share of the round's median moved
#: (almost) nothing: any weight on it fits the step, so its fitted weight says
#: nothing about the aggregation (a client that has converged on its own data:
#: in the doctor corpus one such client's fitted weight came out 0.61 against its
#: n_k share 0.25, and the sum 1.36)
NEGLIGIBLE_UPDATE = 0.01


def expected_weight_sum(run: RunFiles) -> float:
    """What the configured strategy's effective weights should sum to: 1, or the
    setting its class names as ``weight_sum_setting`` (``strategy.server_lr``
    for server momentum and SCAFFOLD, default 1)."""
    name = param(run, "strategy.name", "fedavg")
    key = None
    if registry.is_builtin("strategy", name):
        key = registry.get("strategy", name).weight_sum_setting
    if key is None:
        return 1.0
    return float(param(run, f"strategy.{key}", 1.0))


def identifiable_sum(health: dict[str, Any], total: float) -> float:
    """The fitted weight sum with the clients that moved (almost) nothing at
    their nominal weight: their fitted weights are not determined by the step."""
    clients = [c for c in health.get("clients", []) if c.get("update_norm") is not None]
    nominal = health.get("aggregation", {}).get("nominal_weights") or {}
    if not clients or not nominal:
        return total
    median = float(np.median([c["update_norm"] for c in clients]))
    for c in clients:
        fitted, share = c.get("aggregation_weight"), nominal.get(str(c["client"]))
        if share is None or c["update_norm"] > NEGLIGIBLE_UPDATE * median:
            continue
        # left out of the fit (a zero update) or fitted to an arbitrary value
        total += float(share) - (0.0 if fitted is None else float(fitted))
    return total


def check_aggregation(run: RunFiles) -> list[Finding]:
    """Effective aggregation weights that do not sum to what the strategy applies."""
    expected = expected_weight_sum(run)
    flagged: dict[int, dict[str, Any]] = {}
    for k, h in run.health.items():
        agg = h.get("aggregation", {})
        total, residual = agg.get("weight_sum"), agg.get("fit_residual")
        if total is None or residual is None or residual > FIT_RESIDUAL_MAX:
            continue
        # a strategy whose weights' sum depends on the round (FedNova) says it
        wanted = agg.get("expected_weight_sum", expected)
        if abs(identifiable_sum(h, total) - wanted) > WEIGHT_SUM_TOL:
            flagged[k] = agg
    if not flagged:
        return []
    first = min(flagged)
    agg = flagged[first]
    evidence = [
        f"round {k}: effective weights sum to {fmt(a['weight_sum'])} (expected "
        f"{a.get('expected_weight_sum', expected):g}); fit residual "
        f"{fmt(a['fit_residual'], 2)}"
        + (
            f", old global weights scaled by {fmt(1 + a['global_coefficient'])}"
            if a.get("global_coefficient") not in (None, 0)
            and abs(a["global_coefficient"]) > WEIGHT_SUM_TOL
            else ""
        )
        for k, a in sorted(flagged.items())[:5]
    ]
    if len(flagged) > 5:
        evidence.append(f"... and {len(flagged) - 5} more rounds")
    h = run.health[first]
    by_client = {c["client"]: c for c in h.get("clients", [])}
    nominal = agg.get("nominal_weights", {})
    pairs = [
        f"client {c}: {fmt(by_client[int(c)].get('aggregation_weight'), 3)} "
        f"(n_k share {fmt(w, 3)})"
        for c, w in list(nominal.items())[:4]
        if int(c) in by_client
    ]
    if pairs:
        evidence.append(
            f"round {first} effective vs nominal weights: " + "; ".join(pairs)
        )
    norms = {k: run.health[k]["global"].get("weight_norm") for k in sorted(flagged)}
    known = [v for v in norms.values() if v is not None]
    if len(known) >= 2:
        evidence.append(
            f"global weight norm {fmt(known[0])} -> {fmt(known[-1])} over "
            f"{rounds_text(sorted(flagged))}"
        )
    name = param(run, "strategy.name", "fedavg")
    return [
        Finding(
            code=codes.AGGREGATION_WEIGHTS_NOT_NORMALIZED,
            severity="error",
            title=f"aggregation weights sum to {fmt(agg['weight_sum'], 3)}, not "
            f"{agg.get('expected_weight_sum', expected):g}",
            evidence=evidence,
            fix=(
                "the server must average: weights n_k / sum of n_k over the clients "
                "aggregated this round (they sum to 1); a sum S multiplies the global "
                "weights by S every round, so logits and loss grow while accuracy "
                f"holds. Check the aggregation code of strategy.name = {name}"
                f"{_fault(run)}; a larger step on purpose is strategy.server_lr "
                "with fedavgm"
            ),
            rounds=sorted(flagged),
            side="server aggregation",
        )
    ]


def _fault(run: RunFiles) -> str:
    """The planted fault's setting, when the run has one."""
    value = param(run, "faults.aggregation_weight_sum")
    return "" if value is None else f" (faults.aggregation_weight_sum = {value:g})"

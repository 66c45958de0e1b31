"""The server's step too large: it amplified client updates of normal size.

A server optimizer (FedAvgM's learning rate and momentum, FedAdam / FedYogi /
FedAdagrad's learning rate and adaptivity, SCAFFOLD's global learning rate)
applies the clients' mean update ``Σ p_k Δ_k`` with a step of its own. The health
record keeps both sizes (``aggregation.server_step_ratio``, 1 for FedAvg).
When the global model blows up in a round whose clients trained normally (their
updates small against the weights, their local loss near guessing or below) and
whose server step was several times their mean update, the cause is on the
server's side: lowering ``train.lr`` would not help. The learning-rate check
(:mod:`~fedpipe.observe.doctor.learning_rate`) does not judge the rounds after
(:func:`server_blowup_round`): their clients start from the broken model.
"""

from __future__ import annotations

import inspect
import math
import statistics
from collections.abc import Mapping
from typing import Any

from fedpipe.core import registry
from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import finite_clients, param
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: the server's step over the clients' mean update above this: the server
#: amplified it. FedAvg gives 1 (float error ~1e-6); FedAvgM's momentum reaches
#: 1/(1 - m) = 10 and FedAdam's per-coordinate steps several x while training
#: well (measured: FedAvgM server_lr 4 / momentum 0.9 learns at a ratio of 4 to
#: 13), so the ratio only says the server took part, never that it broke things
SERVER_STEP_RATIO = 2.0
#: ... and the step moved the global weights by this share of their own norm in
#: one round (healthy rounds: 3% for FedAvg, up to 20% for FedAvgM with momentum
#: 0.9; FedAdam at server_lr 1 that blows up: 240%) ...
SERVER_STEP_SIZE = 0.5
#: ... or the global loss jumped by this factor over the round before (or over
#: the loss of guessing, in round 1), or the new global weights are NaN/inf
SERVER_LOSS_JUMP = 2.0
#: ... or the global loss has risen to this multiple of its best so far, with
#: every round since that best amplified: a slow blow-up (FedAvgM at server_lr 4,
#: momentum 0.9 in the doctor corpus: loss 1.07 -> 2.05 -> 2.72 at ratios 4-8,
#: accuracy stuck at 0.6 where FedAvg reaches 0.85; a healthy FedAvgM's loss falls)
SERVER_LOSS_RISE = 1.5
#: clients of normal size: median update under this share of the global weight
#: norm (the learning-rate check's LR_STEP_RATIO) ...
CLIENT_STEP_NORMAL = 1.0
#: ... and median local loss under this multiple of ln(C) (its LR_LOSS_FACTOR)
CLIENT_LOSS_NORMAL = 3.0

#: the settings that size the server's step (FedAvgM, FedAdam, FedYogi,
#: FedAdagrad, SCAFFOLD), each with a value to try given the current one: a
#: tenth of the learning rate, momentum at most 0.5, ten times the adaptivity
#: floor tau (steps of server_lr on coordinates whose updates are tiny)
_TRY = {
    "server_lr": lambda v: f"{v / 10:g}",
    "server_momentum": lambda v: f"{min(v, 0.5) if v > 0.5 else v / 2:g}",
    "tau": lambda v: f"{v * 10:g}",
}


def server_rounds(run: RunFiles) -> dict[int, dict[str, Any]]:
    """Rounds where the server amplified the clients' update and the global model
    blew up (step ratio, step size, loss jump), with the numbers.

    Rounds with differential privacy are left out: their step carries the
    mechanism's noise, which the privacy check weighs against the update.
    """
    chance = math.log(run.n_classes) if run.n_classes else None
    out: dict[int, dict[str, Any]] = {}
    previous_loss = chance
    best: float | None = None
    amplified_since_best = True
    for k, h in sorted(run.health.items()):
        if (run.rounds.get(k) or {}).get("privacy"):
            continue
        agg, glob = h.get("aggregation") or {}, h.get("global") or {}
        ratio = agg.get("server_step_ratio")
        step, size = agg.get("server_step_norm"), glob.get("weight_norm_before")
        loss = glob.get("loss")
        clients = h.get("clients") or []
        finite = [c for c in clients if not c.get("nonfinite")]
        broke = bool(glob.get("nonfinite")) and 2 * len(finite) > len(clients)
        before = previous_loss
        jumped = (
            loss is not None
            and before is not None
            and before > 0
            and loss > SERVER_LOSS_JUMP * before
        )
        moved = step is not None and size and step > SERVER_STEP_SIZE * size
        amplified = ratio is not None and ratio >= SERVER_STEP_RATIO
        amplified_since_best = amplified_since_best and amplified
        rising = (
            amplified_since_best
            and loss is not None
            and best is not None
            and loss > SERVER_LOSS_RISE * best
        )
        if loss is not None:
            previous_loss = loss
            if best is None or loss < best:
                best, amplified_since_best = loss, True
        if broke or (amplified and (moved or jumped or rising)):
            out[k] = {
                "ratio": ratio,
                "step": step,
                "mean": agg.get("mean_update_norm"),
                "size": size,
                "loss": loss,
                "before_loss": before,
                "broke": broke,
                "clients_normal": _clients_normal(h, chance),
            }
    return out


def _clients_normal(health: Mapping[str, Any], chance: float | None) -> bool:
    """Whether the round's clients trained normally (not the learning-rate look)."""
    clients = health.get("clients") or []
    if not clients or 2 * sum(bool(c.get("nonfinite")) for c in clients) > len(clients):
        return False
    norms = [c["update_norm"] for c in finite_clients(health)]
    size = (health.get("global") or {}).get("weight_norm_before")
    if norms and size and statistics.median(norms) > CLIENT_STEP_NORMAL * size:
        return False
    losses = [c["train_loss"] for c in clients if c.get("train_loss") is not None]
    return not (
        losses and chance and statistics.median(losses) > CLIENT_LOSS_NORMAL * chance
    )


def server_blowup_round(run: RunFiles) -> int | None:
    """The first round the server's step blew the global model up while its
    clients trained normally (None: no such round)."""
    rounds = server_rounds(run)
    first = min(rounds, default=None)
    if first is None or not rounds[first]["clients_normal"]:
        return None
    return first


def strategy_knobs(run: RunFiles) -> list[tuple[str, Any]]:
    """The run's strategy's own server settings with their current values
    (the params' value, else the strategy's default)."""
    name = param(run, "strategy.name", "fedavg")
    if not registry.is_builtin("strategy", name):
        return []
    cls = registry.get("strategy", name)
    defaults = {
        p.name: p.default
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.default is not inspect.Parameter.empty
    }
    out = []
    for key in getattr(cls, "settings", ()):
        if key in _TRY:
            value = param(run, f"strategy.{key}", defaults.get(key))
            out.append((f"strategy.{key}", value))
    return out


def server_fix(run: RunFiles, *, clients_normal: bool = True) -> str:
    """The fix naming the strategy's server settings, with values and what to try
    (and that train.lr is not the cause, when the clients trained normally)."""
    name = param(run, "strategy.name", "fedavg")
    parts = []
    for key, value in strategy_knobs(run):
        short = key.removeprefix("strategy.")
        if value is None:
            continue
        verb = "raise" if short == "tau" else "lower"
        parts.append(f"{verb} {key} = {value:g} -> try {_TRY[short](value)}")
    if not parts:
        return (
            f"the server (strategy.name = {name}) applies the aggregate with a step "
            "larger than the clients' mean update: check the strategy's own code "
            "and settings (strategy.options); train.lr is not the cause"
        )
    lr = param(run, "train.lr", "?")
    clients = (
        f"train.lr = {lr} is not the cause: the clients' updates were of normal size"
        if clients_normal
        else f"then check train.lr = {lr} too"
    )
    return (
        f"the server (strategy.name = {name}) amplifies the clients' updates: "
        + "; ".join(parts)
        + f"; or strategy.name = fedavg (a step of 1). {clients}"
    )


def check_server_step(run: RunFiles) -> list[Finding]:
    """The server's step blew up a global model whose clients trained normally."""
    first = server_blowup_round(run)
    if first is None:
        return []
    rounds = server_rounds(run)
    r = rounds[first]
    evidence = []
    if r["broke"]:
        evidence.append(
            f"round {first}: NaN/inf in the new global weights while the clients' "
            "weights were finite"
        )
    if r["ratio"] is not None:
        evidence.append(
            f"round {first}: the server's step ({fmt(r['step'])}) is "
            f"{r['ratio']:.3g}x the clients' mean update ({fmt(r['mean'])}; FedAvg: "
            f"1x) and {r['step'] / r['size']:.3g}x the global weight norm "
            f"({fmt(r['size'])})"
        )
    if r["loss"] is not None and r["before_loss"] is not None:
        evidence.append(
            f"round {first}: global loss {fmt(r['loss'])} after "
            f"{fmt(r['before_loss'])} (the round before, or guessing in round 1)"
        )
    evidence.append(_clients_line(run, first))
    later = sorted(k for k in rounds if k > first)
    if later:
        evidence.append(f"the server's step stayed too large in {rounds_text(later)}")
    recovered = _recovered(run, r["before_loss"])
    if recovered:
        evidence.append(recovered)
    return [
        Finding(
            code=codes.SERVER_STEP_TOO_LARGE,
            severity="warning" if recovered else "error",
            title="the server's step is too large: it amplifies client updates of "
            "normal size",
            evidence=evidence,
            fix=server_fix(run),
            rounds=[first, *later],
            side="server aggregation",
        )
    ]


def _recovered(run: RunFiles, before: float | None) -> str:
    """A line saying the run recovered (its last global loss below the loss
    before the blow-up), or "" (a warning then, not an error: FedAdagrad's default
    first step of server_lr on every coordinate does this and learns after)."""
    last = [h.get("global", {}).get("loss") for _, h in sorted(run.health.items())]
    final = next((v for v in reversed(last) if v is not None), None)
    if final is None or before is None or final >= before:
        return ""
    return (
        f"the run recovered: last global loss {fmt(final)}, below the "
        f"{fmt(before)} before the blow-up"
    )


def _clients_line(run: RunFiles, k: int) -> str:
    h = run.health[k]
    norms = [c["update_norm"] for c in finite_clients(h)]
    size = (h.get("global") or {}).get("weight_norm_before")
    losses = [c["train_loss"] for c in h.get("clients", []) if c.get("train_loss")]
    parts = []
    if norms and size:
        median = statistics.median(norms)
        parts.append(f"median update {fmt(median)} = {median / size:.3g}x the weights")
    if losses:
        chance = f" (guessing: {math.log(run.n_classes):.3g})" if run.n_classes else ""
        parts.append(f"median local loss {fmt(statistics.median(losses))}{chance}")
    return f"round {k}: the clients trained normally: " + (
        ", ".join(parts) or "no update blew up"
    )

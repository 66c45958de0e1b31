"""A global model that learned, then fell back to guessing and stayed there.

Accuracy rose clearly above chance (the larger of 1/C and the most common
label's share, which always predicting it scores), then fell back to about
chance and stayed there to the last round. The finding names the peak round,
the round it collapsed and the likely cause from the records of the rounds in
between: the server's step blowing up (:mod:`~fedpipe.observe.doctor.server_step`),
local training blowing up (update norms or local losses exploding: train.lr),
and what the collapsed model looks like (one predicted class, dead ReLU layers).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import finite_clients, global_series, knobs, param
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.doctor.predictions import CONSTANT_SHARE
from fedpipe.observe.doctor.rare_classes import class_names
from fedpipe.observe.doctor.server_step import server_fix, server_rounds
from fedpipe.observe.history import class_label
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: the peak is at least this share of the way from chance to 1 (10 digits,
#: chance 0.115: 0.25; two balanced classes: 0.575): clearly learned, 4-5
#: standard deviations of the accuracy on a held-out set of 200 samples above
#: chance (a deep MLP at SGD lr 0.7 peaked at 0.265, then died)
COLLAPSE_RISE = 0.15
#: ... and the collapsed rounds within this share of it (10 classes: <= 0.19)
COLLAPSE_FLOOR = 0.1
#: rounds at the floor, the last ones of the run: one low round may be a swing
COLLAPSE_MIN_ROUNDS = 2
#: local training blew up: the median client update grew this many times over
#: the peak round's, or passed the global weight norm, or the median local loss
#: this multiple of ln(C) (the learning-rate check's LR_LOSS_FACTOR)
UPDATE_GROWTH = 5.0
LOSS_FACTOR = 3.0
#: a layer this share dead is named in the evidence (the dead-units check
#: reports a layer only when all of it is dead)
MOSTLY_DEAD = 0.9


def chance_accuracy(run: RunFiles) -> float | None:
    """What guessing scores: max(1/C, the most common held-out label's share)."""
    shares = [
        h.get("global", {}).get("majority_share")
        for h in run.health.values()
        if h.get("global", {}).get("majority_share") is not None
    ]
    candidates = shares[-1:] + ([1.0 / run.n_classes] if run.n_classes else [])
    return max(candidates) if candidates else None


def collapse_of(run: RunFiles) -> tuple[int, int, float] | None:
    """``(peak round, collapse round, chance)`` of a collapse, else None."""
    chance = chance_accuracy(run)
    series = [
        (k, v) for k, v in global_series(run, "accuracy").items() if v is not None
    ]
    if chance is None or len(series) < COLLAPSE_MIN_ROUNDS + 1:
        return None
    floor = chance + COLLAPSE_FLOOR * (1.0 - chance)
    low = 0  # the last rounds at the floor
    while low < len(series) and series[-1 - low][1] <= floor:
        low += 1
    if low < COLLAPSE_MIN_ROUNDS or low == len(series):
        return None
    before = series[: len(series) - low]
    peak, best = max(before, key=lambda kv: kv[1])
    if best < chance + COLLAPSE_RISE * (1.0 - chance):
        return None
    return peak, series[len(series) - low][0], chance


def check_collapse(run: RunFiles) -> list[Finding]:
    """Accuracy rose, collapsed to about chance and stayed; name when and why."""
    found = collapse_of(run)
    if found is None:
        return []
    peak, down, chance = found
    accuracy = global_series(run, "accuracy")
    last = max(accuracy)
    evidence = [
        f"global accuracy peaked at {fmt(accuracy[peak], 3)} in round {peak}, fell to "
        f"{fmt(accuracy[down], 3)} in round {down} and stayed at about chance "
        f"({fmt(chance, 3)}) to round {last}"
    ]
    side, fix, causes = _cause(run, peak, down)
    evidence += causes
    evidence += _looks(run, down)
    return [
        Finding(
            code=codes.ACCURACY_COLLAPSED,
            severity="error",
            title=f"global accuracy collapsed to guessing in round {down} (after "
            f"peaking in round {peak})",
            evidence=evidence,
            fix=fix,
            rounds=[peak, *[k for k in accuracy if k >= down]],
            side=side,
        )
    ]


def _cause(run: RunFiles, peak: int, down: int) -> tuple[str, str, list[str]]:
    """(side, fix, evidence) of the likely cause, from rounds peak+1 .. down."""
    window = [k for k in sorted(run.health) if peak < k <= down]
    amplified = server_rounds(run)
    server = [k for k in amplified if k in window]
    if server:
        normal = amplified[server[0]]["clients_normal"]
        return (
            "server aggregation",
            server_fix(run, clients_normal=normal),
            [
                f"likely cause: the server's step blew up the global model in "
                f"{rounds_text(server)} (several times the clients' mean update)"
            ],
        )
    blown = _client_blowup(run, peak, window)
    lr = knobs(run, "train.lr", "train.optimizer", "train.epochs")
    value = param(run, "train.lr")
    try_ = f" -> try {value / 10:g}" if isinstance(value, float) else ""
    if blown:
        return (
            "client training",
            f"local training blew up: lower train.lr ({lr}){try_}; keep the model "
            f"of round {peak} (the best so far)",
            [f"likely cause: local training blew up ({'; '.join(blown)})"],
        )
    return (
        "client training",
        f"most often a learning rate that is too high for the later rounds: lower "
        f"train.lr ({lr}){try_}; keep the model of round {peak}",
        ["likely cause: not in the records (no update or loss blew up before it)"],
    )


def _client_blowup(run: RunFiles, peak: int, window: list[int]) -> list[str]:
    """Evidence lines of local training blowing up in ``window``."""
    base = _median_update(run.health.get(peak, {}))
    chance = math.log(run.n_classes) if run.n_classes else None
    out = []
    for k in window:
        h = run.health[k]
        median = _median_update(h)
        size = h.get("global", {}).get("weight_norm_before")
        if median is not None and base and median > UPDATE_GROWTH * base:
            out.append(
                f"round {k}: median client update {fmt(median)}, "
                f"{median / base:.3g}x round {peak}'s"
            )
        elif median is not None and size and median > size:
            out.append(f"round {k}: median client update {fmt(median)} > the weights")
        losses = [c["train_loss"] for c in h.get("clients", []) if c.get("train_loss")]
        if losses and chance and statistics.median(losses) > LOSS_FACTOR * chance:
            out.append(
                f"round {k}: median local loss {fmt(statistics.median(losses))}, "
                f"{statistics.median(losses) / chance:.3g}x guessing"
            )
        if any(c.get("nonfinite") for c in h.get("clients", [])):
            out.append(f"round {k}: NaN/inf in clients' trained weights")
    return out


def _median_update(health: dict[str, Any]) -> float | None:
    norms = [c["update_norm"] for c in finite_clients(health)]
    return statistics.median(norms) if norms else None


def _looks(run: RunFiles, down: int) -> list[str]:
    """What the collapsed model looks like in round ``down``."""
    h = run.health.get(down, {})
    out = []
    share = h.get("global", {}).get("top_class_share")
    if share is not None and share >= CONSTANT_SHARE:
        top = h["global"].get("top_class")
        named = "?" if top is None else class_label(int(top), class_names(run))
        out.append(
            f"round {down}: the global model predicts {named} for {share:.0%} of "
            "held-out samples"
        )
    dead = {
        name: s
        for name, s in (h.get("dead_units") or {}).items()
        if s is not None and s >= MOSTLY_DEAD
    }
    if dead:
        shown = ", ".join(f"{name} {s:.0%}" for name, s in dead.items())
        out.append(f"round {down}: dead ReLU units: {shown}")
    return out

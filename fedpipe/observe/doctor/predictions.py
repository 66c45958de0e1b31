"""A global model that predicts one class for (almost) every held-out sample.

When that class is the majority and the loss stayed finite, training did not
diverge: :mod:`fedpipe.observe.doctor.rare_classes` reports it
(``predicts-majority-class``: weigh the classes, train more); here the rest, a
model that blew up or died (lower the learning rate).

From the health records' ``global.top_class_share`` (the most-predicted class's
share of the held-out predictions): from some round R to the last, the model
answers one class whatever the input, and scores no better than always guessing
the most common label. Dead ReLU layers, a bias driven far negative or an output
layer whose weights exploded do this.
"""

from __future__ import annotations

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import knobs
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.doctor.rare_classes import class_names, stops_at_majority
from fedpipe.observe.history import class_label
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: this share of held-out samples get the same class: "(almost) all". A model
#: that learned anything on a balanced set of a few hundred samples is far
#: below (10 digits: the top class takes 10-40% in healthy early rounds)
CONSTANT_SHARE = 0.95
#: ... scoring at most this much above always guessing the most common label
#: (a model that is right to predict one class, on a skewed set, is not flagged)
ABOVE_MAJORITY = 0.05
#: ... in this many rounds at least, the last ones of the run
CONSTANT_MIN_ROUNDS = 2


def constant_from(run: RunFiles) -> int | None:
    """The round from which every round's global model predicts one class."""
    rounds = sorted(run.health)
    start = None
    for k in reversed(rounds):
        g = run.health[k].get("global") or {}
        share, acc = g.get("top_class_share"), g.get("accuracy")
        majority = g.get("majority_share")
        if share is None or share < CONSTANT_SHARE:
            break
        if acc is not None and majority is not None and acc > majority + ABOVE_MAJORITY:
            break
        start = k
    if start is None or len([k for k in rounds if k >= start]) < CONSTANT_MIN_ROUNDS:
        return None
    return start


def check_predictions(run: RunFiles) -> list[Finding]:
    """The global model predicts one class for (almost) all held-out samples."""
    start = constant_from(run)
    if start is None:
        return []
    rounds = [k for k in sorted(run.health) if k >= start]
    if stops_at_majority(run) is not None:
        return []  # the majority class, loss finite: rare_classes' finding
    g = run.health[start]["global"]
    last = run.health[rounds[-1]]["global"]
    top = last.get("top_class")
    named = "?" if top is None else class_label(int(top), class_names(run))
    evidence = [
        f"from round {start} to {rounds[-1]} the global model predicts "
        f"{named} for {fmt(100 * last['top_class_share'], 3)}% of "
        f"held-out samples (round {start}: {fmt(100 * g['top_class_share'], 3)}%)",
        f"accuracy {fmt(last.get('accuracy'), 3)}; always guessing the most common "
        f"label scores {fmt(last.get('majority_share'), 3)}",
    ]
    dead = {
        name: share
        for name, share in (run.health[start].get("dead_units") or {}).items()
        if share is not None and share >= 1.0
    }
    if dead:
        evidence.append(f"round {start}: ReLU layers all dead: {', '.join(dead)}")
    return [
        Finding(
            code=codes.PREDICTIONS_CONSTANT,
            severity="warning",
            title=f"the global model predicts one class for almost every sample "
            f"from round {start} ({rounds_text(rounds)})",
            evidence=evidence,
            fix=(
                "the model stopped using its input: most often local training "
                "pushed it there (lower "
                + knobs(run, "train.lr", "train.optimizer")
                + "); with skewed labels also check partition.* and the class "
                "balance of each client"
            ),
            rounds=rounds,
            side="client training",
        )
    ]

"""Rare classes and short local training: a model that answers the majority class,
and one still learning when the run ends.

*Predicts the majority class* (``predicts-majority-class``): from the last round's
per-class recall on the held-out set (``global_classes`` of the round record),
the global model scores at most a little above always answering the most common
class, and some rarer class is almost never found. With a finite loss this is not
a training that diverged (that is ``train.lr``'s: ``predictions-constant``,
``learning-rate-too-high``): the loss is minimized by the majority, and local
training was too short to get past it. The fix is to weigh the rare classes
(``train.class_weight: balanced``) and to train more locally (``train.epochs``);
a lower learning rate trains even less (on a 9.4 %-spam table it took spam recall
from 0.027 to 0.0, issue 37).

*Under-trained* (``under-trained``): each client takes only a few optimizer steps
a round (``ceil(rows / train.batch_size) * train.epochs``, or
``train.local_steps``) while the model is still learning when the run ends: over
the last third of the rounds the held-out loss's least-squares line falls
(``LOSS_FALL``) and the accuracy's climbs, and the accuracy still sets new bests
in the last half of them. A trend, not a rise at every round: on 30 held-out rows
the accuracy moves a row at a time and sits flat between (iris at fedpipe's
defaults, 1 step a round, 3.3 points behind a central baseline: the old
round-by-round test said nothing). The public tables of ``scripts/table_corpus.py``
at the defaults (1 epoch, 30 rounds) take 1 (iris), 2 (Auto MPG) and 8 (digits)
steps a round; the glass table of issue 37 took one. A run whose accuracy reached
its plateau earlier is not named, however its loss falls (iris at 90 rounds of 5
epochs: 0.933, level with the baseline, from round 67, its loss 20 % lower over
the last 30 rounds); nor is Auto MPG at the defaults, 9 points behind, whose
held-out accuracy peaked at round 4 and held at 0.72-0.74 while its loss fell:
from the records alone that is a plateau too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import global_series, knobs, param
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.history import class_label
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text

#: the global model's accuracy is at most this far above always answering the
#: most common class (as ``predictions-constant``'s margin): it adds next to
#: nothing to the majority
ABOVE_MAJORITY = 0.05
#: ... and a rarer class's recall is at most this: the model misses most of it
#: (spam 0.027, credit default 0.119 on the tables of issue 37; digits "nine"
#: against the rest at 8 %, unweighted: 0.214 while it predicted "other" for
#: 98 % of the samples, which ``predictions-constant`` blamed on the learning
#: rate)
RARE_RECALL = 0.5
#: the model answers the majority: its recall of the majority class is at least
#: this (a model that learned nothing on ten classes answers many classes, and is
#: ``not-learning``'s)
MAJORITY_RECALL = 0.9
#: a round's local training is short below this many optimizer steps per client:
#: the public tables at fedpipe's defaults take 1 (iris, 19 rows a client at
#: batch 32), 2 (Auto MPG, 50 rows) and 8 (digits, 230 rows) and ended 3.3, 9.0
#: and 3.6 points behind a central baseline (scripts/table_corpus.py); the glass
#: table of issue 37 took 1. The default image run takes 13
FEW_STEPS = 10
#: the trend is read over the last third of the rounds, and at least this many
LAST_ROUNDS = 3
#: a run of fewer rounds is a short run (a smoke run, the tests' and the doctor
#: corpus's 3-10 rounds): every round of it still learns, which says nothing of
#: a budget spent; and the trend needs rounds before its tail to compare with
MIN_ROUNDS = 10
#: the held-out loss still falls: its least-squares line over the last rounds
#: drops by at least this share of where the line starts (at the defaults iris
#: 11 % over its last 10 of 30 rounds, digits 23 %); a flat loss whose accuracy
#: sets a new best by a held-out row's chance is not still learning. A converged
#: run's loss can still fall (iris, 90 x 5 epochs: 20 %): the new-best test tells
#: those apart
LOSS_FALL = 0.05


def class_names(run: RunFiles) -> list[str] | None:
    """The prepared data's class names (``schema.json``), None without them."""
    names = (run.schema or {}).get("class_names")
    return None if names is None else [str(n) for n in names]


def majority_class(classes: dict[str, Any]) -> tuple[int, float] | None:
    """The most common held-out class and its share (what always answering it
    scores), from a record's ``global_classes``."""
    support = classes.get("support") or []
    total = sum(support)
    if not total:
        return None
    label = max(range(len(support)), key=lambda c: support[c])
    return label, support[label] / total


def predicts_majority(run: RunFiles, k: int) -> dict[str, Any] | None:
    """Round ``k``'s global model answers the majority class: its label and
    share, the accuracy, and the rare classes it misses (label -> recall);
    None when it does not (or the record has no per-class recall)."""
    record = run.rounds.get(k) or {}
    classes = record.get("global_classes")
    accuracy = (record.get("global") or {}).get("accuracy")
    if not classes or accuracy is None:
        return None
    found = majority_class(classes)
    if found is None:
        return None
    label, share = found
    missed = {
        c: recall
        for c, recall in enumerate(classes.get("recall") or [])
        if c != label and recall is not None and recall <= RARE_RECALL
    }
    recall = (classes.get("recall") or [None] * (label + 1))[label]
    if recall is None or recall < MAJORITY_RECALL:
        return None
    if accuracy > share + ABOVE_MAJORITY or not missed:
        return None
    return {"label": label, "share": share, "accuracy": accuracy, "missed": missed}


def never_above_majority(run: RunFiles, share: float) -> bool:
    """No round's global model scored more than a little above the majority's
    share: it stopped there, rather than learned and fell back (a collapse,
    ``accuracy-collapsed``)."""
    values = [v for v in global_series(run, "accuracy").values() if v is not None]
    return all(v <= share + ABOVE_MAJORITY for v in values)


def diverged(run: RunFiles, rounds: Sequence[int]) -> bool:
    """The global loss is not finite, or ends well above its best, in ``rounds``
    (training that blew up: then the learning rate is the knob)."""
    loss = global_series(run, "loss")
    values = [loss.get(k) for k in rounds]
    if any(v is None or not math.isfinite(v) for v in values):
        return True
    return values[-1] > 1.5 * min(values) + 1e-9


def stops_at_majority(run: RunFiles) -> dict[str, Any] | None:
    """The run's last global model answers the majority class (see
    :func:`predicts_majority`), its loss did not diverge and no round did
    better: what ``predicts-majority-class`` reports; None otherwise."""
    rounds = sorted(run.rounds)
    if not rounds:
        return None
    seen = predicts_majority(run, rounds[-1])
    if seen is None or diverged(run, rounds):
        return None
    return seen if never_above_majority(run, seen["share"]) else None


def check_majority_class(run: RunFiles) -> list[Finding]:
    """The global model predicts the majority class and misses a rare one."""
    seen = stops_at_majority(run)
    if seen is None:
        return []
    last = max(run.rounds)
    names = class_names(run)
    majority = class_label(seen["label"], names)
    missed = ", ".join(
        f"{class_label(c, names)} {fmt(r, 3)}" for c, r in seen["missed"].items()
    )
    balanced = (run.rounds[last].get("global") or {}).get("balanced_accuracy")
    evidence = [
        f"round {last}: held-out accuracy {fmt(seen['accuracy'], 3)}; always "
        f"answering {majority} scores {fmt(seen['share'], 3)}",
        f"recall of the rarer classes: {missed} (of {majority}: "
        f"{fmt(run.rounds[last]['global_classes']['recall'][seen['label']], 3)})",
    ]
    if balanced is not None:
        evidence.append(f"balanced accuracy {fmt(balanced, 3)}")
    weighted = param(run, "train.class_weight") == "balanced"
    fix = (
        "the loss is lowest for the majority and local training stops there: "
        + (
            ""
            if weighted
            else "weigh the classes (train.class_weight: balanced, now null) and "
        )
        + "train more locally ("
        + knobs(run, "train.epochs")
        + ", e.g. 5); the loss did not diverge, so the learning rate is not "
        "the cause (a smaller one trains even less)"
    )
    return [
        Finding(
            code=codes.PREDICTS_MAJORITY_CLASS,
            severity="warning",
            title=f"the global model predicts the majority class ({majority}) and "
            f"misses the rare ones at round {last}",
            evidence=evidence,
            fix=fix,
            rounds=[last],
            side="client training",
        )
    ]


def steps_per_round(run: RunFiles, k: int) -> int | None:
    """The median client's optimizer steps in round ``k``: ``ceil(rows /
    train.batch_size) * train.epochs``, capped by ``train.local_steps``."""
    rows = sorted(
        int(c["n_train"])
        for c in (run.health.get(k) or {}).get("clients", [])
        if c.get("n_train")
    )
    batch, epochs = param(run, "train.batch_size"), param(run, "train.epochs")
    if not rows or batch is None or epochs is None:
        return None
    steps = math.ceil(rows[len(rows) // 2] / batch) * epochs
    cap = param(run, "train.local_steps")
    return steps if cap is None else min(steps, cap)


def slope(values: Sequence[float]) -> float:
    """The least-squares slope of ``values`` against their position (a round)."""
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    return num / sum((i - mean_x) ** 2 for i in range(n))


def tail_rounds(rounds: Sequence[int]) -> list[int]:
    """The last third of ``rounds``, and at least ``LAST_ROUNDS`` of them."""
    return list(rounds[-max(LAST_ROUNDS, len(rounds) // 3) :])


def still_learning(run: RunFiles, rounds: Sequence[int]) -> dict[str, Any] | None:
    """The run still learns at its end: over its last rounds (:func:`tail_rounds`)
    the held-out loss's least-squares line falls by ``LOSS_FALL`` of its start or
    more and the accuracy's line climbs, and the accuracy's best of the last half
    of these rounds is above every round's before them (it still sets new bests,
    it did not reach a plateau earlier). The trend's figures, or None."""
    tail = tail_rounds(rounds)
    newest = tail[len(tail) // 2 :]
    loss, accuracy = global_series(run, "loss"), global_series(run, "accuracy")
    ls = [loss.get(k) for k in tail]
    acc = [accuracy.get(k) for k in tail]
    latest = [accuracy.get(k) for k in newest]
    earlier = [accuracy.get(k) for k in rounds if k < newest[0]]
    if any(v is None or not math.isfinite(v) for v in ls + acc + earlier):
        return None
    loss_slope, acc_slope = slope(ls), slope(acc)
    start = sum(ls) / len(ls) - loss_slope * (len(ls) - 1) / 2  # the line's start
    fall = -loss_slope * (len(ls) - 1) / start if start > 0 else 0.0
    best, best_before = max(latest), max(earlier)
    if fall < LOSS_FALL or acc_slope <= 0 or best <= best_before:
        return None
    return {
        "rounds": tail,
        "newest": newest,
        "loss": (ls[0], ls[-1], loss_slope, fall),
        "accuracy": (acc[0], acc[-1], acc_slope, best, best_before),
    }


def check_under_training(run: RunFiles) -> list[Finding]:
    """Few local steps a round while the model is still learning at the end."""
    rounds = sorted(run.rounds)
    if len(rounds) < MIN_ROUNDS:
        return []
    steps = steps_per_round(run, rounds[-1])
    if steps is None or steps >= FEW_STEPS:
        return []
    trend = still_learning(run, rounds)
    if trend is None:
        return []
    tail = trend["rounds"]
    first, last, loss_slope, fall = trend["loss"]
    a_first, a_last, acc_slope, best, best_before = trend["accuracy"]
    evidence = [
        f"each client takes about {steps} optimizer step(s) a round "
        f"(ceil(rows / {param(run, 'train.batch_size')}) x "
        f"{param(run, 'train.epochs')} epoch(s))",
        f"{rounds_text(tail)} (the last {len(tail)} of {len(rounds)}): held-out "
        f"loss {fmt(first, 3)} -> {fmt(last, 3)} (least-squares slope "
        f"{loss_slope:+.4f} a round, {fall:.0%} lower over these rounds), "
        f"accuracy {fmt(a_first, 3)} -> {fmt(a_last, 3)} (slope {acc_slope:+.4f} "
        f"a round; best {fmt(best, 3)} in {rounds_text(trend['newest'])}, above "
        f"{fmt(best_before, 3)} before)",
    ]
    return [
        Finding(
            code=codes.UNDER_TRAINED,
            severity="warning",
            title=f"under-trained: about {steps} local step(s) a round and the "
            "model was still learning when the run ended",
            evidence=evidence,
            fix="train more: raise train.epochs, or lower train.batch_size (more "
            "steps per epoch), or run more federation.rounds (now "
            + knobs(run, "train.epochs", "train.batch_size", "federation.rounds")
            + ")",
            rounds=list(tail),
            side="client training",
        )
    ]

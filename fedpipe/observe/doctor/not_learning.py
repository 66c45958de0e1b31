"""(h) The global model no better than guessing after several rounds."""

from __future__ import annotations

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import global_series, knobs, norm_layers
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt

#: not-learning: the global accuracy stays within this of guessing (1 / classes)
#: after at least NOT_LEARNING_ROUNDS rounds: an untrained model sits there, and a
#: model that learned anything at all on the default data is 30+ points above it
CHANCE_MARGIN = 0.05
NOT_LEARNING_ROUNDS = 3
#: ... and the local models are "learning" when they beat guessing by this much
LOCAL_LEARNS = 0.15


def check_not_learning(run: RunFiles) -> list[Finding]:
    """The global model no better than guessing after several rounds."""
    classes = run.n_classes
    rounds = sorted(run.rounds)
    if classes is None or len(rounds) < NOT_LEARNING_ROUNDS:
        return []
    chance = 1.0 / classes
    accuracy = global_series(run, "accuracy")
    values = [accuracy.get(k) for k in rounds]
    if any(v is None for v in values) or max(values) > chance + CHANCE_MARGIN:
        return []
    local = [
        run.rounds[k].get("local", {}).get("accuracy")
        for k in rounds
        if run.rounds[k].get("local", {}).get("accuracy") is not None
    ]
    best_local = max(local) if local else None
    evidence = [
        f"global held-out accuracy {fmt(values[0])} at round {rounds[0]} -> "
        f"{fmt(values[-1])} at round {rounds[-1]}; guessing gives {fmt(chance)} "
        f"({classes} classes)",
    ]
    if best_local is not None:
        evidence.append(
            f"local models on their own tests: best mean accuracy {fmt(best_local)}"
        )
    batch_norm = any(norm_layers(h) for h in run.health.values())
    side = "client training"
    if best_local is not None and best_local > chance + LOCAL_LEARNS:
        side = "server aggregation" if batch_norm else "partition"
        fix = (
            "the clients learn but their aggregate does not: "
            + (
                "with batch normalization the global model's moving statistics "
                "barely move in short rounds and its averaged layers no longer fit "
                "them; try personalization.method: fedbn, more train.epochs, or "
                "model.batch_norm: false"
                if batch_norm
                else "look for client drift (non-i.i.d. data): strategy.name: "
                "fedprox or scaffold, fewer train.epochs"
            )
            + ". Now "
            + knobs(run, "partition.method", "strategy.name", "train.epochs")
        )
    else:
        fix = (
            "nothing learns, locally or globally: raise train.lr or train.epochs "
            f"(now {knobs(run, 'train.lr', 'train.epochs')}), "
            "try a model that fits the data (model.name), and check that the labels "
            "belong to the features"
        )
    return [
        Finding(
            code=codes.NOT_LEARNING,
            severity="warning",
            title=f"the global model is no better than guessing after {len(rounds)} "
            "rounds",
            evidence=evidence,
            fix=fix,
            rounds=rounds,
            side=side,
        )
    ]

"""Layers of the global model whose ReLU units all died.

From the health records' ``dead_units`` (per ReLU layer, the share of units whose
output is 0 on every sample of a fixed probe batch; :mod:`fedpipe.model.probe`): a dead
unit gets no gradient and does not come back. A layer that is all dead makes the
model's output constant. Large learning rates (one step throws the biases far
negative) do this.
"""

from __future__ import annotations

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import knobs, param
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles

#: this share of a layer's units dead, to the last round: all of them. Many dead
#: units alone are no fault: a binary MLP (digits 4/9, Adam) kept 72% of its
#: hidden units dead and reached 94% accuracy; the FedAvg, FedAvgM and FedAdam
#: runs that learn the ten digits 0-19%. A layer with no live unit passes
#: nothing on: the model's output no longer depends on its input
DEAD_SHARE = 1.0


def dead_layers(run: RunFiles) -> dict[str, tuple[int, float]]:
    """Layer -> (round from which at least DEAD_SHARE of it is dead to the end,
    its share in the last round)."""
    rounds = [k for k in sorted(run.health) if run.health[k].get("dead_units")]
    if not rounds:
        return {}
    last = run.health[rounds[-1]]["dead_units"]
    return {
        name: (dead_since(run, rounds, name, DEAD_SHARE), float(share))
        for name, share in last.items()
        if share is not None and share >= DEAD_SHARE
    }


def dead_since(run: RunFiles, rounds: list[int], name: str, share: float) -> int:
    """The first of ``rounds`` from which ``name``'s dead share stays >= ``share``
    (the last round's must be)."""
    start = rounds[-1]
    for k in reversed(rounds):
        value = run.health[k]["dead_units"].get(name)
        if value is None or value < share:
            break
        start = k
    return start


def check_dead_units(run: RunFiles) -> list[Finding]:
    """Layers of the global model whose ReLU units are all dead, to the end."""
    layers = dead_layers(run)
    if not layers:
        return []
    evidence = [
        f"layer {name}: {share:.0%} of its ReLU units output 0 for every probe "
        f"sample, from round {start} to the last"
        for name, (start, share) in layers.items()
    ]
    first = min(start for start, _ in layers.values())
    lr = param(run, "train.lr")
    try_ = f" -> try {lr / 10:g}" if isinstance(lr, float) else ""
    now = knobs(run, "train.lr", "train.optimizer")
    return [
        Finding(
            code=codes.DEAD_UNITS,
            severity="error",
            title=(
                f"layer {', '.join(layers)} of the global model is dead (all its "
                f"ReLU outputs are 0) from round {first}"
            ),
            evidence=evidence,
            fix=(
                "a step too large threw the units' biases far negative, and dead "
                f"units get no gradient: lower train.lr ({now}){try_}"
                "; a smaller server step if the strategy has one (strategy.server_lr)"
            ),
            rounds=sorted(
                {
                    k
                    for k in run.health
                    if k >= first and run.health[k].get("dead_units")
                }
            ),
            side="client training",
        )
    ]

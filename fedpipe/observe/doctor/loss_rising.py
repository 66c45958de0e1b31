"""(a) The global held-out loss rises while accuracy holds: over-confidence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import global_series, knobs
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt

#: the last global loss must exceed the best earlier one by this factor: a 50% rise
#: is far beyond round-to-round noise of a held-out loss on hundreds of samples
LOSS_RISE_FACTOR = 1.5
#: ... and by this much in absolute terms, so a tiny loss (0.01 -> 0.02) is no rise
LOSS_RISE_MIN = 0.05
#: accuracy "holds" if it is no more than this below its value at the best loss
#: (two points: the noise of accuracy on a few hundred held-out samples)
ACCURACY_HOLD = 0.02
#: a rise by this factor is an error: the seed question's 10k loss is this kind
LOSS_RISE_SEVERE = 10.0
#: a layer "grew" if its weight norm rose by more than this share since the best
#: round (healthy layers drift a few percent over a run)
LAYER_GROWTH = 0.10


def check_loss_rising(run: RunFiles) -> list[Finding]:
    """The global held-out loss rises while accuracy holds: over-confidence."""
    loss = {k: v for k, v in global_series(run, "loss").items() if v is not None}
    accuracy = global_series(run, "accuracy")
    if len(loss) < 3 or min(loss.values()) < 0:
        return []
    last = max(loss)
    best = min((k for k in loss if k < last), key=lambda k: loss[k])
    low, high = loss[best], loss[last]
    if not (high >= LOSS_RISE_FACTOR * low and high - low >= LOSS_RISE_MIN):
        return []
    acc_best, acc_last = accuracy.get(best), accuracy.get(last)
    if acc_best is None or acc_last is None or acc_last < acc_best - ACCURACY_HOLD:
        return []
    evidence = [
        f"global held-out loss {fmt(low)} at round {best} -> {fmt(high)} at round "
        f"{last} ({high / low:.3g}x); accuracy {fmt(acc_best, 3)} -> "
        f"{fmt(acc_last, 3)}"
    ]
    hb, hl = (
        run.health.get(best, {}).get("global"),
        run.health.get(last, {}).get("global"),
    )
    if hb and hl:
        evidence.append(
            f"mean confidence {fmt(hb.get('mean_confidence'), 3)} -> "
            f"{fmt(hl.get('mean_confidence'), 3)}, calibration error (ECE) "
            f"{fmt(hb.get('ece'), 3)} -> {fmt(hl.get('ece'), 3)}"
        )
        share = hl.get("loss_top_share")
        if share is not None:
            evidence.append(
                f"round {last}: the worst 1% of held-out samples carry {share:.0%} of "
                "the loss (confidently wrong predictions: Keras computes the loss "
                "from logits, so it is unbounded)"
            )
        if hb.get("weight_norm") and hl.get("weight_norm"):
            evidence.append(
                f"global weight norm {fmt(hb['weight_norm'])} -> "
                f"{fmt(hl['weight_norm'])}"
            )
        grown = _grown_layers(run.health[best], run.health[last])
        if grown:
            evidence.append(
                "layers that grew: "
                + ", ".join(f"{name} x{g:.3g}" for name, g in grown[:4])
            )
    severe = high / low >= LOSS_RISE_SEVERE
    return [
        Finding(
            code=codes.LOSS_RISING_ACCURACY_HOLDS,
            severity="error" if severe else "warning",
            title="global loss rises while accuracy holds: the model grows "
            "over-confident",
            evidence=evidence,
            fix=(
                "the loss is dominated by a few confidently wrong samples whose "
                "logits keep growing; look for a cause above (aggregation weights, "
                "an outlier client, labels); otherwise keep the model of round "
                f"{best} (best loss) or train less: lower train.lr, fewer "
                "train.epochs or federation.rounds; judge the run by accuracy/AUC "
                "rather than by the loss. Now "
                + knobs(run, "train.lr", "train.optimizer", "train.epochs")
                + f", federation.rounds = {len(loss)}"
            ),
            rounds=sorted(k for k in loss if k >= best),
            side="client training",
        )
    ]


def _grown_layers(
    first: Mapping[str, Any], last: Mapping[str, Any]
) -> list[tuple[str, float]]:
    before = {
        layer["name"]: layer.get("weight_norm") for layer in first.get("layers", [])
    }
    out = []
    for layer in last.get("layers", []):
        a, b = before.get(layer["name"]), layer.get("weight_norm")
        if a and b and b / a > 1 + LAYER_GROWTH:
            out.append((layer["name"], b / a))
    return sorted(out, key=lambda item: -item[1])

"""(i) A table's feature columns fed to the model on scales far apart.

fedpipe stores a table's columns as they are in the file (``scale`` 1.0); unless
``preprocess.numeric`` standardizes them, or the model normalizes its own inputs,
a column measured in thousands and one in thousandths reach the first layer as
they are. The gradient of a first-layer weight is proportional to its column's
size and that weight's effect too, so one learning rate cannot serve both: it
blows up on the large columns or leaves the small ones unused, and the doctor
would otherwise blame ``train.lr`` (the seed case: a public breast-cancer table
with columns from about 0.05 to 4,254 trained to below the majority class, and the
first finding was the learning rate).

The sizes are the prepared table's per-column root mean squares
(:attr:`~fedpipe.observe.runfiles.RunFiles.columns`): what the first layer sees,
offset and spread together.
"""

from __future__ import annotations

from typing import Any

from fedpipe.core.dotted import lookup
from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt

#: largest over smallest column size (root mean square) beyond which the inputs
#: count as unscaled: standardized columns are all about 1, raw measurements of
#: one kind (pixels, counts) stay within 10x of each other, and at 100x a step
#: that moves the small columns' weights by 1% moves the large ones' by 100x
#: that, squared in their effect on the first layer
SCALE_RATIO = 100.0
#: columns named at each end of the range (the widest apart)
SHOWN_COLUMNS = 3
#: ``preprocess.numeric`` values that leave numeric columns as they are (the key
#: absent: fedpipe before federated preprocessing, which fed them raw)
RAW_NUMERIC = (None, "none")


def check_inputs(run: RunFiles) -> list[Finding]:
    """Feature columns whose sizes differ by more than :data:`SCALE_RATIO`."""
    numeric = lookup(run.params or {}, "preprocess.numeric")
    if numeric not in RAW_NUMERIC or _model_normalizes(run):
        return []
    sized = [c for c in run.columns or [] if c.get("rms")]
    if len(sized) < 2:
        return []
    ordered = sorted(sized, key=lambda c: c["rms"])
    small, large = ordered[0], ordered[-1]
    ratio = large["rms"] / small["rms"]
    if ratio <= SCALE_RATIO:
        return []
    shown = min(SHOWN_COLUMNS, len(ordered) // 2)
    evidence = [
        f"data/prepared/features.npy: {len(sized)} feature columns whose sizes (root "
        f"mean square) run from {fmt(small['rms'])} to {fmt(large['rms'])}: "
        f"{ratio:.3g}x apart (more than {SCALE_RATIO:g}x counts as unscaled)",
        "largest: " + _columns(reversed(ordered[-shown:])),
        "smallest: " + _columns(ordered[:shown]),
        f"preprocess.numeric = {'none' if numeric is None else numeric}: the "
        "columns reach the model as they are in the file",
    ]
    model = str(lookup(run.params or {}, "model.name", "?"))
    user_model = ":" in model
    fix = (
        "set preprocess.numeric: standard (each column scaled by the federated "
        "mean and standard deviation of the clients' training rows) and rerun; "
        f"now preprocess.numeric = {'none' if numeric is None else numeric}"
    )
    if user_model:
        fix += (
            f"; or, in your model ({model}), normalize the inputs first (a "
            "keras.layers.Normalization layer adapted to the training rows)"
        )
    return [
        Finding(
            code=codes.INPUTS_UNSCALED,
            severity="error",
            title="the table's inputs are left unscaled: its columns' sizes differ "
            f"{ratio:.3g}x ({large['name']} vs {small['name']})",
            evidence=evidence,
            fix=fix,
            side="data",
        )
    ]


def _columns(columns: Any) -> str:
    return ", ".join(
        f"{c['name']} (rms {fmt(c['rms'])}, max |x| {fmt(c['max_abs'])})"
        for c in columns
    )


def _model_normalizes(run: RunFiles) -> bool:
    """Whether the model's first weight-bearing layer is a normalization layer
    (a Keras ``Normalization`` or batch norm on the inputs), as the health records
    list the layers; unknown (no record) is False."""
    for h in run.health.values():
        layers = h.get("layers") or []
        if layers:
            return layers[0].get("kind") == "norm"
    return False

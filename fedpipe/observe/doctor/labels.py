"""(c) Labels outside the range the model's loss expects.

Exact, no threshold: a label is in ``0 .. C-1`` (``0/1`` for one sigmoid output)
or it is not. A negative held-out loss, which cross-entropy cannot give with
labels it accepts, is the same fault seen from the metrics.
"""

from __future__ import annotations

import numpy as np

from fedpipe.observe.doctor import codes
from fedpipe.observe.doctor.base import global_series, knobs
from fedpipe.observe.doctor.findings import Finding
from fedpipe.observe.runfiles import RunFiles, fmt, rounds_text


def check_labels(run: RunFiles) -> list[Finding]:
    """Labels outside ``0 .. C-1`` (``0/1`` for one sigmoid output)."""
    c = run.n_classes
    evidence: list[str] = []
    rounds: list[int] = []
    if c is not None and run.labels is not None and run.labels.size:
        values, counts = np.unique(run.labels, return_counts=True)
        bad = (values < 0) | (values >= c)
        if bad.any():
            expected = "0/1 (one sigmoid output)" if c == 2 else f"0..{c - 1}"
            expected += _named_classes(run)
            shown = ", ".join(
                f"{int(v)} ({int(n)} samples)"
                for v, n in zip(values[bad], counts[bad], strict=True)
            )
            evidence.append(
                f"data/prepared/samples.parquet: labels {shown} outside {expected}; "
                f"schema.json declares {c} classes, so the model has "
                f"{'one sigmoid output' if c == 2 else f'{c} softmax outputs'}"
            )
            holders = _clients_holding(run, set(int(v) for v in values[bad]))
            if holders:
                evidence.append(
                    "clients training on them: "
                    + ", ".join(f"client {k} ({n})" for k, n in holders[:10])
                )
    negative = {
        k: v for k, v in global_series(run, "loss").items() if v is not None and v < 0
    }
    if negative:
        k = min(negative, key=lambda r: negative[r])
        rounds = sorted(negative)
        evidence.append(
            f"global held-out loss is negative in {rounds_text(rounds)} (down to "
            f"{fmt(negative[k])} in round {k}): cross-entropy cannot be negative "
            "with labels the loss accepts"
        )
    if not evidence:
        return []
    return [
        Finding(
            code=codes.LABELS_OUTSIDE_LOSS_RANGE,
            severity="error",
            title="labels outside the range the model's loss expects",
            evidence=evidence,
            fix=(
                "map labels to 0..C-1 before ingest (0/1 for a binary task: the "
                "sigmoid output's cross-entropy rewards a label of 2 for an "
                "ever larger logit, so the loss falls without bound and the weights "
                "grow); for tables set data.label_column / data.num_classes to "
                "match; then rerun from ingest (now "
                + knobs(run, "data.label_column", "data.num_classes")
                + ")"
            ),
            rounds=rounds,
            side="data",
        )
    ]


def _named_classes(run: RunFiles) -> str:
    """`` (0 cat, 1 dog)`` when the classes have names other than their indices."""
    names = [str(n) for n in (run.schema or {}).get("class_names", [])]
    if not names or names == [str(i) for i in range(len(names))]:
        return ""
    shown = ", ".join(f"{i} {n}" for i, n in enumerate(names[:10]))
    return f" ({shown}{', ...' if len(names) > 10 else ''})"


def _clients_holding(run: RunFiles, bad: set[int]) -> list[tuple[int, int]]:
    """(client, number of training samples with a bad label), most first."""
    if run.manifest is None or run.labels is None or run.sample_ids is None:
        return []
    label_of = dict(zip(run.sample_ids, run.labels, strict=True))
    out = []
    for entry in run.manifest.get("clients", []):
        n = sum(1 for sid in entry.get("train", []) if label_of.get(sid) in bad)
        if n:
            out.append((int(entry["client"]), n))
    return sorted(out, key=lambda item: -item[1])

"""A run's history: one row per round, read back from the rounds' metrics files."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fedpipe.config import layout
from fedpipe.core.jsonio import read_json
from fedpipe.model.metrics import METRIC_NAMES, PRECISION_RECALL_MEANING

GROUPS = ("global", "global_on_clients", "global_on_clients_std", "local", "local_std")
# present only when personalization.method is not none
PERSONALIZED_GROUPS = ("personalized", "personalized_std")
GROUP_TITLES = {
    "global": "global model, held-out test",
    "global_on_clients": "global model, client tests (mean ± std)",
    "local": "local models, own tests (mean ± std)",
    "personalized": "personalized models, own tests (mean ± std)",
}


def flatten(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``{"global": {"loss": ..}}`` -> ``{"global_loss": ..}`` plus the round number."""
    row: dict[str, Any] = {"round": summary["round"]}
    extra = PERSONALIZED_GROUPS if "personalized" in summary else ()
    for group in GROUPS + extra:
        for name in METRIC_NAMES:
            value = summary.get(group, {}).get(name)
            row[f"{group}_{name}"] = float("nan") if value is None else value
    row["n_selected"] = len(summary.get("clients_selected", []))
    if "privacy" in summary:
        epsilon = summary["privacy"].get("epsilon")
        row["epsilon"] = float("inf") if epsilon is None else epsilon
    return row


def class_names(root: Path = Path(".")) -> list[str] | None:
    """The prepared data's class names (``schema.json``), None without one."""
    path = root / layout.PREPARED_SCHEMA
    if not path.exists():
        return None
    names = read_json(path).get("class_names")
    return None if names is None else [str(n) for n in names]


def load_history(rounds: int, root: Path = Path(".")) -> pd.DataFrame:
    """One row per round 1..rounds, from ``metrics/rounds/round-K.json``."""
    rows = [
        flatten(read_json(root / layout.round_metrics(k))) for k in range(1, rounds + 1)
    ]
    return pd.DataFrame(rows)


def progress_line(summary: Mapping[str, Any], rounds: int, seconds: float) -> str:
    """The line printed after each round."""
    g, lo, sd = summary["global"], summary["local"], summary["local_std"]
    selected = len(summary["clients_selected"])
    out = len(summary.get("clients_excluded", {}))
    clients = (
        f"{selected - out} of {selected} clients, {out} out"
        if out
        else f"{selected} clients"
    )
    if "clients_scored" in summary:  # not every client's test split this round
        clients += f", global scored on {summary['clients_scored']}"
    if summary.get("model_kept"):  # too few updates for the strategy
        clients += ", too few for the strategy: model kept"

    def fmt(v: float | None) -> str:
        return "  nan " if v is None else f"{v:.4f}"

    return (
        f"round {summary['round']:>3}/{rounds}  "
        f"global acc {fmt(g['accuracy'])} loss {fmt(g['loss'])}  |  "
        f"local acc {fmt(lo['accuracy'])} ± {fmt(sd['accuracy'])} "
        f"loss {fmt(lo['loss'])}  "
        f"({clients}, {seconds:.1f} s{wire_text(summary)})"
        + privacy_text(summary, short=True)
    )


def wire_text(summary: Mapping[str, Any]) -> str:
    """``", ↑ 1.2 MB ↓ 4.7 MB"``: the round's bytes up and down (with the
    codec and its ratio to float32 weights when the uplink is compressed), for
    the round line's parentheses; empty for a record without them. Under DP
    the published record keeps only the per-client figures: then those,
    marked ``/client``."""
    w = summary.get("wire")
    if not w:
        return ""
    if "uplink_bytes" in w:
        up, down = human_bytes(w["uplink_bytes"]), human_bytes(w["downlink_bytes"])
        text = f", ↑ {up} ↓ {down}"
    else:
        up = human_bytes(w["uplink_bytes_per_client"])
        down = human_bytes(w["downlink_bytes_per_client"])
        text = f", ↑ {up}/client ↓ {down}/client"
    if w.get("uplink", "none") != "none" and w.get("uplink_ratio") is not None:
        text += f", {w['uplink']} {w['uplink_ratio']:.3g}×"
    return text


def human_bytes(n: float) -> str:
    """``n`` bytes as ``512 B``, ``12.3 kB``, ``4.7 MB`` or ``1.2 GB`` (powers of
    1,000)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{int(n)} B"


def privacy_text(summary: Mapping[str, Any], *, short: bool = False) -> str:
    """``"  ε 1.23"`` (``short``: the progress line) or a sentence naming the
    mechanism, epsilon, delta, sigma and the clip; empty without privacy."""
    p = summary.get("privacy")
    if not p:
        return ""
    eps = "∞" if p.get("epsilon") is None else f"{p['epsilon']:.3g}"
    void = "guarantee" in p  # privacy.noise_key: params_not_private
    record = p.get("level") == "record"  # DP-SGD: the worst client's epsilon
    if short:
        text = f"  ε {eps}" + (" (records, worst client)" if record else "")
        stopped = p.get("stopped") or []
        if stopped:
            text += f", {len(stopped)} out of budget"
        return text + (" (NOT PRIVATE: noise from params)" if void else "")
    if record:
        text = (
            f"Differential privacy (DP-SGD, record level): ε = {eps} at "
            f"δ = {p['delta']:g} after round {summary['round']} for the worst "
            f"client (noise multiplier {p['noise_multiplier']:g}, clip norm "
            f"{p['clip_norm']:g} per record, accountant {p['accountant']})"
        )
        if void:
            text += f". NOT PRIVATE: guarantee {p['guarantee']}"
        return text
    # under DP the published records leave out the exact clipped share (the
    # oracle's: fedpipe.federation.privacy.views); older records name no accountant
    clipped = (
        f", {p['clipped_fraction']:.0%} of updates clipped"
        if "clipped_fraction" in p
        else ""
    )
    accountant = f", accountant {p['accountant']}" if "accountant" in p else ""
    text = (
        f"Differential privacy ({p['mechanism']}, client level): ε = {eps} at "
        f"δ = {p['delta']:g} after round {summary['round']} "
        f"(noise multiplier {p['noise_multiplier']:g}, clip norm "
        f"{p['clip_norm']:g}{clipped}{accountant})"
    )
    if void:
        text += f". NOT PRIVATE: guarantee {p['guarantee']}"
    return text


def final_table(
    summary: Mapping[str, Any], class_names: Sequence[str] | None = None
) -> str:
    """Markdown table of global vs local metrics for one round's summary, what
    precision and recall mean, and the global model's per-class recall on the
    held-out set (``global_classes``, classes named by ``class_names``)."""
    groups = [g for g in GROUP_TITLES if g in summary]
    header = "| metric | " + " | ".join(GROUP_TITLES[g] for g in groups) + " |"
    lines = [header, "|---|" + "---:|" * len(groups)]
    for name in METRIC_NAMES:
        if name not in summary["global"]:
            continue  # a record from before the metric existed
        cells = []
        for group in groups:
            value = summary[group].get(name)
            cell = "n/a" if value is None else f"{value:.4f}"
            spread = summary.get(f"{group}_std", {}).get(name)
            if spread is not None and value is not None:
                cell += f" ± {spread:.4f}"
            cells.append(cell)
        lines.append(f"| {name.replace('_', ' ')} | " + " | ".join(cells) + " |")
    lines += ["", PRECISION_RECALL_MEANING + "."]
    per_class = class_table(summary, class_names)
    if per_class:
        lines += ["", per_class]
    if "privacy" in summary:
        lines += ["", privacy_text(summary)]
    return "\n".join(lines)


def class_label(label: int, class_names: Sequence[str] | None) -> str:
    """A class as a person knows it: its name (``spam``); ``class 3`` for a
    label without a name or named by its own number (the digits)."""
    if class_names is not None and 0 <= label < len(class_names):
        name = str(class_names[label])
        return f"class {name}" if name == str(label) else name
    return f"class {label}"


def class_table(
    summary: Mapping[str, Any], class_names: Sequence[str] | None = None
) -> str:
    """The global model's per-class recall, precision and support on the held-out
    set (markdown; empty for a record without ``global_classes``)."""
    classes = summary.get("global_classes")
    if not classes:
        return ""

    def cell(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.4f}"

    lines = [
        "| class (global model, held-out test) | recall | precision | samples |",
        "|---|---:|---:|---:|",
    ]
    rows = zip(classes["recall"], classes["precision"], classes["support"], strict=True)
    for label, (recall, precision, support) in enumerate(rows):
        lines.append(
            f"| {class_label(label, class_names)} | {cell(recall)} | "
            f"{cell(precision)} | {support} |"
        )
    return "\n".join(lines)

"""One self-contained HTML page per run: metrics, health, data, findings, lineage.

:func:`write_report` reads a run's files once
(:func:`fedpipe.observe.runfiles.load_run`; paths relative to the project root, see
:mod:`fedpipe.config.layout`) and writes a single HTML file with inline CSS and inline
SVG plots, so it opens offline and can be mailed or archived as it is. Every section is
built independently: a missing input becomes a "not recorded (run ...)" note in its
section, and an unreadable one a note naming the file and the error, never a failed
report.

Sections, each from its own files:

- global vs local metrics per round: ``metrics/rounds/round-K.json`` (or
  ``metrics/history.csv`` when the per-round files are gone);
- per-layer divergence over rounds and client update norms:
  ``metrics/health/round-K.json``;
- label distribution per client: ``reports/partition/class_counts.csv`` (or the
  partition manifest ``data/partition/manifest.json``);
- the doctor's findings: ``fedpipe.observe.doctor.diagnose(root)`` when that module
  exists;
- lineage: ``params.yaml``, output hashes from ``dvc.lock``, the git commit.

matplotlib is imported inside the plotting functions and draws on a
:class:`~matplotlib.figure.Figure` (no pyplot state) whose axes are placed here, from
the sizes of the texts around them (no layout engine: each figure is drawn once);
nothing here imports Prefect, DVC or TensorFlow.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import gc
import html
import importlib
import io
import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from fedpipe.config import layout
from fedpipe.core import atomic
from fedpipe.observe.runfiles import (
    CLASS_COUNTS_CSV,
    DVC_LOCK,
    RunFiles,
    flat_params,
    fmt,
    load_run,
    read_commit,
    read_lock_inputs,
    read_lock_outs,
    rounds_text,
)

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "SECTION_TITLES",
    "Section",
    "build_report",
    "read_health",
    "read_history",
    "read_label_counts",
    "read_lineage",
    "render_findings",
    "render_page",
    "run_doctor",
    "write_report",
]

HEALTH_DIR = layout.HEALTH_METRICS_DIR  # the health contract's round-K.json

SECTION_TITLES = {
    "metrics": "Global vs local metrics",
    "divergence": "Per-layer divergence",
    "norms": "Client update norms",
    "validation": "Data validation warnings",
    "labels": "Label distribution per client",
    "stats": "Federated statistics and feature skew",
    "wire": "What crossed the wire",
    "doctor": "Doctor's findings",
    "lineage": "Lineage",
}

_ANNOTATE_MAX_CELLS = 160  # write values into heatmap cells up to this many
_LEGEND_MAX_CLIENTS = 12  # name each client in a legend up to this many
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, IndexError, yaml.YAMLError)


@dataclasses.dataclass(frozen=True)
class Section:
    """One ``<section>`` of the page: an anchor id, a heading and its HTML body."""

    id: str
    title: str
    body: str


# ---------------------------------------------------------------- reading


def _as_run(run: RunFiles | Path) -> RunFiles:
    return run if isinstance(run, RunFiles) else load_run(Path(run))


def read_history(run: RunFiles | Path) -> tuple[pd.DataFrame | None, str]:
    """Per-round metrics of a run and the file(s) they came from.

    Parameters
    ----------
    run : RunFiles or Path
        The run's files, or the project directory to read them from.

    Returns
    -------
    (pandas.DataFrame or None, str)
        One row per recorded round, sorted by ``round``, with the columns of
        ``metrics/history.csv`` (``global_loss``, ``local_std_accuracy``, ...;
        missing values NaN), from ``metrics/rounds/round-K.json`` if any
        exist, else from ``metrics/history.csv``; ``None`` if neither exists.
        The string names the source.

    Raises
    ------
    Exception
        What reading the round files (or ``history.csv``) raised.
    """
    import pandas as pd

    from fedpipe.observe.history import flatten

    run = _as_run(run)
    run.require("rounds")
    if run.rounds:
        rows = [flatten(summary) for summary in run.rounds.values()]
        frame = pd.DataFrame(rows).sort_values("round", ignore_index=True)
        return frame, f"{layout.ROUND_METRICS_DIR}/round-K.json"
    run.require("history")
    if run.history is not None:
        frame = run.history.sort_values("round", ignore_index=True)
        return frame, str(layout.HISTORY_CSV)
    return None, ""


def read_health(run: RunFiles | Path) -> list[dict[str, Any]]:
    """Every recorded round health record, by ascending round (``[]`` if none)."""
    run = _as_run(run)
    run.require("health")
    return list(run.health.values())


def read_label_counts(run: RunFiles | Path) -> tuple[pd.DataFrame | None, str]:
    """Train class counts per client and the file they came from.

    Returns
    -------
    (pandas.DataFrame or None, str)
        Columns ``client``, ``n_train``, ``n_test`` and one column per class
        (named by its class name, e.g. ``cat``, or the class index as a string), from
        ``reports/partition/class_counts.csv`` if it exists, else computed from
        ``data/partition/manifest.json``; ``None`` if neither exists.
    """
    run = _as_run(run)
    run.require("class_counts")
    if run.class_counts is not None:
        return run.class_counts, str(CLASS_COUNTS_CSV)
    run.require("manifest", "schema")
    if run.manifest is not None:
        from fedpipe.data.partition.diagnostics import class_count_table, shown_counts

        names = None if run.schema is None else run.schema.get("class_names")
        table = class_count_table(run.manifest, class_names=names)
        k = ((run.params or {}).get("preprocess") or {}).get("min_count_shown", 5)
        return shown_counts(table, int(k)).rename(columns=str), str(layout.MANIFEST)
    return None, ""


def read_lineage(run: RunFiles | Path) -> dict[str, Any]:
    """What made this run: params, output hashes from ``dvc.lock``, git commit.

    Returns
    -------
    dict
        ``params``: the parsed ``params.yaml`` or ``None``;
        ``outs``: ``[{"stage", "path", "md5", "size", "nfiles"}]`` of every
        stage's outs in ``dvc.lock`` order, or ``None`` without a lock file;
        ``inputs``: the same for the data the run read (``data.path``, a
        dependency in ``dvc.lock``); ``data_stages``: the data stages of this
        pipeline (:func:`fedpipe.config.layout.stage_names` for
        ``data.source``), whose outs under ``data/`` the report lists as data;
        ``commit``: ``HEAD``'s sha or ``None``; ``dirty``: number of changed or
        untracked paths (``git status --porcelain``) or ``None``;
        ``repository``: the project is a git repository (with or without a
        commit).
    """
    run = _as_run(run)
    run.require("params", "lock")
    data = (run.params or {}).get("data") or {}
    source = str(data.get("source") or layout.DEMO_STAGE)
    path = data.get("path")
    return {
        "params": run.params,
        "outs": run.lock_outs,
        "inputs": read_lock_inputs(run.root / DVC_LOCK, str(path)) if path else [],
        # the data stages of this pipeline (a stage dvc.lock still holds from
        # another data.source, e.g. the demo's mnist5k, is not this run's data)
        "data_stages": [s for s in layout.stage_names(0, source) if "@" not in s],
        "commit": run.commit.sha,
        "dirty": run.commit.dirty,
        "repository": run.commit.repository,
    }


def _finding_dict(finding: Any) -> dict[str, Any]:
    if isinstance(finding, Mapping):
        return dict(finding)
    if hasattr(finding, "to_dict"):
        return dict(finding.to_dict())
    return dataclasses.asdict(finding)


def run_doctor(root: Path) -> tuple[list[dict[str, Any]] | None, str]:
    """The doctor's findings as dicts, or ``None`` and why there are none.

    Calls ``fedpipe.observe.doctor.diagnose(root)`` if that module exists. A missing
    module gives ``(None, "doctor not available ...")``; an import error inside it
    or a failure of ``diagnose`` gives ``(None, "doctor failed: ...")``, so the
    rest of the report is still written.
    """
    try:
        doctor = importlib.import_module("fedpipe.observe.doctor")
    except ModuleNotFoundError as exc:
        if exc.name != "fedpipe.observe.doctor":
            return None, f"doctor failed to import: {exc}"
        return None, "doctor not available (this fedpipe has no fedpipe.observe.doctor)"
    except ImportError as exc:
        return None, f"doctor failed to import: {exc}"
    try:
        findings = doctor.diagnose(Path(root))
    except Exception as exc:  # a report with the doctor's error beats no report
        return None, f"doctor failed: {type(exc).__name__}: {exc}"
    return [_finding_dict(f) for f in findings], ""


# ---------------------------------------------------------------- plotting


def _new_figure(width: float, height: float) -> Figure:
    """A ``width`` x ``height`` inch figure laid out by matplotlib's constrained
    layout (margins for the texts, colorbars and legends outside the axes)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _svg(fig: Figure, *, label: str) -> str:
    """The figure as an inline ``<svg>`` element (text kept as text, no date)."""
    import matplotlib
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        # laid out already (``fig.tight_layout()``): savefig need not draw it twice
        fig.set_layout_engine(None)
    buf = io.StringIO()
    with matplotlib.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": "fedpipe-report"}
    ):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    svg = text[text.index("<svg") :]
    return svg.replace(
        "<svg ", f'<svg role="img" aria-label="{html.escape(label)}" ', 1
    )


def _plot(svg: str, caption: str, *, name: str) -> str:
    return (
        f'<figure class="plot" data-plot="{name}">{svg}'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
    )


_SERIES = (
    ("global", "global model, held-out test", "#1f77b4"),
    ("global_on_clients", "global model, client tests (mean ± std)", "#2ca02c"),
    ("local", "local models, own tests (mean ± std)", "#d62728"),
    ("personalized", "personalized models, own tests (mean ± std)", "#9467bd"),
)


def metrics_svg(history: pd.DataFrame) -> str:
    """Loss and accuracy per round: global, global on clients, local mean ± std."""
    from matplotlib.ticker import MaxNLocator

    fig = _new_figure(10.0, 3.8)
    rounds = history["round"].to_numpy(dtype=float)
    for i, (ax, metric) in enumerate(
        zip(fig.subplots(1, 2), ("loss", "accuracy"), strict=True)
    ):
        for group, label, color in _SERIES:
            column = f"{group}_{metric}"
            if column not in history:
                continue
            values = history[column].to_numpy(dtype=float)
            ax.plot(rounds, values, marker="o", markersize=3, color=color, label=label)
            std_column = f"{group}_std_{metric}"
            if group in ("local", "personalized") and std_column in history:
                std = history[std_column].to_numpy(dtype=float)
                ax.fill_between(
                    rounds, values - std, values + std, color=color, alpha=0.15
                )
        ax.set_xlabel("round")
        ax.set_ylabel(metric)
        ax.set_title(metric)
        ax.grid(alpha=0.3)
        if len(rounds) <= 20:
            ax.set_xticks(rounds)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if i == 0:
            ax.legend(fontsize=8)
    return _svg(fig, label="loss and accuracy per round")


def _layer_matrix(health: Sequence[Mapping[str, Any]]) -> tuple[np.ndarray, list, list]:
    """``(layers x rounds)`` divergence matrix, row labels, round numbers."""
    rows: dict[tuple[int, str], str] = {}
    for record in health:
        for layer in record.get("layers") or []:
            key = (int(layer["index"]), str(layer.get("name", "")))
            rows.setdefault(key, f"{key[0]} {key[1]} ({layer.get('kind', '?')})")
    keys = sorted(rows)
    rounds = [int(record["round"]) for record in health]
    matrix = np.full((len(keys), len(rounds)), np.nan)
    position = {key: i for i, key in enumerate(keys)}
    for j, record in enumerate(health):
        for layer in record.get("layers") or []:
            value = layer.get("divergence")
            key = (int(layer["index"]), str(layer.get("name", "")))
            if value is not None:
                matrix[position[key], j] = float(value)
    return matrix, [rows[k] for k in keys], rounds


def divergence_svg(health: Sequence[Mapping[str, Any]]) -> str:
    """Heatmap of each layer's divergence ``D_l`` (rows) over rounds (columns)."""
    import matplotlib

    matrix, labels, rounds = _layer_matrix(health)
    n_layers, n_rounds = matrix.shape
    width = min(max(6.0, 0.4 * n_rounds + 4.0), 16.0)
    height = min(max(2.5, 0.32 * n_layers + 1.6), 14.0)
    fig = _new_figure(width, height)
    ax = fig.add_subplot()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#dddddd")
    mesh = ax.pcolormesh(
        np.ma.masked_invalid(matrix), cmap=cmap, vmin=0.0, vmax=1.0, edgecolors="w"
    )
    fig.colorbar(mesh, ax=ax, label="divergence D")
    ax.set_xticks(np.arange(n_rounds) + 0.5, labels=[str(r) for r in rounds])
    ax.set_yticks(np.arange(n_layers) + 0.5, labels=labels)
    ax.invert_yaxis()
    ax.set_xlabel("round")
    ax.set_ylabel("layer")
    if n_rounds > 30:
        for tick in ax.get_xticklabels()[1::2]:
            tick.set_visible(False)
    if matrix.size <= _ANNOTATE_MAX_CELLS:
        for (row, col), value in np.ndenumerate(matrix):
            if np.isfinite(value):
                ax.text(
                    col + 0.5,
                    row + 0.5,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if value > 0.6 else "white",
                )
    return _svg(fig, label="per-layer divergence over rounds")


def norms_svg(health: Sequence[Mapping[str, Any]]) -> str:
    """Each selected client's update norm per round, with the per-round median."""
    from matplotlib.ticker import MaxNLocator

    points: dict[int, list[tuple[int, float]]] = {}
    medians: list[tuple[int, float]] = []
    for record in health:
        round_ = int(record["round"])
        norms = []
        for client in record.get("clients") or []:
            value = client.get("update_norm")
            if value is None:
                continue
            points.setdefault(int(client["client"]), []).append((round_, float(value)))
            norms.append(float(value))
        if norms:
            medians.append((round_, float(np.median(norms))))
    fig = _new_figure(8.0, 3.8)
    ax = fig.add_subplot()
    cmap = _cmap("tab20" if len(points) > 10 else "tab10")
    for i, (client, pts) in enumerate(sorted(points.items())):
        xs, ys = zip(*pts, strict=True)
        ax.scatter(xs, ys, s=14, color=cmap(i % cmap.N), label=f"client {client}")
    if medians:
        xs, ys = zip(*medians, strict=True)
        ax.plot(xs, ys, color="black", linewidth=1.2, label="median")
    values = [v for pts in points.values() for _, v in pts]
    if values and min(values) > 0 and max(values) / min(values) > 100:
        ax.set_yscale("log")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("round")
    ax.set_ylabel("update norm ||w_k - w_global||")
    ax.grid(alpha=0.3)
    if len(points) <= _LEGEND_MAX_CLIENTS:
        ax.legend(fontsize=7, ncols=2)
    else:
        ax.legend(handles=ax.get_lines()[-1:], fontsize=7)
    return _svg(fig, label="client update norms per round")


def _cmap(name: str):  # type: ignore[no-untyped-def]
    import matplotlib

    return matplotlib.colormaps[name]


def labels_svg(counts: pd.DataFrame) -> str:
    """Stacked horizontal bars: each client's train samples by class."""
    import pandas as pd
    from matplotlib.collections import PolyCollection

    classes = [c for c in counts.columns if c not in ("client", "n_train", "n_test")]
    # counts hidden under the minimum-count rule ("<k", ">=k") are drawn
    # together, grey, as what the shown ones leave of the client's n_train
    shown = counts[classes].apply(pd.to_numeric, errors="coerce")
    matrix = shown.fillna(0.0).to_numpy(dtype=float)
    total = pd.to_numeric(counts["n_train"], errors="coerce").to_numpy(dtype=float)
    hidden = np.nan_to_num(total - matrix.sum(axis=1), nan=0.0).clip(min=0.0)
    if shown.isna().to_numpy().any() and hidden.any():
        classes = [*classes, "hidden (few rows)"]
        matrix = np.column_stack([matrix, hidden])
    n_clients = len(counts)
    height = min(max(2.5, 0.28 * n_clients + 1.6), 16.0)
    if len(classes) <= 20:  # tall enough for the legend beside the bars
        height = max(height, 0.17 * (len(classes) + 1) + 0.4)
    fig = _new_figure(8.0, height)
    ax = fig.add_subplot()
    cmap = _cmap("tab20" if len(classes) > 10 else "tab10")
    ypos = np.arange(n_clients)
    # one collection of bars per class (as ax.barh draws them, with less work)
    right = np.cumsum(matrix, axis=1)
    for i, name in enumerate(classes):
        bars = PolyCollection(
            [
                [(x0, y - 0.4), (x0, y + 0.4), (x1, y + 0.4), (x1, y - 0.4)]
                for x0, x1, y in zip(
                    right[:, i] - matrix[:, i], right[:, i], ypos, strict=True
                )
            ],
            facecolors="#bbbbbb" if name == "hidden (few rows)" else cmap(i % cmap.N),
            label=str(name),
        )
        bars.sticky_edges.x.append(0.0)  # bars start at 0: no margin left of it
        ax.add_collection(bars)
    ax.set_yticks(ypos, labels=[str(c) for c in counts["client"]])
    ax.invert_yaxis()
    ax.set_xlabel("train samples")
    ax.set_ylabel("client")
    if len(classes) <= 20:
        ax.legend(title="class", fontsize=7, loc="center left", bbox_to_anchor=(1, 0.5))
    return _svg(fig, label="label distribution per client")


# ---------------------------------------------------------------- html pieces


def _note(text: str) -> str:
    return f'<p class="missing">{html.escape(text)}</p>'


def _paragraph(text: str) -> str:
    return f"<p>{html.escape(text)}</p>"


def _fmt(value: Any, digits: int = 4) -> str:
    """A table cell: ``digits`` decimals, ``n/a`` for None / NaN, HTML-escaped."""
    return html.escape(fmt(value, digits, decimals=True))


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    """An HTML table; cells are already HTML (escape before)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows
    )
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _final_round_table(history: pd.DataFrame) -> str:
    from fedpipe.model.metrics import METRIC_NAMES

    last = history.iloc[-1]
    series = [s for s in _SERIES if f"{s[0]}_loss" in history]
    rows = []
    for name in METRIC_NAMES:
        row = [html.escape(name)]
        for group, _, _ in series:
            cell = _fmt(last.get(f"{group}_{name}"))
            std = last.get(f"{group}_std_{name}")
            if cell != "n/a" and std is not None and np.isfinite(std):
                cell += f" ± {std:.4f}"
            row.append(cell)
        rows.append(row)
    header = ["metric"] + [label for _, label, _ in series]
    return f"<h3>Final round ({int(last['round'])})</h3>" + _table(
        header, rows, "numbers"
    )


def render_findings(
    findings: Sequence[Mapping[str, Any]] | None, note: str = ""
) -> str:
    """The doctor's findings as HTML, most important first as given.

    Parameters
    ----------
    findings : sequence of dict or None
        ``Finding.to_dict()`` values: ``code``, ``severity`` (``error`` |
        ``warning`` | ``info``), ``title``, ``evidence`` (list of str), ``fix``,
        ``rounds`` (list of int). Missing keys are shown as absent. ``None``:
        there are no findings to show, and ``note`` says why.
    note : str, optional
        Shown instead of the findings when ``findings`` is ``None``.
    """
    if findings is None:
        return _note(note or "doctor not available")
    if not findings:
        return '<p class="ok">The doctor found nothing to report for this run.</p>'
    counts: dict[str, int] = {}
    for f in findings:
        counts[str(f.get("severity", "info"))] = (
            counts.get(str(f.get("severity", "info")), 0) + 1
        )
    summary = ", ".join(f"{n} {sev}" for sev, n in counts.items())
    items = []
    for f in findings:
        severity = str(f.get("severity", "info"))
        sev_class = severity if severity in ("error", "warning", "info") else "info"
        evidence = "".join(
            f"<li>{html.escape(str(e))}</li>" for e in f.get("evidence") or []
        )
        rounds = f.get("rounds") or []
        parts = [
            f'<span class="badge {sev_class}">{html.escape(severity)}</span> '
            f"<strong>{html.escape(str(f.get('title', '')))}</strong> "
            f"<code>{html.escape(str(f.get('code', '')))}</code>"
        ]
        if rounds:
            text = html.escape(rounds_text(int(r) for r in rounds))
            parts.append(f'<div class="rounds">{text}</div>')
        if evidence:
            parts.append(f"<ul>{evidence}</ul>")
        if f.get("side"):
            parts.append(f'<div class="side">Side: {html.escape(str(f["side"]))}</div>')
        if f.get("fix"):
            parts.append(f'<div class="fix">Fix: {html.escape(str(f["fix"]))}</div>')
        items.append(f'<li class="finding {sev_class}">' + "".join(parts) + "</li>")
    return f'<p>{html.escape(summary)}</p><ol class="findings">{"".join(items)}</ol>'


def _outs_rows(outs: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    return [
        [
            html.escape(o["stage"]),
            f"<code>{html.escape(o['path'])}</code>",
            f"<code>{html.escape(str(o['md5']))}</code>",
            _fmt(o.get("size")),
        ]
        for o in outs
    ]


def _final_model_outs(outs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Outs of the highest ``round@K`` stage that wrote model files."""
    best: int | None = None
    for o in outs:
        match = re.fullmatch(rf"{layout.ROUND_STAGE}@(\d+)", o["stage"])
        if match and o["path"].startswith(str(layout.MODELS_DIR)):
            best = max(best or 0, int(match.group(1)))
    if best is None:
        return [o for o in outs if o["path"].startswith(str(layout.MODELS_DIR))]
    stage = f"{layout.ROUND_STAGE}@{best}"
    return [
        o
        for o in outs
        if o["stage"] == stage and o["path"].startswith(str(layout.MODELS_DIR))
    ]


def render_lineage(lineage: Mapping[str, Any]) -> str:
    """Git commit, data and model hashes, and params, from :func:`read_lineage`."""
    parts = ["<h3>Code</h3>"]
    if lineage.get("commit"):
        dirty = lineage.get("dirty") or 0
        state = (
            f" — {dirty} uncommitted change(s) in the work tree"
            if dirty
            else " (work tree clean)"
        )
        parts.append(
            f"<p>git commit <code>{html.escape(lineage['commit'])}</code>"
            f"{html.escape(state)}</p>"
        )
    elif lineage.get("repository"):  # `fedpipe init` makes one, with no commit
        parts.append(
            _note(
                "no git commit yet: the code of this run is not recorded "
                "(`git add -A && git commit -m ...` records it for the next run)"
            )
        )
    else:
        parts.append(
            _note(
                "not a git repository: no commit recorded (`fedpipe init` or "
                "`git init`, then commit)"
            )
        )

    parts.append("<h3>Data and model hashes (dvc.lock)</h3>")
    outs = lineage.get("outs")
    if outs is None:
        parts.append(_note("not recorded: no dvc.lock (run `fedpipe run`)"))
    elif not outs:
        parts.append(_note("dvc.lock records no stage outputs yet (run `fedpipe run`)"))
    else:
        header = ["stage", "path", "md5", "bytes"]
        stages = lineage.get("data_stages")
        ours = [o for o in outs if stages is None or o["stage"] in stages]
        data = list(lineage.get("inputs") or []) + [
            o for o in ours if o["path"].startswith("data/")
        ]
        model = _final_model_outs(outs)
        if data:
            parts.append("<h4>Data</h4>" + _table(header, _outs_rows(data), "hashes"))
        if model:
            parts.append(
                "<h4>Final model</h4>" + _table(header, _outs_rows(model), "hashes")
            )
        parts.append(
            f"<details><summary>All {len(outs)} stage outputs</summary>"
            + _table(header, _outs_rows(outs), "hashes")
            + "</details>"
        )

    parts.append("<h3>Params (params.yaml)</h3>")
    params = lineage.get("params")
    if params is None:
        parts.append(_note("not recorded: no params.yaml (run `fedpipe init`)"))
    else:
        rows = [
            [f"<code>{html.escape(k)}</code>", f"<code>{html.escape(_yaml(v))}</code>"]
            for k, v in flat_params(
                {k: v for k, v in params.items() if k != "round_chain"}
            )
        ]
        parts.append(_table(["key", "value"], rows, "params"))
    return "".join(parts)


def _yaml(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


# ---------------------------------------------------------------- sections


def _metrics_section(run: RunFiles) -> str:
    history, source = read_history(run)
    if history is None or history.empty:
        return _note(
            f"not recorded: no {layout.ROUND_METRICS_DIR}/round-K.json or "
            f"{layout.HISTORY_CSV} (run `fedpipe run`)"
        )
    caption = (
        f"{len(history)} round(s) from {source}. The band is the local models' "
        "mean ± one standard deviation across clients."
    )
    return (
        _plot(metrics_svg(history), caption, name="metrics")
        + _final_round_table(history)
        + _classes_table(run)
        + _privacy_note(run)
    )


def _classes_table(run: RunFiles) -> str:
    """The last round's global model per class on the held-out set (recall,
    precision, samples) and its confusion matrix, classes by name; what
    precision and recall mean."""
    from fedpipe.model.metrics import PRECISION_RECALL_MEANING
    from fedpipe.observe.history import class_label

    meaning = f"<p>{html.escape(PRECISION_RECALL_MEANING)}.</p>"
    last = run.rounds[max(run.rounds)] if run.rounds else {}
    classes = last.get("global_classes")
    if not classes:
        return meaning
    names = (run.schema or {}).get("class_names")
    labels = [class_label(c, names) for c in range(len(classes["support"]))]
    rows = [
        [html.escape(label), _fmt(recall), _fmt(precision), str(support)]
        for label, recall, precision, support in zip(
            labels,
            classes["recall"],
            classes["precision"],
            classes["support"],
            strict=True,
        )
    ]
    header = ["class (global model, held-out test)", "recall", "precision", "samples"]
    confusion = [
        [html.escape(label)] + [str(v) for v in row]
        for label, row in zip(labels, classes["confusion"], strict=True)
    ]
    return (
        meaning
        + _table(header, rows, "numbers")
        + "<details><summary>Confusion matrix (rows: true class, columns: "
        "predicted)</summary>"
        + _table(["true \\ predicted", *labels], confusion, "numbers")
        + "</details>"
    )


def _validation_section(root: Path) -> str:
    """The validation's warnings (``reports/validation/summary.json``): a class
    imbalance, repeated content, ... that did not stop the run."""
    path = root / layout.VALIDATION_DIR / "summary.json"
    if not path.is_file():
        return _note(f"not recorded: no {path.relative_to(root)} (run `fedpipe run`)")
    summary = json.loads(path.read_text(encoding="utf-8"))
    warnings = summary.get("warnings") or []
    head = (
        f"<p>validation {'passed' if summary.get('success') else 'failed'}: "
        f"{summary.get('n_rows')} rows, {summary.get('n_expectations')} "
        f"expectations, {len(warnings)} warning(s), from "
        f"{html.escape(str(layout.VALIDATION_DIR / 'summary.json'))}.</p>"
    )
    if not warnings:
        return head
    items = "".join(
        f"<li><code>{html.escape(str(w.get('expectation')))}</code> "
        f"[{html.escape(str(w.get('column') or 'table'))}]: "
        f"{html.escape(str(w.get('detail')))}</li>"
        for w in warnings
    )
    return head + f'<ul class="warnings">{items}</ul>'


def _privacy_note(run: RunFiles) -> str:
    """The last round's privacy spent (epsilon at delta), when the run has DP."""
    from fedpipe.observe.history import privacy_text

    last = run.rounds[max(run.rounds)] if run.rounds else {}
    text = privacy_text(last)
    note = f'<p class="privacy">{html.escape(text)}</p>' if text else ""
    if run.view_text:  # which view of a DP run this report read
        note += f'<p class="privacy view">{html.escape(run.view_text)}</p>'
    return note


_NO_HEALTH = (
    f"not recorded: no {HEALTH_DIR}/round-K.json (the round stage writes one per "
    "round; rerun the rounds: `fedpipe run --force`)"
)


def _wire_rows(run: RunFiles) -> list[tuple[int, dict[str, Any], float | None]]:
    """``(round, wire block, global accuracy)`` of each round that counted its
    bytes."""
    out = []
    for k, summary in sorted(run.rounds.items()):
        wire = summary.get("wire")
        if isinstance(wire, dict) and "uplink_bytes_per_client" in wire:
            accuracy = (summary.get("global") or {}).get("accuracy")
            out.append((k, wire, accuracy))
    return out


def wire_svg(rows: Sequence[tuple[int, Mapping[str, Any], float | None]]) -> str:
    """The global model's held-out accuracy against the uplink bytes sent so far
    (the round's total, or per client when only that is published)."""
    total = all("uplink_bytes" in w for _, w, _ in rows)
    key = "uplink_bytes" if total else "uplink_bytes_per_client"
    sent = np.cumsum([float(w[key]) for _, w, _ in rows]) / 1e6
    accuracy = [np.nan if a is None else a for *_, a in rows]
    fig = _new_figure(6.0, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(sent, accuracy, marker="o", markersize=3, color="#1f77b4")
    for (k, _, a), x in zip(rows, sent, strict=True):
        if a is not None and (k == rows[0][0] or k == rows[-1][0]):
            ax.annotate(f"round {k}", (x, a), fontsize=7, xytext=(3, -10),
                        textcoords="offset points")  # fmt: skip
    ax.set_xlabel("uplink MB sent so far" + ("" if total else " (per client)"))
    ax.set_ylabel("global accuracy (held-out)")
    ax.set_title("accuracy against bytes sent")
    ax.grid(alpha=0.3)
    return _svg(fig, label="accuracy against uplink bytes")


def _wire_section(run: RunFiles) -> str:
    """Bytes up and down per round, the codec and its ratio, secure
    aggregation's protocol bytes; accuracy against the bytes sent."""
    from fedpipe.observe.history import human_bytes

    rows = _wire_rows(run)
    if not rows:
        return _note(
            f"not recorded: no round in {layout.ROUND_METRICS_DIR} counted its bytes "
            "(rounds written before fedpipe did)"
        )
    last = rows[-1][1]
    secure = last.get("secure_aggregation")
    table_rows = []
    for k, w, _ in rows:
        up = (
            human_bytes(w["uplink_bytes"])
            if "uplink_bytes" in w
            else f"{human_bytes(w['uplink_bytes_per_client'])}/client"
        )
        down = (
            human_bytes(w["downlink_bytes"])
            if "downlink_bytes" in w
            else f"{human_bytes(w['downlink_bytes_per_client'])}/client"
        )
        ratio = w.get("uplink_ratio")
        table_rows.append([
            str(k), str(w.get("uplink", "none")), up, down,
            human_bytes(w["uplink_bytes_per_client"]),
            "-" if ratio is None else f"{ratio:.3g}",
        ])  # fmt: skip
    caption = (
        f"uplink: {last.get('uplink', 'none')}; the ratio is a client's reply "
        "against the model's float32 weights."
    )
    note = ""
    if secure:
        note = _paragraph(
            f"secure aggregation ({secure['protocol']}): {secure['num_shares']} "
            f"neighbours, {secure['reconstruction_threshold']} shares rebuild a "
            f"secret, {secure['quantization_bits']} bits per value; beside its "
            f"masked vector a client sends "
            f"{human_bytes(secure['key_bytes_per_client'])} of keys and shares "
            f"and {human_bytes(secure['reveal_bytes_per_client'])} to unmask; "
            f"{secure['dropped_after_sharing']} client(s) dropped after sharing "
            "in the last round."
        )
    return (
        _plot(wire_svg(rows), caption, name="wire")
        + _table(
            ["round", "uplink", "up", "down", "up per client", "ratio"], table_rows
        )
        + note
    )


def _divergence_section(run: RunFiles) -> str:
    health = read_health(run)
    if not any(record.get("layers") for record in health):
        return _note(_NO_HEALTH)
    caption = (
        "D = 1 − ||mean Δ||² / mean ||Δ||² over each layer's trainable weights: 0 when "
        "the clients' updates agree, near 1 when they are unrelated; grey: not "
        f"defined (all updates zero). From {HEALTH_DIR}/round-K.json."
    )
    return _plot(divergence_svg(health), caption, name="divergence")


def _norms_section(run: RunFiles) -> str:
    health = read_health(run)
    if not any(
        c.get("update_norm") is not None
        for record in health
        for c in record.get("clients") or []
    ):
        return _note(_NO_HEALTH)
    caption = (
        "||w_k − w_global|| of each selected client's trainable weights after local "
        f"training; the line is the per-round median. From {HEALTH_DIR}/round-K.json."
    )
    return _plot(norms_svg(health), caption, name="norms")


def _labels_section(run: RunFiles) -> str:
    counts, source = read_label_counts(run)
    if counts is None or counts.empty:
        return _note(
            f"not recorded: no {CLASS_COUNTS_CSV} or {layout.MANIFEST} "
            "(run `fedpipe stage partition`)"
        )
    from fedpipe.data.accounting import placement_line

    parts = []
    if run.manifest is not None:
        parts.append(f"<p>{html.escape(placement_line(run.manifest))}</p>")
    run.require("skew")
    if run.skew is not None:
        figures = {k: v for k, v in run.skew.items() if not isinstance(v, dict)}
        shown = ", ".join(f"{k} {_fmt(v, 3)}" for k, v in sorted(figures.items()))
        parts.append(f"<p>{shown}</p>")
        columns = run.skew.get("feature_skew_columns")
        if isinstance(columns, dict):
            from fedpipe.data.partition.featureskew import skewed_columns_text

            parts.append(f"<p>{html.escape(skewed_columns_text(columns))}</p>")
    caption = f"Local train samples of each client by class, from {source}."
    parts.append(_plot(labels_svg(counts), caption, name="labels"))
    rows = [[_fmt(v) for v in row] for row in counts.itertuples(index=False)]
    parts.append(
        "<details><summary>Class counts table</summary>"
        + _table([str(c) for c in counts.columns], rows, "numbers")
        + "</details>"
    )
    return "".join(parts)


def _stats_section(root: Path) -> str:
    """The clients' column statistics (``data/preprocess/stats.json``): the
    global table, the feature-skew heatmap, each client's table folded."""
    from fedpipe.data.preprocess.heatmap import skew_figure
    from fedpipe.observe.clientstats import (
        CLIENT_HEADER,
        GLOBAL_HEADER,
        category_lines,
        check_stats,
        client_rows,
        global_rows,
        heldout_lines,
    )

    path = root / layout.CLIENT_STATS
    if not path.is_file():
        return _note(
            f"not recorded: no {layout.CLIENT_STATS} (run `fedpipe stage preprocess`)"
        )
    stats = check_stats(json.loads(path.read_text()), str(layout.CLIENT_STATS))
    k, columns = stats["min_count"], list(stats["columns"])
    esc = [[html.escape(c) for c in row] for row in global_rows(stats, columns)]
    parts = [
        f"<p>{stats['kind']}, {stats['clients']} clients, "
        f"{html.escape(str(stats['rows']))} training "
        f"rows, from {html.escape(str(layout.CLIENT_STATS))} (the clients' training "
        f"splits only; counts below {k} are withheld: &lt;{k}). "
        "<code>fedpipe stats</code> prints the same.</p>",
        _table(list(GLOBAL_HEADER), esc, "numbers"),
    ]
    values = category_lines(stats["global"], columns, k)
    if values:
        held = heldout_lines(stats, columns)
        text = [f"Top values (values of fewer than {k} rows not shown):", *values]
        if held:
            text += ['Held-out rows whose category goes to "other":', *held]
        parts.append(f"<pre>{html.escape(chr(10).join(text))}</pre>")
    caption = (
        "Each client's column mean minus the global mean, in global standard "
        f"deviations; a blank cell is withheld (fewer than {k} values) or constant."
    )
    parts.append(_plot(_svg(skew_figure(stats), label="feature skew"), caption,
                       name="skew"))  # fmt: skip
    for i in range(int(stats["clients"])):
        rows = [[html.escape(c) for c in r] for r in client_rows(stats, i, columns)]
        labels = ", ".join(
            f"{name} {v}" for name, v in stats["per_client"][i]["labels"].items()
        )
        parts.append(
            f"<details><summary>Client {i}: "
            f"{html.escape(str(stats['per_client'][i]['rows']))} rows; "
            f"labels {html.escape(labels)}</summary>"
            + _table(list(CLIENT_HEADER), rows, "numbers")
            + _pre(category_lines(stats["per_client"][i]["columns"], columns, k))
            + "</details>"
        )
    return "".join(parts)


def _pre(lines: list[str]) -> str:
    """``lines`` as preformatted text ("" for none)."""
    return f"<pre>{html.escape(chr(10).join(lines))}</pre>" if lines else ""


def _guarded(build: Callable[[], str], what: str) -> str:
    """``build()``, or a note naming ``what`` and the error if it is unreadable."""
    try:
        return build()
    except _UNREADABLE as exc:
        return _note(f"could not read {what}: {type(exc).__name__}: {exc}")


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (if it runs) for the block.

    A figure is a web of reference cycles among thousands of small objects, all
    alive until its SVG is written. A collection while figures are built frees
    none of them but moves them on to the oldest generation, whose collections
    they then bring on: in a process that holds TensorFlow's 400,000 objects,
    0.2 s or more each. Paused, the figures are freed as young garbage by the
    first collection after the block.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


_DOCTOR = object()  # build_report's default: call the doctor


def build_report(
    root: Path,
    *,
    findings: Sequence[Mapping[str, Any]] | None | object = _DOCTOR,
    doctor_note: str = "",
    generated: str | None = None,
    run: RunFiles | None = None,
    lock_ready: Callable[[], None] | None = None,
) -> str:
    """The report of the run in ``root`` as one HTML document.

    Parameters
    ----------
    root : Path
        Project directory.
    findings : sequence of dict or None, optional
        The doctor's findings to show (``Finding.to_dict()`` values); ``None``
        shows ``doctor_note``. Default: call :func:`run_doctor`.
    doctor_note : str, optional
        Why there are no findings, when ``findings`` is ``None``.
    generated : str or None, optional
        Timestamp written in the footer; ``None`` writes none.
    run : RunFiles or None, optional
        The run's files, already read from ``root``; default: read them
        (:func:`fedpipe.observe.runfiles.load_run`).
    lock_ready : callable or None, optional
        Called (and whatever it raises raised) after every other section is
        built and before the lineage is read: ``fedpipe run`` waits there for
        its last ``dvc.lock`` records to land, so that the lineage names the
        hashes ``dvc.lock`` holds after the run while the rest of the page was
        built beside the record (``dvc.lock`` and the git state are read again
        after it).
    """
    root = Path(root)
    run = load_run(root) if run is None else run
    if findings is _DOCTOR:
        found, doctor_note = run_doctor(root)
    else:
        found = None if findings is None else [dict(f) for f in findings]  # type: ignore[union-attr]
    builders = {
        "metrics": (lambda: _metrics_section(run), "the round metrics"),
        "divergence": (lambda: _divergence_section(run), "the health records"),
        "norms": (lambda: _norms_section(run), "the health records"),
        "validation": (lambda: _validation_section(root), "the validation"),
        "labels": (lambda: _labels_section(run), "the partition"),
        "stats": (lambda: _stats_section(root), "the client statistics"),
        "wire": (lambda: _wire_section(run), "the round metrics' wire blocks"),
        "doctor": (lambda: render_findings(found, doctor_note), "the findings"),
        "lineage": (
            lambda: render_lineage(read_lineage(run)),
            "params.yaml / dvc.lock",
        ),
    }
    sections = []
    with _collector_paused():
        for key, (build, what) in builders.items():
            if key == "lineage" and lock_ready is not None:
                lock_ready()  # not guarded: a record that failed fails the run
                run = _relocked(run)
            sections.append(Section(key, SECTION_TITLES[key], _guarded(build, what)))
    return render_page(
        sections,
        title=f"fedpipe run report: {root.resolve().name}",
        generated=generated,
    )


def _relocked(run: RunFiles) -> RunFiles:
    """``run`` with ``dvc.lock``'s outs and the git state read again."""
    try:
        outs = read_lock_outs(run.root / DVC_LOCK)
    except Exception as exc:  # noqa: BLE001 - kept for the lineage to report
        return dataclasses.replace(run, errors={**run.errors, "lock": exc})
    errors = {k: v for k, v in run.errors.items() if k != "lock"}
    return dataclasses.replace(
        run, lock_outs=outs, commit=read_commit(run.root), errors=errors
    )


_CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
 margin:0 auto;max-width:1100px;padding:0 1.2rem 3rem;color:#1d1d1f}
h1{font-size:1.6rem;margin:1.4rem 0 .4rem}
h2{border-bottom:2px solid #e3e3e8;padding-bottom:.2rem;margin-top:2.2rem}
nav ul{list-style:none;padding:0;display:flex;flex-wrap:wrap;gap:.4rem 1rem}
figure.plot{margin:.6rem 0}
figure.plot svg{max-width:100%;height:auto;display:block}
figcaption{color:#555;font-size:.85rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
th,td{border:1px solid #ddd;padding:.2rem .5rem;text-align:left;vertical-align:top}
table.numbers td{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f4f4f7}
code{font-size:.85em;word-break:break-all}
p.missing{background:#fff8e1;border-left:4px solid #f0b400;padding:.5rem .8rem}
p.ok{background:#e8f5e9;border-left:4px solid #43a047;padding:.5rem .8rem}
ol.findings{padding-left:1.4rem}
li.finding{margin:.6rem 0;padding:.4rem .6rem;border-left:4px solid #90a4ae}
li.finding.error{border-color:#d32f2f}
li.finding.warning{border-color:#f0b400}
.badge{font-size:.75rem;padding:.05rem .4rem;border-radius:.3rem;color:#fff;
 background:#607d8b;text-transform:uppercase}
.badge.error{background:#d32f2f}.badge.warning{background:#b58100}
.rounds,.fix{font-size:.9rem;margin-top:.2rem}
footer{margin-top:3rem;color:#777;font-size:.8rem}
"""


def render_page(
    sections: Sequence[Section], *, title: str, generated: str | None = None
) -> str:
    """A complete HTML document: a contents list, then one section per entry."""
    toc = "".join(
        f'<li><a href="#{s.id}">{html.escape(s.title)}</a></li>' for s in sections
    )
    body = "".join(
        f'<section id="{s.id}"><h2>{html.escape(s.title)}</h2>{s.body}</section>'
        for s in sections
    )
    footer = "written by <code>fedpipe report</code>"
    if generated:
        footer += f" at {html.escape(generated)}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>"
        f"<body><h1>{html.escape(title)}</h1><nav><ul>{toc}</ul></nav>"
        f"{body}<footer>{footer}</footer></body></html>\n"
    )


def write_report(
    root: Path,
    out: Path | None = None,
    *,
    findings: Sequence[Mapping[str, Any]] | None | object = _DOCTOR,
    run: RunFiles | None = None,
    lock_ready: Callable[[], None] | None = None,
) -> Path:
    """Write the run's report; return its path.

    Parameters
    ----------
    root : Path
        Project directory.
    out : Path or None, optional
        Where to write; relative paths are under ``root``. Default
        ``reports/report.html`` (:data:`fedpipe.config.layout.REPORT_HTML`).
    findings : sequence of dict or None, optional
        As in :func:`build_report`; default: call the doctor.
    run : RunFiles or None, optional
        As in :func:`build_report`; default: read the run's files.
    lock_ready : callable or None, optional
        As in :func:`build_report`.
    """
    root = Path(root)
    target = root / (layout.REPORT_HTML if out is None else Path(out))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = build_report(
        root, findings=findings, generated=stamp, run=run, lock_ready=lock_ready
    )
    atomic.write_text(target, page, durable=False)
    return target

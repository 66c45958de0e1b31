"""Plots of a sweep, drawn from its results files (``table.csv``, ``layers.json``).

Matplotlib with the Agg backend (no display needed); each function takes the
results directory and writes PNG files beside the table.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedpipe.config.params import ParamsError


def _number(text: str) -> float | str | None:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def read_table(directory: Path) -> list[dict[str, Any]]:
    """``table.csv`` of a sweep, numbers as floats (blank cells None)."""
    path = Path(directory) / "table.csv"
    if not path.is_file():
        raise ParamsError(
            f"{path}: not found; give the directory `fedpipe sweep` wrote"
        )
    with path.open(newline="") as f:
        return [{k: _number(v) for k, v in row.items()} for row in csv.DictReader(f)]


def _sort_key(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, float) else (1, str(value))


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_metric(directory: Path, *, x: str, y: str, hue: str | None = None) -> Path:
    """``y`` (mean, error bars: std over seeds) against ``x``, one line per
    value of ``hue``; written to ``DIR/<y>-by-<x>.png``.

    Raises
    ------
    ParamsError
        A key or metric the table does not have (naming what it has).
    """
    rows = read_table(directory)
    cols = list(rows[0]) if rows else []
    if x not in cols and f"{x}_mean" in cols:
        return _plot_metric_pair(directory, rows, x=x, y=y, hue=hue)
    for flag, key in (("--x", x), ("--hue", hue)):
        if key is not None and key not in cols:
            raise ParamsError(
                f"{flag} {key}: not a column of the table ({', '.join(cols)})"
            )
    if f"{y}_mean" not in cols:
        metrics = sorted(c[: -len("_mean")] for c in cols if c.endswith("_mean"))
        raise ParamsError(f"--y {y}: not a metric of the table ({', '.join(metrics)})")
    series = _series(rows, x=x, y=y, hue=hue)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    for label, points in series.items():
        points.sort(key=lambda p: _sort_key(p[0]))
        ax.errorbar([p[0] for p in points], [p[1] for p in points],
                    yerr=[p[2] for p in points], marker="o", capsize=3,
                    label=label or None)  # fmt: skip
    return _finish(plt, fig, ax, directory, x=x, y=y, xlabel=x, legend=any(series))


def _plot_metric_pair(
    directory: Path,
    rows: Sequence[dict[str, Any]],
    *,
    x: str,
    y: str,
    hue: str | None,
) -> Path:
    """One metric against another (``--x mean_divergence --y gap``): a point per
    sweep point, error bars both ways (std over seeds), coloured by ``hue``."""
    cols = list(rows[0])
    for flag, key in (("--y", f"{y}_mean"), ("--hue", hue)):
        if key is not None and key not in cols:
            raise ParamsError(f"{flag} {key}: not a column of the table")
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row[f"{x}_mean"] is None or row[f"{y}_mean"] is None:
            continue
        label = f"{hue}={_text(row[hue])}" if hue else ""
        groups.setdefault(label, []).append(row)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4), layout="constrained")
    for label, points in sorted(groups.items()):
        ax.errorbar([float(r[f"{x}_mean"]) for r in points],
                    [float(r[f"{y}_mean"]) for r in points],
                    xerr=[float(r[f"{x}_std"] or 0.0) for r in points],
                    yerr=[float(r[f"{y}_std"] or 0.0) for r in points],
                    marker="o", linestyle="none", capsize=3,
                    label=label or None)  # fmt: skip
    return _finish(plt, fig, ax, directory, x=x, y=y,
                   xlabel=f"{x} (mean ± std over seeds)", legend=bool(hue))  # fmt: skip


def _finish(plt, fig, ax, directory: Path, *, x: str, y: str, xlabel: str,
            legend: bool) -> Path:  # type: ignore[no-untyped-def]  # fmt: skip
    """Labels, the zero line of a gap, the legend; saved as ``<y>-by-<x>.png``."""
    if y == "gap":
        ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{y} (mean ± std over seeds)")
    if legend:  # below the x label: a sweep's labels are long, never over data
        fig.legend(loc="outside lower center", fontsize=7, frameon=False)
    path = Path(directory) / f"{_file(y)}-by-{_file(x)}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def _series(
    rows: Sequence[dict[str, Any]], *, x: str, y: str, hue: str | None
) -> dict[str, list[tuple[Any, float, float]]]:
    """Label -> (x, mean, std) points: one line per value of ``hue`` and of
    every other swept key (so points that differ in more than ``x`` are never
    joined), in the order of those values."""
    cols = list(rows[0]) if rows else []
    keys = cols[1 : cols.index("n")] if "n" in cols else []
    others = [k for k in keys if k not in (x, hue)]
    by = ([hue] if hue else []) + others
    groups: dict[tuple, list[tuple[Any, float, float]]] = {}
    for row in rows:
        if row[f"{y}_mean"] is None:
            continue
        label = tuple(row[k] for k in by)
        groups.setdefault(label, []).append(
            (row[x], float(row[f"{y}_mean"]), float(row[f"{y}_std"] or 0.0))
        )
    ordered = sorted(groups.items(), key=lambda kv: [_sort_key(v) for v in kv[0]])
    return {
        ", ".join(f"{k}={_text(v)}" for k, v in zip(by, label, strict=True)): points
        for label, points in ordered
    }


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _file(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key)


def layer_curves(entries: Sequence[dict[str, Any]], by: str) -> dict[str, list[float]]:
    """Mean D_l per layer index over every run with the same value of ``by``
    (runs of that value with fewer layers leave later indices to the others)."""
    sums: dict[str, list[list[float]]] = {}
    for entry in entries:
        label = _text(entry["settings"].get(by))
        lists = sums.setdefault(label, [])
        for i, (_, value) in enumerate(entry["layers"]):
            if i == len(lists):
                lists.append([])
            lists[i].append(float(value))
    return {k: [sum(v) / len(v) for v in lists] for k, lists in sums.items()}


def plot_layers(directory: Path, *, by: str) -> Path:
    """D_l (mean over rounds and runs) against layer index, one line per value
    of ``by``; written to ``DIR/divergence_by_layer.png``."""
    path = Path(directory) / "layers.json"
    if not path.is_file():
        raise ParamsError(
            f"{path}: not found; give the directory `fedpipe sweep` wrote"
        )
    entries = json.loads(path.read_text())
    curves = layer_curves(entries, by)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, values in sorted(
        curves.items(), key=lambda kv: _sort_key(_number(kv[0]))
    ):
        ax.plot(range(1, len(values) + 1), values, marker="o", label=f"{by}={label}")
    ax.set_xlabel("layer index (1 = input side; last = output layer)")
    ax.set_ylabel("D_l, mean over rounds and seeds")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    out = Path(directory) / "divergence_by_layer.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def plot_sweep(
    directory: Path, *, x: str, y: str = "gap", hue: str | None = None
) -> list[Path]:
    """Both plots of a sweep: ``y`` against ``x`` and D_l against layer index
    (one line per depth when ``model.depth`` is swept, else per ``hue``, else
    per ``x``)."""
    made = [plot_metric(directory, x=x, y=y, hue=hue)]
    cols = list(read_table(directory)[0])
    by = "model.depth" if "model.depth" in cols else (hue or x)
    made.append(plot_layers(directory, by=by))
    return made

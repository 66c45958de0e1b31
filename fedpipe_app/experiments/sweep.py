"""A sweep: a grid of settings, its points and runs, and its results table.

A grid is written in DVC's own ``-S`` syntax (``dvc exp run -S
model.depth=1,2,4``): each ``-S key=v1,v2,...`` is an axis, and the points are
the cartesian product of the axes. A grid file (``--grid sweep.yaml``) holds
designs that are not one product::

    base:                      # fixed settings of every point (dotted keys)
      federation.rounds: 30
    grids:                     # name -> axes; each grid is a product
      depth-width:
        model.depth: [1, 2, 4, 8, 12]
        model.width: [32, 256]
      kernel:
        model.depth: [1, 4, 12]
        model.kernel_size: [3, 5]

The sweep is the union of the grids, a point that two grids share counted once;
``-S`` axes apply to every grid (crossed with it; a key in both: ``-S`` wins).
Every point is complete: a swept key that a grid does not set takes its value
from ``params.yaml`` (after ``base``), so points are compared on equal terms.
Each point runs once per seed (``seed`` = 0..N-1 by default); a run is named
``NAME-<point id>-s<seed>``, the point id built from the swept keys
(``d4-w32``). This module is pure: it computes, it runs nothing (see
:mod:`fedpipe_app.experiments.sweeprun`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedpipe.config.overrides import parse_overrides, yaml_scalar
from fedpipe.config.params import ParamsError
from fedpipe.core.dotted import lookup

Axes = dict[str, list[Any]]
SEED_KEY = "seed"
# what each run's row records, beside its swept keys and seed
METRICS = (
    "accuracy", "loss", "central_accuracy", "gap", "mean_divergence",
    "local_accuracy", "personalized_accuracy", "seconds",
)  # fmt: skip


@dataclass(frozen=True)
class Point:
    """One setting of the swept keys (``settings``: dotted key -> value)."""

    id: str
    settings: dict[str, Any] = field(hash=False)


@dataclass(frozen=True)
class Run:
    """One point at one seed, as DVC experiment ``name``."""

    name: str
    point: Point
    seed: int

    @property
    def overrides(self) -> dict[str, Any]:
        """Everything this run sets in ``params.yaml`` (``seed`` included)."""
        return {**self.point.settings, SEED_KEY: self.seed}


# ---------------------------------------------------------------- the grid


def _split_values(text: str) -> list[str]:
    """``1,2,[3,4]`` -> ``["1", "2", "[3,4]"]``: commas outside brackets/quotes."""
    parts, depth, quote, current = [], 0, "", ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    parts.append(current)
    return parts


def parse_axes(args: Sequence[str]) -> Axes:
    """``["model.depth=1,2,4", "train.lr=0.1"]`` (DVC's sweep syntax) as
    ``{"model.depth": [1, 2, 4], "train.lr": [0.1]}``, each value read as YAML
    (a list value is bracketed: ``model.hidden=[32,32],[64]``).

    Raises
    ------
    ParamsError
        Naming the argument that is not ``dotted.key=v1,v2,...``.
    """
    axes: Axes = {}
    for arg in args:
        key, sep, text = arg.partition("=")
        pieces = _split_values(text) if sep else [""]
        values = [
            parse_overrides([f"{key}={piece}" if sep else arg])[key.strip()]
            for piece in pieces
        ]
        axes[key.strip()] = values
    return axes


def load_grid_file(path: str | Path) -> tuple[dict[str, Any], dict[str, Axes]]:
    """A grid file's ``base`` (dotted key -> value) and ``grids`` (name -> axes;
    a value that is not a list is one fixed value).

    Raises
    ------
    ParamsError
        The file is missing, not YAML, or not laid out as documented above.
    """
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"--grid {path}: file not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ParamsError(f"--grid {path}: not valid YAML ({exc})") from None
    unknown = sorted(set(raw) - {"base", "grids"}) if isinstance(raw, dict) else []
    if not isinstance(raw, dict) or unknown:
        raise ParamsError(
            f"--grid {path}: expected a mapping with `base:` (fixed settings) and "
            f"`grids:` (name -> {{key: [values]}}); got {unknown or raw!r}"
        )
    base = raw.get("base") or {}
    grids = raw.get("grids") or {}
    if not isinstance(base, dict):
        raise ParamsError(f"--grid {path}: base: expected a mapping key -> value")
    if not isinstance(grids, dict) or not all(
        isinstance(g, dict) for g in grids.values()
    ):
        raise ParamsError(
            f"--grid {path}: grids: expected name -> {{key: [values]}}, e.g. "
            "grids: {depth: {model.depth: [1, 2, 4]}}"
        )
    for key in [*base, *(k for g in grids.values() for k in g)]:
        parse_overrides([f"{key}=0"])  # the key's own syntax, as for -S
    axes = {
        str(name): {k: v if isinstance(v, list) else [v] for k, v in g.items()}
        for name, g in grids.items()
    }
    return {str(k): v for k, v in base.items()}, axes


def _product(axes: Axes) -> list[dict[str, Any]]:
    keys = list(axes)
    return [
        dict(zip(keys, combo, strict=True))
        for combo in itertools.product(*axes.values())
    ]


def expand(
    cli_axes: Axes,
    grids: Mapping[str, Axes] | None = None,
    *,
    defaults: Mapping[str, Any] | None = None,
) -> tuple[list[str], list[dict[str, Any]]]:
    """The sweep's swept keys and its points, as complete settings.

    Parameters
    ----------
    cli_axes : dict
        The ``-S`` axes; crossed with every grid (their value wins).
    grids : dict, optional
        Grid name -> axes; none: the sweep is the product of ``cli_axes``.
    defaults : dict, optional
        Parsed ``params.yaml`` (with ``base`` applied): the value of a key a
        grid does not set.

    Returns
    -------
    (list of str, list of dict)
        Every key any grid or ``-S`` sets, in first-seen order; the points in
        grid order, each a mapping of all those keys, duplicates dropped.
    """
    designs = [{**g, **cli_axes} for g in (grids or {}).values()] or [dict(cli_axes)]
    keys: list[str] = []
    for design in designs:
        keys += [k for k in design if k not in keys]
    points: list[dict[str, Any]] = []
    seen: set[str] = set()
    for design in designs:
        for combo in _product(design):
            full = {k: combo[k] if k in combo else lookup(defaults or {}, k)
                    for k in keys}  # fmt: skip
            marker = yaml.safe_dump(full, sort_keys=True)
            if marker not in seen:
                seen.add(marker)
                points.append(full)
    return keys, points


def varying(keys: Sequence[str], points: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys whose value differs between points (what names a point)."""
    return [
        k for k in keys if len({yaml_scalar(p[k]) for p in points}) > 1
    ]  # fmt: skip


# ---------------------------------------------------------------- names


def abbreviations(keys: Sequence[str]) -> dict[str, str]:
    """Short labels of ``keys``: the shortest prefix of each key's last part
    that no other key's last part shares (``model.depth`` -> ``d``,
    ``train.lr`` / ``train.local_steps`` -> ``lr`` / ``lo``); keys whose last
    parts are the same get their sections' shortest distinct prefixes in front
    (``partition.method`` / ``personalization.method`` -> ``pam`` / ``pem``)."""
    lasts = {k: k.split(".")[-1] for k in keys}
    out = {}
    for key, last in lasts.items():
        others = [v for k, v in lasts.items() if k != key]
        if last in others:
            twins = [k for k, v in lasts.items() if v == last]
            out[key] = _section_label(key, twins)
            continue
        size = next(
            (n for n in range(1, len(last) + 1)
             if not any(o.startswith(last[:n]) for o in others)),
            len(last),
        )  # fmt: skip
        out[key] = last[:size]
    return out


def _section_label(key: str, twins: Sequence[str]) -> str:
    """``key``'s sections cut to the shortest length that tells it from its
    ``twins`` (keys with the same last part), then that part's first letter."""

    def label(k: str, n: int) -> str:
        parts = k.split(".")
        return "".join(p[:n] for p in parts[:-1]) + parts[-1][:1]

    longest = max(len(p) for k in twins for p in k.split("."))
    for n in range(1, longest + 1):
        if len({label(k, n) for k in twins}) == len(twins):
            return label(key, n)
    return key.replace(".", "_")


def _slug(value: Any) -> str:
    text = yaml_scalar(value)
    text = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.") or "x"
    return re.sub(r"\.{2,}", ".", text)


def point_ids(keys: Sequence[str], points: Sequence[Mapping[str, Any]]) -> list[str]:
    """A short id per point from its ``keys`` values (``d4-w32``); unique (a
    6-hex hash is appended to ids that would collide); ``all`` when no key
    varies."""
    short = abbreviations(keys)
    ids = ["-".join(f"{short[k]}{_slug(p[k])}" for k in keys) or "all" for p in points]
    counts = {pid: ids.count(pid) for pid in ids}
    for i, pid in enumerate(list(ids)):
        if counts[pid] > 1:
            digest = hashlib.sha1(yaml.safe_dump(dict(points[i])).encode())
            ids[i] = f"{pid}-{digest.hexdigest()[:6]}"
    return ids


def default_name(axes_keys: Sequence[str], grid_file: str | Path | None) -> str:
    """The sweep's name when none is given: the grid file's stem, else the
    swept keys' last parts (``depth-width``), else ``sweep``."""
    if grid_file is not None:
        return _slug(Path(grid_file).stem)
    return "-".join(_slug(k.split(".")[-1]) for k in axes_keys) or "sweep"


def check_name(name: str) -> str:
    """``name`` if it can name DVC experiments (a git ref part), else ParamsError."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) or ".." in name:
        raise ParamsError(
            f"--name {name!r}: use letters, digits, '.', '_' and '-' "
            "(it names DVC experiments), e.g. --name depth"
        )
    return name


def plan(
    name: str,
    keys: Sequence[str],
    points: Sequence[Mapping[str, Any]],
    seeds: Sequence[int],
) -> list[Run]:
    """Every run of the sweep, seed by seed (all points at the first seed
    first, so a partial sweep already covers the grid)."""
    swept = [k for k in varying(keys, points) if k != SEED_KEY]
    ids = point_ids(swept, points)
    made = [Point(pid, dict(p)) for pid, p in zip(ids, points, strict=True)]
    return [
        Run(f"{name}-{p.id}-s{seed}", p, seed) for seed in seeds for p in made
    ]  # fmt: skip


# ---------------------------------------------------------------- one run


def centralized_args(
    *, rounds: int, clients: int, batch_size: int, local_steps: int | None
) -> list[str]:
    """``fedpipe centralized`` arguments for a run: none (same epochs), or for
    ``train.local_steps`` runs the large-batch counterpart: as many steps as
    the federation took (rounds x local steps) on batches of clients x batch
    size (what averaging every client's steps amounts to)."""
    if local_steps is None:
        return []
    return [
        "--steps", str(rounds * local_steps),
        "--batch-size", str(clients * batch_size),
    ]  # fmt: skip


def layer_divergence(records: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """Mean D_l over rounds per weight layer, in model order, from the rounds'
    health records (``metrics/health/round-K.json``; norm layers and layers
    without a divergence left out): ``[[name, mean], ...]``."""
    values: dict[str, list[float]] = {}
    for record in records:
        for layer in record.get("layers", []):
            if layer.get("divergence") is None or layer.get("kind") == "norm":
                continue
            values.setdefault(layer["name"], []).append(float(layer["divergence"]))
    return [[name, sum(v) / len(v)] for name, v in values.items()]


def run_row(
    run: Run,
    *,
    summary: Mapping[str, Any],
    central: Mapping[str, Any] | None,
    layers: Sequence[Sequence[Any]],
    seconds: float,
) -> dict[str, Any]:
    """The results row of a finished run (``layers`` kept for layers.json)."""
    acc = float(summary["global"]["accuracy"])
    central_acc = None if central is None else float(central["global"]["accuracy"])
    mean_d = sum(v for _, v in layers) / len(layers) if layers else None
    return {
        "run": run.name,
        "point": run.point.id,
        **run.point.settings,
        SEED_KEY: run.seed,
        "accuracy": acc,
        "loss": float(summary["global"]["loss"]),
        "central_accuracy": central_acc,
        "gap": None if central_acc is None else round(central_acc - acc, 6),
        "mean_divergence": None if mean_d is None else round(mean_d, 6),
        # the clients' own models, when the summary has them
        **{
            f"{group}_accuracy": (summary.get(group) or {}).get("accuracy")
            for group in ("local", "personalized")
        },
        "seconds": round(seconds, 1),
        "layers": [list(x) for x in layers],
    }


# ---------------------------------------------------------------- the table


def mean_std(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1) of the values that are not
    None; std is None for fewer than two values."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None, None
    mean = sum(xs) / len(xs)
    if len(xs) < 2:
        return mean, None
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def table(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict]:
    """One row per point (first-seen order): its ``keys``, ``n`` seeds, and
    ``<metric>_mean`` / ``<metric>_std`` for each of :data:`METRICS`."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["point"], []).append(row)
    out = []
    for pid, group in groups.items():
        entry: dict[str, Any] = {"point": pid, **{k: group[0].get(k) for k in keys}}
        entry["n"] = len(group)
        for metric in METRICS:
            mean, std = mean_std([r.get(metric) for r in group])
            entry[f"{metric}_mean"], entry[f"{metric}_std"] = mean, std
        out.append(entry)
    return out


def _cell(mean: float | None, std: float | None, digits: int) -> str:
    if mean is None:
        return "n/a"
    text = f"{mean:.{digits}f}"
    return text if std is None else f"{text} ± {std:.{digits}f}"


def table_markdown(entries: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> str:
    """The table as Markdown, ``mean ± std`` over seeds per cell."""
    names = ["accuracy", "loss", "central_accuracy", "gap", "mean_divergence"]
    heads = ["federated acc", "loss", "centralized acc", "gap", "mean D_l"]
    cols = [*keys, "seeds", *heads, "seconds"]
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "---|" * len(keys) + "---:|" * (len(cols) - len(keys))]  # fmt: skip
    for e in entries:
        cells = [yaml_scalar(e.get(k)) for k in keys] + [str(e["n"])]
        cells += [_cell(e[f"{m}_mean"], e[f"{m}_std"], 4) for m in names]
        cells.append(_cell(e["seconds_mean"], None, 0))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def progress_line(
    index: int, total: int, run: Run, row: Mapping[str, Any], eta_s: float | None
) -> str:
    """``[7/30] d4-w32 seed 1: acc 0.962, central 0.971, gap 0.009, 41 s; ETA
    12 min``."""
    text = (
        f"[{index}/{total}] {run.point.id} seed {run.seed}: acc {row['accuracy']:.3f}"
    )
    if row.get("central_accuracy") is not None:
        text += f", central {row['central_accuracy']:.3f}, gap {row['gap']:.3f}"
    text += f", {row['seconds']:.0f} s"
    if eta_s is not None:
        text += f"; ETA {_duration(eta_s)}"
    return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"

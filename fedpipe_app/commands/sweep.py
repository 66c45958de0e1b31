"""``fedpipe sweep`` and ``fedpipe sweep plot``: the command line of a sweep.

:mod:`fedpipe_app.experiments.sweep` expands the grid and builds the table,
:mod:`fedpipe_app.experiments.sweeprun` runs it,
:mod:`fedpipe_app.experiments.sweepplot` draws it.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from fedpipe.core.errors import ParamsError
from fedpipe_app.commands.common import (
    PARAMS,
    add_command,
)

NAME = "sweep"
EXAMPLES = [
    ("fedpipe sweep -S model.depth=1,2,4 -S model.width=32,256 --seeds 3",
     "a product grid, 3 seeds"),
    ("fedpipe sweep --grid design.yaml --centralized -j 2", "a union of grids"),
    ("fedpipe sweep -S train.lr=0.01,0.1 --dry-run", "list the runs"),
    ("fedpipe sweep plot sweeps/depth-width --x model.depth --y gap "
     "--hue model.width", "plots from the table"),
    ("dvc exp show", "every run with its params and metrics"),
]  # fmt: skip


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``fedpipe sweep`` (and ``fedpipe sweep plot``) on ``sub``."""
    sweep = add_command(
        sub,
        NAME,
        EXAMPLES,
        help="run a grid of params as DVC experiments (seeds, resumable)",
        description="Run every point of a grid (DVC's -S syntax: -S key=v1,v2 per "
        "axis, the cartesian product; or --grid FILE) once per seed, each as a DVC "
        "experiment NAME-<point>-s<seed> that `dvc exp show` lists. Run the same "
        "command again after an interruption: finished runs are skipped. Results: "
        "OUT/runs.csv, table.csv, table.md (mean ± std over seeds), layers.json.",
    )
    sweep.add_argument(
        "-S", "--set-param", action="append", default=[], metavar="KEY=V1,V2",
        help="an axis of the grid (values read as YAML; one value: fixed)",
    )  # fmt: skip
    sweep.add_argument(
        "--grid", metavar="FILE", help="YAML: base: {key: value}, grids: {name: "
        "{key: [values]}} (the union of the grids; -S applies to each)",
    )  # fmt: skip
    seeds = sweep.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, help="seeds 0..N-1 (default: 1)")
    seeds.add_argument("--seed-list", type=int, nargs="+", metavar="SEED")
    sweep.add_argument("--name", help="names the runs (default: from the axes)")
    sweep.add_argument("--out", help="results directory (default: sweeps/NAME)")
    sweep.add_argument("-j", "--jobs", type=int, default=1, help="runs at a time")
    sweep.add_argument(
        "--centralized", action="store_true",
        help="also the pooled-data baseline of each run (gap = centralized acc - "
        "federated acc); for train.local_steps runs its large-batch counterpart",
    )  # fmt: skip
    sweep.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    sweep.add_argument(
        "--no-server-start", action="store_true",
        help="do not start a local Prefect server (one must answer)",
    )  # fmt: skip
    sweep.set_defaults(func=cmd_sweep)
    tools = sweep.add_subparsers(dest="sweep_command", metavar="plot")
    plot = tools.add_parser(
        "plot",
        help="plots from a sweep's table",
        description="Draw Y against X (one line per value of --hue, error bars: "
        "std over seeds) from DIR/table.csv, and D_l against layer index from "
        "DIR/layers.json (one line per value of --hue, else model.depth).",
    )
    plot.add_argument("dir", type=Path, help="the sweep's results directory")
    plot.add_argument("--x", required=True, help="a swept key, e.g. model.depth")
    plot.add_argument("--y", default="gap", help="a metric of the table (gap)")
    plot.add_argument("--hue", help="a swept key: one line per value")
    plot.set_defaults(func=cmd_sweep_plot)
    return sweep


def _plan(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from fedpipe.config.overrides import check_overrides, with_overrides
    from fedpipe.data.preflight import preflight
    from fedpipe_app.experiments.sweep import (
        SEED_KEY,
        check_name,
        default_name,
        expand,
        load_grid_file,
        parse_axes,
        plan,
        varying,
    )

    axes = parse_axes(args.set_param)
    base, grids = load_grid_file(args.grid) if args.grid else ({}, {})
    if (
        SEED_KEY in axes
        or SEED_KEY in base
        or any(SEED_KEY in g for g in grids.values())
    ):
        raise ParamsError("-S seed: give the seeds with --seeds N or --seed-list ...")
    if not Path(PARAMS).is_file():
        raise ParamsError(f"{PARAMS}: not found (run from the project root, or -C)")
    import yaml

    raw = yaml.safe_load(Path(PARAMS).read_text()) or {}
    defaults = with_overrides(raw, base)
    keys, points = expand(axes, grids, defaults=defaults)
    if args.seed_list:
        seeds = list(args.seed_list)
    else:
        seeds = list(range(args.seeds or 1))
    if not seeds:
        raise ParamsError("--seeds: give at least 1")
    swept = varying(keys, points) or keys
    name = check_name(args.name or default_name(swept, args.grid))
    runs = plan(name, keys, points, seeds)
    for run in runs[: len(points)]:  # every point, before anything runs
        try:
            point = check_overrides(PARAMS, {**base, **run.overrides})
            preflight(point.data, point.federation, point.partition)
        except ParamsError as exc:
            raise ParamsError(f"{exc} (sweep point {run.point.id})") from None
    return name, runs, keys, base


def cmd_sweep(args: argparse.Namespace) -> int:
    """``fedpipe sweep``: validate the grid, then run (or list) its runs."""
    if args.jobs < 1:
        raise ParamsError("-j: give 1 or more runs at a time")
    name, runs, keys, base = _plan(args)
    if args.dry_run:
        from fedpipe.config.overrides import yaml_scalar

        if base:
            fixed = ", ".join(f"{k}={yaml_scalar(v)}" for k, v in base.items())
            print(f"every run (the grid's base): {fixed}")
        for run in runs:
            values = ", ".join(
                f"{k}={yaml_scalar(v)}" for k, v in run.overrides.items()
            )
            print(f"{run.name}: {values}")
        print(f"{len(runs)} runs ({len(runs) // max(1, len({r.seed for r in runs}))}"
              f" points x {len({r.seed for r in runs})} seeds)")  # fmt: skip
        return 0
    from fedpipe_app.experiments.sweeprun import SweepSettings, run_sweep
    from orchestration.server import ensure_api

    ensure_api(start=not args.no_server_start)  # every run reports to this one
    settings = SweepSettings(
        name=name,
        out=Path(args.out or f"sweeps/{name}"),
        jobs=args.jobs,
        centralized=args.centralized,
    )
    if base:
        runs = [_with_base(r, base) for r in runs]
    signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C: end the runs started
    try:
        return run_sweep(runs, keys, settings, say=lambda s: print(s, flush=True))
    except KeyboardInterrupt:
        print(
            "sweep interrupted; the same command continues it (finished runs are kept)",
            file=sys.stderr,
        )
        return 130


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signum)


def _with_base(run, base):  # type: ignore[no-untyped-def]
    """``run`` whose settings include the grid file's fixed ``base``."""
    from fedpipe_app.experiments.sweep import Point, Run

    point = Point(run.point.id, {**base, **run.point.settings})
    return Run(run.name, point, run.seed)


def cmd_sweep_plot(args: argparse.Namespace) -> int:
    """``fedpipe sweep plot DIR --x KEY --y METRIC [--hue KEY]``."""
    from fedpipe_app.experiments.sweepplot import plot_sweep

    for path in plot_sweep(args.dir, x=args.x, y=args.y, hue=args.hue):
        print(path)
    return 0

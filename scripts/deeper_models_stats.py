"""The tests behind docs/deeper-models' verdicts, from a sweep's results.

Reads ``runs.csv`` (one row per run) and ``table.csv`` (one row per point) of the
deeper-models sweep (default: ``docs/deeper-models/results``) and prints, one
line each, the comparisons the doc quotes: Welch's t-test of the gap between two
points over their seeds, a paired t-test over seeds where both points share the
seeds' centralized baseline (the local-epoch series), and rank correlations
(Spearman) of the gap with depth and with the mean layer divergence.

    python scripts/deeper_models_stats.py [RESULTS_DIR]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from scipy import stats

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "deeper-models" / "results"

# (what, point a, point b): the doc's comparisons, gap of b against gap of a
WELCH = [
    ("depth 2 vs 12", "d2-w8-k3-e2-r20-lnull", "d12-w8-k3-e2-r20-lnull"),
    ("width 8 vs 64 at depth 12", "d12-w8-k3-e2-r20-lnull", "d12-w64-k3-e2-r20-lnull"),
    ("kernel 3 vs 5 at depth 2", "d2-w8-k3-e2-r20-lnull", "d2-w8-k5-e2-r20-lnull"),
    ("kernel 3 vs 5 at depth 4", "d4-w8-k3-e2-r20-lnull", "d4-w8-k5-e2-r20-lnull"),
    ("kernel 3 vs 5 at depth 8", "d8-w8-k3-e2-r20-lnull", "d8-w8-k5-e2-r20-lnull"),
    ("kernel 3 vs 5 at depth 12", "d12-w8-k3-e2-r20-lnull", "d12-w8-k5-e2-r20-lnull"),
]
PAIRED = [
    ("local epochs 1 vs 8 at depth 8", "d8-w8-k3-e1-r40-lnull", "d8-w8-k3-e8-r5-lnull"),
]
DEPTH_SERIES = [f"d{d}-w8-k3-e2-r20-lnull" for d in (2, 4, 8, 12)]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def gaps(runs: list[dict[str, str]], point: str) -> list[float]:
    """The gap of each seed of ``point``, in seed order."""
    mine = sorted(
        (r for r in runs if r["point"] == point), key=lambda r: int(r["seed"])
    )
    if not mine:
        raise SystemExit(f"runs.csv: no runs of point {point}")
    return [float(r["gap"]) for r in mine]


def report(results: Path) -> list[str]:
    runs = _rows(results / "runs.csv")
    points = _rows(results / "table.csv")
    lines = []
    for what, a, b in WELCH:
        ga, gb = gaps(runs, a), gaps(runs, b)
        p = stats.ttest_ind(ga, gb, equal_var=False).pvalue
        lines.append(f"{what}: gap {_list(ga)} vs {_list(gb)}, Welch p = {p:.3f}")
    for what, a, b in PAIRED:
        ga, gb = gaps(runs, a), gaps(runs, b)
        p = stats.ttest_rel(gb, ga).pvalue
        diff = _list([y - x for x, y in zip(ga, gb, strict=True)])
        lines.append(f"{what}: per-seed difference {diff}, paired p = {p:.3f}")
    depth = [
        (float(r["model.depth"]), float(r["gap"]))
        for r in runs
        if r["point"] in DEPTH_SERIES
    ]
    rho = stats.spearmanr([d for d, _ in depth], [g for _, g in depth])
    lines.append(
        f"gap vs depth over {len(depth)} runs: Spearman rho = {rho.statistic:.2f}, "
        f"p = {rho.pvalue:.2g}"
    )
    for label, keep in (
        ("all points", lambda r: True),
        ("without the one-step control", lambda r: r["train.local_steps"] != "1"),
    ):
        chosen = [r for r in points if keep(r)]
        rho = stats.spearmanr(
            [float(r["mean_divergence_mean"]) for r in chosen],
            [float(r["gap_mean"]) for r in chosen],
        )
        lines.append(
            f"gap vs mean D_l over {len(chosen)} points ({label}): Spearman rho = "
            f"{rho.statistic:.2f}, p = {rho.pvalue:.2g}"
        )
    return lines


def _list(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    print("\n".join(report(Path(sys.argv[1]) if len(sys.argv) > 1 else RESULTS)))

"""scripts/deeper_models_stats.py: the tests docs/deeper-models quotes, computed
from the committed results (and from a results folder where they come out
otherwise)."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "deeper_models_stats", ROOT / "scripts" / "deeper_models_stats.py"
)
stats_script = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
spec.loader.exec_module(stats_script)  # type: ignore[union-attr]


def test_the_committed_results_give_the_figures_the_doc_quotes() -> None:
    lines = stats_script.report(ROOT / "docs" / "deeper-models" / "results")
    text = "\n".join(lines)
    assert (
        "depth 2 vs 12: gap [0.004, 0.005, 0.008] vs [0.097, 0.055, 0.070], "
        "Welch p = 0.030" in text
    )
    assert "width 8 vs 64 at depth 12:" in text and "Welch p = 0.029" in text
    assert "per-seed difference [0.016, 0.018, 0.032], paired p = 0.049" in text
    assert "gap vs mean D_l over 14 points (all points): Spearman rho = -0.66" in text
    doc = (ROOT / "docs" / "deeper-models" / "README.md").read_text()
    assert "scripts/deeper_models_stats.py" in doc
    for quoted in ("p = 0.03", "p = 0.05", "-0.66, p = 0.01", "-0.58, p = 0.04"):
        assert quoted in doc, quoted


def test_no_depth_effect_gives_no_significance(tmp_path: Path) -> None:
    """The same analysis on runs whose gap does not depend on depth."""
    src = ROOT / "docs" / "deeper-models" / "results"
    with (src / "runs.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:  # every run's gap: its seed's, whatever the point
        row["gap"] = str(0.01 * (int(row["seed"]) + 1))
    with (tmp_path / "runs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (tmp_path / "table.csv").write_text((src / "table.csv").read_text())
    lines = stats_script.report(tmp_path)
    depth = next(line for line in lines if line.startswith("depth 2 vs 12"))
    assert depth.endswith("Welch p = 1.000")
    rho = next(line for line in lines if line.startswith("gap vs depth"))
    assert "rho = 0.00" in rho or "rho = nan" in rho

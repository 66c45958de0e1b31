"""scripts/heterogeneity_table.py: every run of its sweep is a valid params.yaml
(the real parser), each method meets each skew, and its table averages seeds."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from fedpipe.config.overrides import with_overrides
from fedpipe.config.params import parse_params
from fedpipe_app.experiments.sweep import expand

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import heterogeneity_table as table  # noqa: E402


def test_every_point_is_valid_params_and_each_method_meets_each_skew() -> None:
    design = table.design(rounds=20)
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw.pop("round_chain", None)
    based = with_overrides(raw, design["base"])
    axes = {
        name: {k: v if isinstance(v, list) else [v] for k, v in g.items()}
        for name, g in design["grids"].items()
    }
    _, points = expand({}, axes, defaults=based)
    seen = set()
    for point in points:
        params = parse_params(with_overrides(based, point))
        assert params.model.name == "cnn" and params.federation.rounds == 20
        row = {k: str(v).lower() if isinstance(v, bool) else str(v)
               for k, v in point.items()}  # fmt: skip
        seen.add((table.method(row), table.skew(row)))
        if table.skew(row) == "domain":
            assert params.partition.feature_skew == "domains"
            assert params.partition.method == "iid"
        else:
            assert params.partition.method == "dirichlet"
    methods = [*table.STRATEGIES, *table.PERSONAL]
    assert seen == {(m, s) for m in methods for s in table.SKEWS}
    assert len(points) == len(seen) == 12


def test_the_table_is_mean_and_std_over_seeds() -> None:
    def row(seed: int, acc: float, personal: str = "", local: str = "") -> dict:
        return {
            "seed": str(seed),
            "strategy.name": "fedavg",
            "personalization.method": "fedbn" if personal else "none",
            "partition.feature_skew": "domains",
            "accuracy": str(acc),
            "personalized_accuracy": personal,
            "local_accuracy": local or "0.1",
        }

    text = table.markdown(
        [row(0, 0.5, local="0.6"), row(1, 0.7, local="0.6"), row(0, 0.2, "0.9"),
         row(1, 0.4, "0.8")]
    )  # fmt: skip
    lines = {line.split("|")[1].strip(): line for line in text.splitlines()[2:8]}
    fedavg = [c.strip() for c in lines["fedavg"].split("|")[1:-1]]
    assert fedavg == ["fedavg", "n/a", "n/a", "0.600 ± 0.141", "0.600 ± 0.000"]
    fedbn = [c.strip() for c in lines["fedbn"].split("|")[1:-1]]
    assert fedbn[3:] == ["0.300 ± 0.141", "0.850 ± 0.071"]
    assert "over 2 seed(s)" in text

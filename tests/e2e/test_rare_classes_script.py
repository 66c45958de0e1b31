"""scripts/rare_classes.py in small: the breast-cancer table with its malignant
class at 8 %, one round each, unweighted and ``train.class_weight: balanced``,
against scikit-learn's balanced logistic regression (the measured figures, ten
rounds, are in docs/own-data.md)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from e2e_helpers import load_script

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rare_classes.py"


def test_rare_classes_script_in_one_round(tmp_path: Path, cli_env) -> None:
    script = load_script(SCRIPT)
    results = script.measure(tmp_path, "breast_cancer", cli_env, rounds=1, epochs=1)
    table = pd.read_csv(tmp_path / "probe.csv")
    assert table["diagnosis"].value_counts().to_dict() == {
        "benign": 357,
        "malignant": 31,
    }
    names = [n for n in results if not n.startswith("_")]
    assert len(names) == 3
    for name in names:
        r = results[name]
        assert 0.0 <= r["recall"] <= 1.0 and r["support"] > 0, name
        assert 0.0 <= r["balanced_accuracy"] <= 1.0, name
    weighted = results["fedpipe, class_weight balanced"]["table"]
    assert "| balanced accuracy |" in weighted and "| malignant |" in weighted
    assert "| malignant recall |" in script.markdown(results)

"""scripts/table_corpus.py in small: iris as a user writes it (``to_csv``, index
included, species names), 3 clients and 1 round, against scikit-learn's logistic
regression on the project's own held-out split (the whole corpus, measured, is in
docs/own-data.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from e2e_helpers import load_script

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "table_corpus.py"


def test_table_corpus_script_on_iris_in_one_round(tmp_path: Path, cli_env) -> None:
    script = load_script(SCRIPT)
    assert len(script.TABLES) >= 6
    assert {t.source.split()[0] for t in script.TABLES.values()} > {"scikit-learn"}
    settings = {"rounds": 1, "clients": 3, "epochs": 1}
    r = script.measure_table(tmp_path, script.TABLES["iris"], cli_env, settings)

    csv = pd.read_csv(tmp_path / "iris" / "data" / "iris.csv")
    assert csv.columns[0] == "Unnamed: 0"  # the index, as to_csv writes it
    assert sorted(csv["target"].unique()) == ["setosa", "versicolor", "virginica"]
    manifest = json.loads(
        (tmp_path / "iris" / "data/partition/manifest.json").read_text()
    )
    assert r["heldout"] == len(manifest["heldout"]) == 30
    assert (r["rows"], r["columns"], r["classes"]) == (150, 4, 3)
    # the row number is not a feature: the baseline saw the four measurements
    assert r["features"] == 4
    # iris is easy for a central logistic regression whatever the split
    assert r["central"]["accuracy"] >= 0.85
    for figures in (r["fedpipe"], r["central"]):
        assert 0.0 <= figures["balanced_accuracy"] <= 1.0
    assert r["judged"] == "accuracy"
    assert r["gap"] == pytest.approx(
        r["central"]["accuracy"] - r["fedpipe"]["accuracy"]
    )
    assert r["audit"], r["audit_text"]
    row = script.markdown([r]).splitlines()[-1]
    assert row.startswith("| iris (scikit-learn load_iris) | 150 x 4, 3 (1.00) | 30 |")
    assert ("**over**" in row) == (r["gap"] > script.TOLERANCE)

"""benchmarks/bench_tables.py, tiny (issue 36: the table benchmark had no smoke
test): its synthetic tables are what its docstring says, one federated run of
the mixed table and its central counterpart give accuracies the run's own
records and an independent fit agree with, and the printed table has a row per
result. The figures of a real run are in docs/benchmarks/bench_tables.md."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import load_script

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_tables.py"

bench = load_script(SCRIPT)


def test_the_synthetic_tables_are_as_described() -> None:
    mixed = bench.mixed_table(n=400, missing=0.05, seed=0)
    numeric = [f"m{i}" for i in range(6)]
    assert mixed.columns.tolist() == [*numeric, "city", "plan", "label"]
    # numeric columns on scales 1e-3 .. 1e4 (their std, of a standard normal)
    stds = mixed[numeric].std().to_numpy()
    assert np.allclose(np.log10(stds), np.log10(bench.SCALES), atol=0.2)
    assert set(mixed["city"].dropna()) <= set(bench.CITIES)
    assert set(mixed["plan"].dropna()) == set(bench.PLANS)
    blank = mixed.drop(columns="label").isna().to_numpy().mean()
    assert 0.03 < blank < 0.07 and mixed["label"].notna().all()
    assert set(mixed["label"]) == {"yes", "no"}
    assert mixed.equals(bench.mixed_table(n=400, missing=0.05, seed=0))  # seeded
    text = bench.text_table(n=300, seed=0)
    assert text.columns.tolist() == ["message", "label"]
    words = text["message"].str.lower().str.findall(r"[a-z]+")
    positive = words.map(lambda w: bool(set(w) & set(bench.POSITIVE)))
    # every message carries a word of its class (and only 30 % the other's)
    assert positive[text["label"] == "pos"].all()
    assert 0.35 < (text["label"] == "pos").mean() < 0.65
    assert text["message"].nunique() > 290


@pytest.fixture(scope="module")
def mixed_project(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]):
    """The mixed table (300 rows), 2 rounds of the benchmark's settings."""
    root = tmp_path_factory.mktemp("bench-tables")
    table = bench.mixed_table(n=300, missing=0.05)
    project = bench.new_project(root / "mixed", table, cli_env, 2, bench.MIXED)
    base = {"numeric": "standard", "missing": "mean", "fit": "federated"}
    accuracy = bench.run_variant(project, cli_env, base)
    return project, accuracy


def test_a_federated_run_reports_its_last_rounds_accuracy(mixed_project) -> None:
    project, accuracy = mixed_project
    last = json.loads((project / "metrics/rounds/round-2.json").read_text())
    assert accuracy == last["global"]["accuracy"]
    params = (project / "params.yaml").read_text()
    assert "method: iid" in params and "epochs: 5" in params  # bench.MIXED


def test_the_central_counterpart_is_on_the_same_rows(mixed_project) -> None:
    project, _ = mixed_project
    frame, train, test = bench._pooled_frames(project)
    manifest = json.loads((project / "data/partition/manifest.json").read_text())
    assert len(train) == sum(len(c["train"]) for c in manifest["clients"])
    assert len(test) == len(manifest["heldout"])
    # the string columns are decoded back to the table's values
    assert set(train["city"].dropna()) <= set(bench.CITIES)
    assert set(train["plan"].dropna()) == set(bench.PLANS)
    central = bench.central_mixed_accuracy(project)
    assert 0.0 <= central <= 1.0
    # the label moves with the columns: a central model on 10 epochs of the
    # pooled rows beats always answering the majority class
    majority = test["_y"].value_counts(normalize=True).max()
    assert central > majority
    assert central == bench.central_mixed_accuracy(project)  # seeded


def test_the_printed_table_has_a_row_per_result() -> None:
    results = {"standard": 0.9212, "mixed-central": 0.5, "text": 1.0}
    table = bench.results_table(results, rounds=3, missing=0.05).splitlines()
    assert table[0] == "| 3 rounds, final global held-out accuracy | |"
    assert table[2:] == [
        "| `standard`, federated fit (default) | 0.9212 |",
        "| mixed table (iid), central, pooled rows prepared centrally | 0.5000 |",
        "| messages (iid), `text: [message]` multi-hot, federated | 1.0000 |",
    ]
    missing = bench.results_table({"missing": 0.9}, rounds=1, missing=0.05)
    assert "| 5% missing, `missing: mean`, federated | 0.9000 |" in missing

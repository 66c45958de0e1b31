"""The doctor corpus's pure parts: drawing replicates, planting data, the table.

The federations themselves run in tests/e2e/test_doctor_corpus.py.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "doctor"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, CORPUS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus() -> ModuleType:
    return _load("run_corpus")


@pytest.fixture(scope="module")
def plants() -> ModuleType:
    return _load("plants")


def test_the_scenarios_cover_the_brief(corpus) -> None:
    defaults, scenarios = corpus.load_scenarios(CORPUS / "scenarios.yaml")
    planted = [s for s in scenarios if s.get("cause")]
    healthy = [s for s in scenarios if not s.get("cause")]
    # the README states the corpus's size: both change together or this fails
    # (the planted causes the doctor is scored on, and one that data validation
    # refuses before any round: labels outside the loss range)
    said = re.search(
        r"A corpus of (\d+) scenarios \((\d+) planted causes the doctor is scored"
        r".*?a\s+(\d+)th, labels outside the loss range.*?; (\d+) healthy runs",
        (ROOT / "README.md").read_text(),
        re.S,
    )
    assert said is not None, "README's corpus sentence moved"
    total, scored, nth, n_healthy = (int(n) for n in said.groups())
    assert [len(scenarios), len(planted), len(healthy)] == [
        total, scored + 1, n_healthy
    ]  # fmt: skip
    assert nth == scored + 1
    assert any(s["cause"] == "labels-outside-loss-range" for s in planted)
    methods = {s.get("params", {}).get("personalization", {}).get("method")
               for s in healthy}  # fmt: skip
    assert {"fedper", "fedbn", "finetune", "ditto"} <= methods
    servers = {s["params"]["strategy"]["name"] for s in planted
               if s.get("cause") == "server-step-too-large"}  # fmt: skip
    assert servers == {"fedavgm", "fedadam", "fedyogi", "fedadagrad"}


def test_replicates_draw_their_own_sizes_deterministically(corpus) -> None:
    defaults, scenarios = corpus.load_scenarios(CORPUS / "scenarios.yaml")
    scenario = next(s for s in scenarios if s["name"] == "dropout-stops-round")
    runs = [corpus.draw_run(defaults, scenario, i) for i in range(4)]
    assert len({(r.seed, r.clients, r.rounds) for r in runs}) > 1
    assert corpus.draw_run(defaults, scenario, 2) == runs[2]
    assert runs[2].key == corpus.draw_run(defaults, scenario, 2).key
    for r in runs:  # "{clients}" became the drawn number
        assert r.params["federation"]["min_clients"] == r.clients
        assert 4 <= r.clients <= 6


def test_plants_change_only_the_planted_sites(plants) -> None:
    clean = plants.blob_table(clients=4, rows_per_client=50, seed=3)
    noisy = plants.plant(clean, {"noisy_labels": [1]}, seed=3)
    changed = set(clean.loc[clean["label"] != noisy["label"], "site"])
    assert changed == {plants.site_name(1)}
    scaled = plants.plant(
        clean, {"scaled_features": {"sites": [2], "factor": 30}}, seed=3
    )
    rows = clean["site"] == plants.site_name(2)
    np.testing.assert_allclose(scaled.loc[rows, "f0"], 30 * clean.loc[rows, "f0"])
    np.testing.assert_array_equal(scaled.loc[~rows, "f0"], clean.loc[~rows, "f0"])


def _row(scenario: str, planted: str, first: str, errors: int = 0) -> dict:
    right = errors == 0 if planted == "healthy" else first == planted
    return {"scenario": scenario, "replicate": 0, "side": "", "planted": planted,
            "status": "ok", "first_finding": first, "error_findings": errors,
            "right": right}  # fmt: skip


def test_confusion_counts_precision_and_recall(corpus) -> None:
    rows = [
        _row("a", "learning-rate-too-high", "learning-rate-too-high"),
        _row("b", "server-step-too-large", "learning-rate-too-high"),
        _row("h", "healthy", "none"),
        _row("h2", "healthy", "client-drift", errors=1),
    ]
    text = corpus.confusion_markdown(rows, "cmd")
    assert "first finding is the planted cause: 1/2 (50%)" in text
    assert (
        "healthy runs with an error-level finding: 1** of 2 (target 0): h2-r0" in text
    )
    assert "| learning-rate-too-high | 1/2 (50%) | 1/1 (100%) |" in text
    assert "| server-step-too-large | - | 0/1 (0%) |" in text


def test_kept_runs_are_not_trained_again(corpus, tmp_path: Path) -> None:
    defaults, scenarios = corpus.load_scenarios(CORPUS / "scenarios.yaml")
    run = corpus.draw_run(defaults, scenarios[0], 0)
    (tmp_path / "runs" / run.name).mkdir(parents=True)
    record = {"key": run.key, "name": run.name, "status": "ok"}
    (tmp_path / "runs.jsonl").write_text(json.dumps(record) + "\n")
    assert corpus._load_done(tmp_path / "runs.jsonl") == {run.key: record}
    changed = corpus.draw_run(defaults, {**scenarios[0], "vary": {
        "clients": [9, 9], "rounds": [9, 9]}}, 0)  # fmt: skip
    assert changed.key != run.key  # a changed scenario is trained again

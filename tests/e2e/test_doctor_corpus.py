"""The doctor's corpus runner on two of its scenarios, through `fedpipe run`.

One planted cause (aggregation weights summing to 1.6) and one healthy FedAvg
run, one replicate each, shrunk to 3 clients and 2 rounds: the runner trains
both, asks `fedpipe doctor --format json`, writes runs.csv and confusion.md, and
keeps each finished federation in runs.jsonl (what a second call resumes from;
the skipping itself is covered in tests/test_corpus_tables.py).
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
CORPUS = Path(__file__).resolve().parents[2] / "benchmarks" / "doctor"
PICKED = ("weights-above-1", "healthy-fedavg")


def _scenarios(path: Path) -> Path:
    """The two scenarios of scenarios.yaml as they are, with smaller sizes."""
    raw = yaml.safe_load((CORPUS / "scenarios.yaml").read_text())
    raw["scenarios"] = [s for s in raw["scenarios"] if s["name"] in PICKED]
    for s in raw["scenarios"]:
        s["vary"] = {"clients": [3, 3], "rounds": [2, 2]}
    path.write_text(yaml.safe_dump(raw))
    return path


def _corpus(tmp: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, str(CORPUS / "run_corpus.py"), "-j", "2",
         "--replicates", "1", "--scenarios", str(tmp / "scenarios.yaml"),
         "--work", str(tmp / "work"), "--out", str(tmp / "out")],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_runner_tables_a_planted_and_a_healthy_run(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    _scenarios(tmp_path / "scenarios.yaml")
    first = _corpus(tmp_path, cli_env)
    assert "0 runs kept, 2 to train" in first.stdout
    with (tmp_path / "out" / "runs.csv").open() as fh:
        rows = {r["scenario"]: r for r in csv.DictReader(fh)}
    assert set(rows) == set(PICKED)
    planted, healthy = rows["weights-above-1"], rows["healthy-fedavg"]
    assert planted["planted"] == "aggregation-weights-not-normalized"
    assert planted["first_finding"] == planted["planted"], planted
    assert planted["right"] == "True" and planted["status"] == "ok"
    assert healthy["planted"] == "healthy"
    assert healthy["error_findings"] == "0" and healthy["right"] == "True", healthy
    table = (tmp_path / "out" / "confusion.md").read_text()
    assert "first finding is the planted cause: 1/1 (100%)" in table
    assert "healthy runs with an error-level finding: 0** of 1" in table
    journal = (tmp_path / "work" / "runs.jsonl").read_text().splitlines()
    assert len(journal) == 2  # both kept: a second call would train nothing

"""scripts/attack_table.py on one attack x two defenses x one seed x two rounds:
its Markdown and CSV (the whole table is in docs/attacks.md)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "attack_table.py"


def test_attack_table_script_on_one_attack_and_two_defenses(tmp_path: Path) -> None:
    out = tmp_path / "table"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = ["--attacks", "sign_flip", "--defenses", "fedavg", "clipping"]
    args += ["--seeds", "0", "--rounds", "2", "--partitions", "iid", "--clients", "10"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    markdown = out.with_suffix(".md").read_text()
    assert "| attack | fedavg | clipping |" in markdown
    assert "| clean (no attack) | " in markdown and "| sign_flip | " in markdown
    assert "20% malicious" in markdown and "4 federations" in markdown
    with out.with_suffix(".csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["attack"], r["defense"]) for r in rows] == [
        ("none", "fedavg"),
        ("none", "clipping"),
        ("sign_flip", "fedavg"),
        ("sign_flip", "clipping"),
    ]
    for r in rows:
        assert 0.0 < float(r["accuracy_mean"]) <= 1.0
        assert float(r["accuracy_std"]) == 0.0  # one seed
        assert r["seed_0"] == r["accuracy_mean"]
    help_text = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True
    ).stdout
    assert "example: python scripts/attack_table.py" in help_text

"""benchmarks/bench_import.py, once each way: both variants measured, each did
what it says (the script checks scikit-learn was imported, or not), the table
has its ratio."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_import.py"


def test_the_import_row_has_both_times_and_their_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = re.search(
        r"^\| import \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", proc.stdout, re.M
    )
    assert row, proc.stdout
    shipped, deferred, ratio = map(float, row.groups())
    assert shipped > 0 and deferred > 0
    assert ratio == pytest.approx(deferred / shipped, abs=0.01)

"""scripts/chaos.py on a small project: `fedpipe run` and `dvc repro` killed
(SIGKILL of the whole process group) at seeded random moments, each resumed by
the next; the project ends bitwise equal to an uninterrupted run, `dvc status`
clean, no traceback, never wedged. The README's figures come from the script's
full run (50 kills, the default project)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "chaos.py"


def test_killed_runs_resume_to_the_bits_of_an_uninterrupted_run(
    tmp_path: Path, prefect_api: str
) -> None:
    figures = tmp_path / "chaos.json"
    # seed 4 draws `fedpipe run` killed at 7.5 s (its data stages), then `dvc
    # repro` at 10.6 s: a kill of each command, each resuming the one before
    args = ["--kills", "2", "--rounds", "2", "--clients", "3", "--seed", "4"]
    args += ["--window", "2", "20", "--json", str(figures)]
    args += ["--api-url", prefect_api]  # the session's server, not one more
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    got = json.loads(figures.read_text())
    assert got["kills"] == 2
    assert got["kills_by_command"] == {"fedpipe run": 1, "dvc repro": 1}
    assert got["failures"] == [] and got["tracebacks"] == 0
    assert got["dvc_status_clean"] and got["identical"], got["differences"]
    assert got["files_compared"] > 20 and got["lock_outs_compared"] > 10

"""The preprocess stage end to end: a tiny table with columns on scales 1e-3 to
1e4 and missing values (`preprocess.missing: mean`), through `fedpipe run` and
through `dvc repro`: the stage runs in both, gives the same bits in both, and
`fedpipe lineage` shows the fitted transform."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import BIN, file_hashes, make_project, run_cli, run_main

pytestmark = pytest.mark.e2e
FEDPIPE, DVC = str(BIN / "fedpipe"), str(BIN / "dvc")
SETTINGS = {
    "data": {"source": "table", "path": "data/table.csv"},
    "federation": {"clients": 3, "rounds": 3, "fraction_fit": 1.0, "min_clients": 2},
    "partition": {"method": "iid", "min_samples": 10},
    "validation": {"min_rows": 50},
    "preprocess": {"missing": "mean"},
}


def _wide_table(path: Path, rows: int = 150) -> Path:
    """Two classes in 4 columns on scales 1e-3..1e4, 3 % of the cells blank."""
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 2, size=rows)
    scales = np.array([1e-3, 1.0, 50.0, 1e4])
    x = (rng.normal(0, 1, size=(rows, 4)) + labels[:, None] * 1.5) * scales
    x[rng.random(x.shape) < 0.03] = np.nan
    df = pd.DataFrame(x, columns=["tiny", "unit", "mid", "huge"])
    df["label"] = labels
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> dict:
    base = tmp_path_factory.mktemp("preprocess")
    _wide_table(base / "fresh/data/table.csv")
    fresh = make_project(base / "fresh", cli_env, **SETTINGS)
    by_run, by_repro = base / "by-run", base / "by-repro"
    shutil.copytree(fresh, by_run)
    shutil.copytree(fresh, by_repro)
    run = [FEDPIPE, "run", "--no-server-start", "--no-report"]
    return {
        "run": by_run,
        "repro": by_repro,
        "run_out": run_main(run, by_run, cli_env),
        "repro_out": run_cli([DVC, "repro"], by_repro, cli_env),
    }


def test_the_stage_runs_between_partition_and_init(projects: dict) -> None:
    lines = projects["run_out"].stdout.splitlines()
    done = next(line for line in lines if "stage(s) ran" in line)
    assert "partition, preprocess, init" in done
    path = projects["run"] / "data/preprocess/transform.json"
    transform = json.loads(path.read_text())
    assert transform["kind"] == "table"
    assert transform["settings"]["missing"] == "mean"
    assert transform["indicators"]  # some column had missing training values
    lock = (projects["run"] / "dvc.lock").read_text()
    assert "data/preprocess/transform.json" in lock


def test_run_and_repro_give_the_same_bits(projects: dict) -> None:
    for pattern in ("data/preprocess/transform.json", "models/round-*/weights.npz"):
        run = file_hashes(projects["run"], pattern)
        assert run and run == file_hashes(projects["repro"], pattern), pattern


def test_the_model_sees_the_indicator_columns(projects: dict) -> None:
    project = projects["run"]
    transform = json.loads((project / "data/preprocess/transform.json").read_text())
    with np.load(project / "models/round-0/weights.npz") as weights:
        first = weights[sorted(weights.files)[0]]
    assert first.shape[0] == 4 + len(transform["indicators"])
    summary = json.loads((project / "metrics/summary.json").read_text())
    assert np.isfinite(summary["global"]["loss"])  # no NaN reached the model


def test_lineage_shows_the_transform(projects: dict, cli_env: dict[str, str]) -> None:
    out = run_main(["lineage", "round", "3"], projects["run"], cli_env).stdout
    assert "preprocess" in out
    assert "data/preprocess/transform.json" in out
    assert "transform: standard (federated fit from 3 clients' statistics" in out


def test_status_is_clean_after_both(projects: dict, cli_env: dict[str, str]) -> None:
    for name in ("run", "repro"):
        status = run_cli([DVC, "status"], projects[name], cli_env).stdout
        assert "up to date" in status, (name, status)

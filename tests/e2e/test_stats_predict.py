"""`fedpipe stats` and `fedpipe predict` on a run of a tiny table: the preprocess
stage writes the readable statistics and the skew heatmap; `fedpipe predict`
scores raw rows (with empty cells, the transform imputes them) with the final
global model and with round 1's, and its predictions equal those of the saved
model file loaded with plain Keras; a bad table stops with one line naming the
column."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import BIN, make_project, run_cli, run_main

pytestmark = pytest.mark.e2e
FEDPIPE, DVC = str(BIN / "fedpipe"), str(BIN / "dvc")
SETTINGS = {
    "data": {"source": "table", "path": "data/table.csv", "id_column": "pid"},
    "federation": {"clients": 3, "rounds": 2, "fraction_fit": 1.0, "min_clients": 2},
    "partition": {"method": "iid", "min_samples": 10},
    "validation": {"min_rows": 50},
    "preprocess": {"missing": "mean"},
}
COLUMNS = ["tiny", "unit", "huge"]


def _table(rows: int, seed: int) -> pd.DataFrame:
    """Two classes in 3 columns on scales 1e-3..1e4, 3 % of the cells blank."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=rows)
    x = (rng.normal(0, 1, size=(rows, 3)) + labels[:, None] * 1.5) * np.array(
        [1e-3, 1.0, 1e4]
    )
    x[rng.random(x.shape) < 0.03] = np.nan
    df = pd.DataFrame(x, columns=COLUMNS)
    df.insert(0, "pid", [f"p{seed}-{i}" for i in range(rows)])
    df["label"] = np.where(labels == 1, "yes", "no")
    return df


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> Path:
    base = tmp_path_factory.mktemp("stats-predict")
    (base / "p/data").mkdir(parents=True)
    _table(150, 5).to_csv(base / "p/data/table.csv", index=False)
    path = make_project(base / "p", cli_env, **SETTINGS)
    run_main([FEDPIPE, "run", "--no-server-start", "--no-report"], path, cli_env)
    new = _table(23, 11).drop(columns=["label"])
    new.loc[[2, 9], "tiny"] = np.nan  # blank cells: the transform imputes them
    new.loc[4, "huge"] = np.nan
    new.to_csv(path / "new.csv", index=False)
    return path


def test_the_stage_writes_the_statistics_and_the_heatmap(project: Path) -> None:
    stats = json.loads((project / "data/preprocess/stats.json").read_text())
    assert stats["kind"] == "table" and stats["columns"] == COLUMNS
    assert stats["clients"] == 3 and stats["min_count"] == 5
    assert (project / "reports/preprocess/feature_skew.png").stat().st_size > 1000
    lock = (project / "dvc.lock").read_text()
    assert "data/preprocess/stats.json" in lock


def test_fedpipe_stats_prints_every_column_and_client(
    project: Path, cli_env: dict[str, str]
) -> None:
    proc = run_cli([FEDPIPE, "stats"], project, cli_env)  # the command's process
    assert "Traceback" not in proc.stderr
    out = proc.stdout
    lines = out.splitlines()
    assert lines[0].startswith("data/preprocess/stats.json: table, 3 clients, ")
    for name in COLUMNS:
        assert any(line.startswith(name) for line in lines), name
    for i in range(3):
        assert any(line.startswith(f"client {i}: ") for line in lines), i
    assert "heatmap: reports/preprocess/feature_skew.png" in out
    one = run_main(["stats", "--client", "2", "--column", "huge"], project,
                   cli_env).stdout  # fmt: skip
    assert "client 0:" not in one and "client 2:" in one
    bad = run_main(["stats", "--column", "nope"], project, cli_env,
                   check=False)  # fmt: skip
    assert bad.returncode != 0
    assert "--column 'nope': not a column of data/preprocess/stats.json" in bad.stderr


def _plain_keras(model_file: Path, rows: np.ndarray, tmp: Path) -> np.ndarray:
    """Predictions of ``model_file`` in a process with plain Keras only."""
    import subprocess
    import sys

    np.save(tmp / "x.npy", rows)
    script = (
        "import sys, numpy as np, keras\n"
        "m = keras.saving.load_model(sys.argv[1])\n"
        "np.save(sys.argv[3], m.predict(np.load(sys.argv[2]), verbose=0))\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(model_file), str(tmp / "x.npy"),
         str(tmp / "p.npy")],
        check=True, cwd=tmp, capture_output=True, text=True,
    )  # fmt: skip
    return np.load(tmp / "p.npy")


@pytest.mark.parametrize("round_", [None, 1])
def test_predict_equals_the_saved_model_loaded_with_plain_keras(
    project: Path, cli_env: dict[str, str], tmp_path: Path, round_: int | None
) -> None:
    args = ["predict", "new.csv", "--out", str(tmp_path / "pred.csv")]
    if round_ is None:  # the command's own process
        out = run_cli([FEDPIPE, *args], project, cli_env).stdout
    else:
        out = run_main([*args, "--round", str(round_)], project, cli_env).stdout
    k = 2 if round_ is None else round_
    assert f"23 rows of new.csv scored by round {k}'s global model" in out
    pred = pd.read_csv(tmp_path / "pred.csv", dtype={"pid": str})
    assert pred.columns.tolist() == ["pid", "prediction", "p_no", "p_yes", "notes"]
    raw = pd.read_csv(project / "new.csv")
    assert pred["pid"].tolist() == raw["pid"].tolist()
    rows = raw[COLUMNS].to_numpy(dtype=np.float32)  # blank cells: NaN
    assert np.isnan(rows).any()
    direct = _plain_keras(project / f"models/round-{k}/model.keras", rows, tmp_path)
    np.testing.assert_array_equal(pred["p_yes"].to_numpy(np.float32), direct[:, 0])
    assert pred["prediction"].tolist() == [
        "yes" if p > 0.5 else "no" for p in direct[:, 0]
    ]
    status = run_cli([DVC, "status"], project, cli_env).stdout
    assert "up to date" in status  # the exported file is no pipeline output


def test_predict_names_a_missing_column_in_one_line(
    project: Path, cli_env: dict[str, str]
) -> None:
    """The CLI's path for a table it cannot score: one line, no traceback. What
    each kind of bad table says is tested in process (tests/test_predict_raw.py:
    a missing column, a non-numeric value, empty cells)."""
    raw = pd.read_csv(project / "new.csv", dtype=str)
    raw.drop(columns=["unit"]).to_csv(project / "no_unit.csv", index=False)
    expected = "no_unit.csv: column 'unit' is missing; the model takes"
    proc = run_cli([FEDPIPE, "predict", "no_unit.csv"], project, cli_env, check=False)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and expected in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("round_", [1, 2])
def test_predict_on_the_heldout_rows_scores_what_the_round_recorded(
    project: Path, cli_env: dict[str, str], tmp_path: Path, round_: int
) -> None:
    """An oracle outside the exported file (the test above compares the file
    with itself): the held-out rows, raw from the user's CSV with their blank
    cells, scored by `fedpipe predict`, reach the accuracy the pipeline recorded
    for that round's global model on its own prepared held-out set."""
    held = json.loads((project / "data/partition/manifest.json").read_text())["heldout"]
    raw = pd.read_csv(project / "data/table.csv", dtype={"pid": str})
    rows = raw[raw["pid"].isin(held)]
    assert len(rows) == len(held) > 20 and rows[COLUMNS].isna().any().any()
    rows.drop(columns=["label"]).to_csv(tmp_path / "held.csv", index=False)
    out = tmp_path / "pred.csv"
    run_main(["predict", str(tmp_path / "held.csv"), "--out", str(out),
              "--round", str(round_)], project, cli_env)  # fmt: skip
    pred = pd.read_csv(out, dtype={"pid": str}).set_index("pid")
    truth = rows.set_index("pid")["label"]
    accuracy = float((pred.loc[truth.index, "prediction"] == truth).mean())
    record = json.loads((project / f"metrics/rounds/round-{round_}.json").read_text())
    assert accuracy == pytest.approx(record["global"]["accuracy"], abs=1e-6)

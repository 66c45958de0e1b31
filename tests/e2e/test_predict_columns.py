"""`fedpipe predict` on a run of a table with a categorical and a free-text
column (imputed empty cells): it scores raw rows, an unseen category and new
words among them, and its predictions equal those of the saved model file
loaded with plain Keras and fed the raw columns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from e2e_helpers import BIN, make_project, run_cli, run_main

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
SETTINGS = {
    "data": {"source": "table", "path": "data/table.csv", "id_column": "pid"},
    "federation": {"clients": 3, "rounds": 2, "fraction_fit": 1.0, "min_clients": 2},
    "partition": {"method": "iid", "min_samples": 10},
    "validation": {"min_rows": 50},
    "preprocess": {"missing": "mean", "text": ["review"], "text_encoding": "tfidf",
                   "min_category_count": 3},
}  # fmt: skip
COLUMNS = ["size", "color", "review"]
WORDS = ["good", "great", "bad", "awful", "the", "film", "plot"]


def _table(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size=rows)
    reviews = [
        " ".join(rng.choice(WORDS, size=3)) + (" Great!" if y else " BAD.")
        for y in labels
    ]
    df = pd.DataFrame(
        {
            "pid": [f"p{seed}-{i}" for i in range(rows)],
            "size": rng.normal(0, 1, rows) * 1e3 + labels * 500,
            "color": rng.choice(["red", "green", "blue"], size=rows),
            "review": reviews,
            "label": np.where(labels == 1, "yes", "no"),
        }
    )
    df.loc[rng.random(rows) < 0.04, "color"] = np.nan
    df.loc[rng.random(rows) < 0.04, "size"] = np.nan
    return df


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> Path:
    base = tmp_path_factory.mktemp("predict-columns")
    (base / "p/data").mkdir(parents=True)
    _table(150, 5).to_csv(base / "p/data/table.csv", index=False)
    path = make_project(base / "p", cli_env, **SETTINGS)
    run_main([FEDPIPE, "run", "--no-server-start", "--no-report"], path, cli_env)
    new = _table(21, 11).drop(columns=["label"])
    new.loc[[1, 8], "color"] = ["teal", " violet "]  # never seen in training
    new.loc[3, "review"] = "brand new words, none seen"
    new.loc[[4, 9], "color"] = np.nan  # blank: imputed
    new.loc[5, "review"] = np.nan
    new.to_csv(path / "new.csv", index=False)
    return path


def test_predict_scores_raw_categories_and_text_as_the_model_file_does(
    project: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    as_a_user = {k: v for k, v in cli_env.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    said = run_cli(
        [FEDPIPE, "predict", "new.csv", "--out", str(tmp_path / "pred.csv")],
        project, as_a_user,  # TensorFlow's C++ logging as a user has it
    )  # fmt: skip
    out = said.stdout
    assert "21 rows of new.csv scored by round 2's global model" in out
    pred = pd.read_csv(tmp_path / "pred.csv", dtype={"pid": str}, keep_default_na=False)
    assert pred.columns.tolist() == ["pid", "prediction", "p_no", "p_yes", "notes"]
    # the unseen colours and the blanks are flagged, row by row and in a line
    notes = pred["notes"].tolist()
    assert "color 'teal' not in the vocabulary" in notes[1]
    assert "color 'violet' not in the vocabulary" in notes[8]
    assert "color blank: filled" in notes[4] and "color blank: filled" in notes[9]
    assert notes[5] == "review blank: no words"
    new = pd.read_csv(project / "new.csv")
    clean = [
        i
        for i in range(len(new))
        if i not in (1, 4, 5, 8, 9) and new.loc[i].notna().all()
    ]
    assert clean and all(notes[i] == "" for i in clean)
    assert "in the notes column" in out and "2 value(s) not in the model" in out, out
    # TensorFlow's own lines stay off the console (issue 36: an E0000 line)
    assert not [line for line in said.stderr.splitlines() if line.strip()], said.stderr
    # the README's recipe: one 1-D array per column, strings stripped, "" empty
    raw = pd.read_csv(project / "new.csv")
    columns = {
        "size": raw["size"].to_numpy("float32"),
        "color": raw["color"].fillna("").str.strip().to_numpy(object),
        "review": raw["review"].fillna("").str.strip().to_numpy(object),
    }
    np.savez(tmp_path / "x.npz", **{k: v.astype(str) if v.dtype == object else v
                                    for k, v in columns.items()})  # fmt: skip
    script = (
        "import sys, numpy as np, keras\n"
        "m = keras.saving.load_model(sys.argv[1])\n"
        "x = {k: v.astype(object) if v.dtype.kind == 'U' else v\n"
        "     for k, v in np.load(sys.argv[2]).items()}\n"
        "np.save(sys.argv[3], m.predict(x, verbose=0))\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(project / "models/round-2/model.keras"),
         str(tmp_path / "x.npz"), str(tmp_path / "p.npy")],
        check=True, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    direct = np.load(tmp_path / "p.npy")
    np.testing.assert_array_equal(pred["p_yes"].to_numpy(np.float32), direct[:, 0])
    assert np.isfinite(direct).all()


def test_predict_on_the_heldout_rows_scores_what_the_round_recorded(
    project: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """An oracle outside the exported file: the held-out rows, raw from the
    user's CSV, scored by `fedpipe predict`, reach the accuracy the pipeline
    recorded for round 2's global model on its own prepared held-out set (the
    test above compares the file with itself, which a wrong export passes)."""
    import json

    held = json.loads((project / "data/partition/manifest.json").read_text())["heldout"]
    raw = pd.read_csv(project / "data/table.csv", dtype={"pid": str})
    rows = raw[raw["pid"].isin(held)]
    assert len(rows) == len(held) > 20
    rows.drop(columns=["label"]).to_csv(tmp_path / "held.csv", index=False)
    out = tmp_path / "pred.csv"
    run_main(["predict", str(tmp_path / "held.csv"), "--out", str(out)],
             project, cli_env)  # fmt: skip
    pred = pd.read_csv(out, dtype={"pid": str}).set_index("pid")
    truth = rows.set_index("pid")["label"]
    accuracy = float((pred.loc[truth.index, "prediction"] == truth).mean())
    record = json.loads((project / "metrics/rounds/round-2.json").read_text())
    assert accuracy == pytest.approx(record["global"]["accuracy"], abs=1e-6)


def test_a_numeric_column_with_text_is_named_and_categories_are_not(
    project: Path, cli_env: dict[str, str]
) -> None:
    raw = pd.read_csv(project / "new.csv", dtype=str)
    raw.loc[6, "size"] = "large"
    raw.to_csv(project / "bad.csv", index=False)
    proc = run_cli([FEDPIPE, "predict", "bad.csv"], project, cli_env, check=False)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert (
        len(errors) == 1
        and "column 'size' has non-numeric values (row 7" in (errors[0])
    ), proc.stderr


def test_fedpipe_stats_shows_the_top_values(
    project: Path, cli_env: dict[str, str]
) -> None:
    out = run_main(["stats"], project, cli_env).stdout
    assert "top values (values of fewer than 5 rows not shown):" in out
    lines = [line for line in out.splitlines() if line.startswith("  color (values): ")]
    assert len(lines) == 1 + 3  # global and each client
    assert all({"red", "green", "blue"} & set(line.split()) for line in lines)
    assert "  review (tokens): " in out
    assert "  color: 0 unseen (in no client's training rows), 0 rare" in out

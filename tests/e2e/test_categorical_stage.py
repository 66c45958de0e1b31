"""Categorical and free-text columns end to end: a tiny table with a numeric
column, a string column and a message column (`preprocess.text: [message]`)
through `fedpipe run` and through `dvc repro`: the same bits in both, the model
built for the encoded width, and the ingest re-run when a declaration changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from e2e_helpers import BIN, file_hashes, make_project, run_cli, run_main

pytestmark = pytest.mark.e2e
FEDPIPE, DVC = str(BIN / "fedpipe"), str(BIN / "dvc")
SETTINGS = {
    "data": {"source": "table", "path": "data/table.csv"},
    "federation": {"clients": 3, "rounds": 2, "fraction_fit": 1.0, "min_clients": 2},
    "partition": {"method": "iid", "min_samples": 10},
    "validation": {"min_rows": 50},
    "preprocess": {"text": ["message"], "min_category_count": 3},
}


def _table(path: Path, rows: int = 150) -> Path:
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, size=rows)
    words = np.array(["fine", "good", "bad", "poor", "ok", "item", "box"])
    df = pd.DataFrame(
        {
            "amount": rng.normal(0, 1e3, rows) + labels * 800,
            "shop": rng.choice(["north", "south", "east", "west"], size=rows),
            "message": [
                " ".join(rng.choice(words[[0, 1, 4, 5]] if y else words[2:], size=4))
                for y in labels
            ],
            "label": labels,
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def projects(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> dict:
    base = tmp_path_factory.mktemp("categorical")
    _table(base / "fresh/data/table.csv")
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


def test_the_model_takes_the_encoded_columns(projects: dict) -> None:
    project = projects["run"]
    transform = json.loads((project / "data/preprocess/transform.json").read_text())
    kinds = {e["column"]: e["kind"] for e in transform["encodings"]}
    assert kinds == {"shop": "onehot", "message": "multihot"}
    shop = next(e for e in transform["encodings"] if e["column"] == "shop")
    assert sorted(shop["vocabulary"]) == ["east", "north", "south", "west"]
    width = 1 + sum(
        1 + len(e["vocabulary"]) if e["kind"] == "onehot" else len(e["vocabulary"])
        for e in transform["encodings"]
    )
    with np.load(project / "models/round-0/weights.npz") as weights:
        first = weights[sorted(weights.files)[0]]
    assert first.shape[0] == width
    summary = json.loads((project / "metrics/summary.json").read_text())
    assert np.isfinite(summary["global"]["loss"])


def test_run_and_repro_give_the_same_bits(projects: dict) -> None:
    for pattern in (
        "data/prepared/schema.json",
        "data/preprocess/transform.json",
        "models/round-*/weights.npz",
    ):
        run = file_hashes(projects["run"], pattern)
        assert run and run == file_hashes(projects["repro"], pattern), pattern


def test_lineage_names_the_encoded_columns(
    projects: dict, cli_env: dict[str, str]
) -> None:
    out = run_main(["lineage", "round", "2"], projects["run"], cli_env).stdout
    assert "encoded shop (onehot, 4), message (multihot," in out


def test_a_new_declaration_reruns_the_ingest(
    projects: dict, cli_env: dict[str, str]
) -> None:
    project = projects["repro"]
    path = project / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params["preprocess"]["categorical"] = ["amount"]
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    status = run_cli([DVC, "status"], project, cli_env).stdout
    assert "ingest" in status and "preprocess.categorical" in status

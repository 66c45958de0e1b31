"""Feature skew end to end: Dirichlet labels with one domain per client on the
default digits, through `fedpipe run` and through `dvc repro` (the rounds read the
clients' transformed inputs in the stage processes): the manifest records each
client's transform, the two give the same bits, and the partition report and
`fedpipe status` show the feature skew beside the label skew. Both start from
the session's digits already ingested and validated (``tiny_ready``): the
partition and what follows it run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from e2e_helpers import BIN, copy_project, file_hashes, run_cli, run_main

pytestmark = pytest.mark.e2e
FEDPIPE, DVC = str(BIN / "fedpipe"), str(BIN / "dvc")
SETTINGS = {
    "federation": {"rounds": 2},
    "partition": {"method": "dirichlet", "alpha": 1.0, "feature_skew": "domains"},
}


@pytest.fixture(scope="module")
def projects(
    tiny_ready: Path,
    tmp_path_factory: pytest.TempPathFactory,
    cli_env: dict[str, str],
) -> dict:
    base = tmp_path_factory.mktemp("feature-skew")
    fresh = copy_project(tiny_ready, base / "fresh", cli_env, **SETTINGS)
    by_run, by_repro = base / "by-run", base / "by-repro"
    shutil.copytree(fresh, by_run)
    shutil.copytree(fresh, by_repro)
    run = [FEDPIPE, "run", "--no-server-start", "--no-report"]
    ran = run_main(run, by_run, cli_env).stdout.split("stage(s) ran", 1)[1]
    assert "validate" not in ran and "partition, preprocess, init" in ran
    repro = run_cli([DVC, "repro"], by_repro, cli_env).stdout
    assert "Running stage 'validate'" not in repro
    assert "Running stage 'partition'" in repro
    return {"run": by_run, "repro": by_repro}


def test_the_manifest_records_each_clients_domain(projects: dict) -> None:
    manifest = json.loads(
        (projects["run"] / "data/partition/manifest.json").read_text()
    )
    assert manifest["method"] == "dirichlet"
    assert manifest["params"]["feature_skew"] == "domains"
    kinds = [c["feature_transform"]["kind"] for c in manifest["clients"]]
    assert kinds == ["rotation", "contrast", "inversion"]


def test_run_and_repro_give_the_same_bits(projects: dict) -> None:
    for pattern in ("data/partition/manifest.json", "models/round-*/weights.npz"):
        run = file_hashes(projects["run"], pattern)
        assert run and run == file_hashes(projects["repro"], pattern), pattern


def test_the_partition_report_shows_feature_skew(
    projects: dict, cli_env: dict[str, str]
) -> None:
    report = projects["run"] / "reports/partition"
    skew = json.loads((report / "skew.json").read_text())
    assert skew["feature_skew"] > 0.5 and "label_skew" in skew
    stats = pd.read_csv(report / "feature_stats.csv")
    assert list(stats["client"]) == [0, 1, 2]
    assert (stats["distance"] > 0).all()
    assert (report / "feature_skew.png").read_bytes()[:4] == b"\x89PNG"
    text = run_main(["status"], projects["run"], cli_env).stdout
    assert f"feature skew {skew['feature_skew']:.3f}" in text

"""Bring your own data, end to end: an image folder and a CSV table through
`fedpipe run`, and the bad-input corpus script (scripts/bad_input_corpus.py:
broken inputs must fail clearly without costing the last good run anything) on
two of its cases."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from bad_input_corpus import KINDS  # scripts/: e2e_helpers puts it on the path
from e2e_helpers import (
    BIN,
    file_hashes,
    make_project,
    run_cli,
    run_main,
    write_image_folder,
    write_table,
)

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bad_input_corpus.py"

# the script's good projects: an image folder and a table with natural clients
IMAGES, TABLE = KINDS["images"], KINDS["table"]


def _project(path: Path, env: dict[str, str], kind: str) -> Path:
    if kind == "images":
        write_image_folder(path / "data/images")
        project = make_project(path, env, **IMAGES)
    else:
        write_table(path / "data/table.csv")
        project = make_project(path, env, **TABLE)
    run_main([FEDPIPE, "run", "--no-server-start", "--no-report"], project, env)
    return project


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> dict:
    base = tmp_path_factory.mktemp("own-data")
    return {kind: _project(base / kind, cli_env, kind) for kind in ("images", "table")}


def test_image_folder_runs_end_to_end(good: dict, cli_env: dict[str, str]) -> None:
    project = good["images"]
    schema = yaml.safe_load((project / "data/prepared/schema.json").read_text())
    assert schema["input_shape"] == [32, 32, 3]
    assert schema["class_names"] == ["with_mask", "without_mask"]
    summary = yaml.safe_load((project / "metrics/summary.json").read_text())
    assert summary["global"]["accuracy"] > 0.5
    assert len(file_hashes(project, "models/round-*/weights.npz")) == 3
    assert "up to date" in run_cli([DVC, "status"], project, cli_env).stdout
    # mixed sizes are reported as a warning, not a failure
    report = yaml.safe_load((project / "reports/validation/summary.json").read_text())
    assert report["success"] and any(
        "differ in size" in w["detail"] for w in report["warnings"]
    )
    assert (project / "reports/partition/label_distribution.png").is_file()


def test_table_runs_end_to_end_with_natural_clients(
    good: dict, cli_env: dict[str, str]
) -> None:
    project = good["table"]
    manifest = yaml.safe_load((project / "data/partition/manifest.json").read_text())
    assert manifest["client_keys"] == ["site-0", "site-1", "site-2"]
    table = pd.read_csv(project / "data/table.csv")
    by_id = {f"row-{i + 1}": h for i, h in enumerate(table["hospital"])}
    for client in manifest["clients"]:
        sites = {by_id[i] for i in client["train"] + client["test"]}
        assert sites == {manifest["client_keys"][client["client"]]}
    assert "up to date" in run_cli([DVC, "status"], project, cli_env).stdout
    # its own data, not the demo's: the mnist5k stage neither ran nor is recorded,
    # and the report's data hashes do not name its file (issue 37)
    for name in ("dvc.yaml", "dvc.lock"):
        assert "mnist5k" not in yaml.safe_load((project / name).read_text())["stages"]
    assert not (project / "data/raw/mnist5k.parquet").exists()
    run_cli([FEDPIPE, "report"], project, cli_env)
    page = (project / "reports/report.html").read_text()
    assert "data/prepared" in page and "mnist5k" not in page


def test_bad_input_corpus_script_on_two_cases(
    good: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """scripts/bad_input_corpus.py through the real CLI on two of its cases (a
    broken image that fails validation, a table label outside `data.classes` that
    stops the ingest); the whole corpus is the script's (docs/pipeline.md shows its
    table), every case's message is unit-tested in tests/test_bad_input.py."""
    cases = ["truncated-png", "label-not-in-data-classes"]
    proc = run_cli(
        [sys.executable, str(SCRIPT), "--cases", *cases, "--work", str(tmp_path)]
        + ["--projects", f"images={good['images']}", f"table={good['table']}"],
        Path.cwd(),
        cli_env,
    )
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("| case | exit | first line of the message |")
    rows = [line.split(" | ") for line in lines[2:4]]
    assert [(r[0], r[1], r[-1]) for r in rows] == [
        ("| truncated-png", "1", "pass |"),
        ("| label-not-in-data-classes", "1", "pass |"),
    ]
    assert rows[0][2].startswith("error: data/prepared: data validation failed (")
    assert "with_mask/img_000.png" in rows[0][3]  # the summary line naming the file
    assert rows[1][2].startswith("error: data.classes: ") and rows[1][3] == "(the same)"
    assert "2 of 2 cases pass" in proc.stdout
    # the cases ran on copies: the good projects are as they were
    for kind in ("images", "table"):
        status = run_cli([DVC, "status"], good[kind], cli_env).stdout
        assert "up to date" in status

"""Bring your own data, end to end: an image folder and a CSV table through
`fedpipe run`, and a corpus of broken inputs that must fail clearly without
costing the last good run anything (dvc.lock, data and models untouched)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from e2e_helpers import (
    BIN,
    file_hashes,
    make_project,
    run_cli,
    write_image_folder,
    write_table,
)

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")

IMAGES = {
    "data": {"source": "images", "path": "data/images", "image_size": [32, 32]},
    "model": {"name": "seed_cnn"},
    "federation": {"clients": 2, "rounds": 2, "fraction_fit": 1.0, "min_clients": 1},
    "partition": {"min_samples": 10},
    "validation": {"min_rows": 50},
}
TABLE = {
    "data": {"source": "table", "path": "data/table.csv", "client_column": "hospital"},
    "model": {"name": "mlp"},
    "federation": {"clients": 3, "rounds": 2, "fraction_fit": 1.0, "min_clients": 1},
    "partition": {"method": "natural", "min_samples": 10},
    "validation": {"min_rows": 50},
}


def _project(path: Path, env: dict[str, str], kind: str) -> Path:
    if kind == "images":
        write_image_folder(path / "data/images")
        project = make_project(path, env, **IMAGES)
    else:
        write_table(path / "data/table.csv")
        project = make_project(path, env, **TABLE)
    run_cli([FEDPIPE, "run", "--no-server-start", "--no-report"], project, env)
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


def _break_truncated_png(project: Path) -> str:
    target = project / "data/images/with_mask/img_000.png"
    target.write_bytes(target.read_bytes()[:60])
    return "with_mask/img_000.png"


def _break_text_file(project: Path) -> str:
    (project / "data/images/without_mask/notes.txt").write_text("not an image\n")
    return "without_mask/notes.txt"


def _break_empty_class(project: Path) -> str:
    # DVC hashes files, so an empty folder alone changes no dependency: the case
    # is run with --force (a first run on such a folder behaves the same)
    (project / "data/images/no_images_yet").mkdir()
    return "no_images_yet"


def _break_mixed_sizes_strict(project: Path) -> str:
    _set(project, validation={"mixed_sizes": "fail"})
    return "differ in size"


def _break_empty_folder(project: Path) -> str:
    (project / "data/empty").mkdir()
    _set(project, data={"path": "data/empty"})
    return "data.path"


def _break_missing_label_column(project: Path) -> str:
    df = pd.read_csv(project / "data/table.csv").rename(columns={"label": "target"})
    df.to_csv(project / "data/table.csv", index=False)
    return "data.label_column"


def _break_nan_features(project: Path) -> str:
    df = pd.read_csv(project / "data/table.csv")
    df.loc[[4, 9], "f3"] = float("nan")
    df.to_csv(project / "data/table.csv", index=False)
    return "row-5"


def _break_string_in_numeric(project: Path) -> str:
    df = pd.read_csv(project / "data/table.csv").astype({"f1": object})
    df.loc[11, "f1"] = "n/a (sensor off)"
    df.to_csv(project / "data/table.csv", index=False)
    return "row-12"


def _break_single_class(project: Path) -> str:
    df = pd.read_csv(project / "data/table.csv")
    df["label"] = 0
    df.to_csv(project / "data/table.csv", index=False)
    return "at least 2 classes"


def _break_label_outside_classes(project: Path) -> str:
    df = pd.read_csv(project / "data/table.csv")
    df.loc[6, "label"] = 7
    df.to_csv(project / "data/table.csv", index=False)
    _set(project, data={"num_classes": 3})
    return "row-7"


def _break_fractional_label(project: Path) -> str:
    df = pd.read_csv(project / "data/table.csv")
    df["label"] = df["label"].astype(float)
    df.loc[6, "label"] = 0.5
    df.to_csv(project / "data/table.csv", index=False)
    # the value the file holds, not the -1 it is stored as
    return "1 row has a problem (e.g. \"label '0.5' is not an integer class index"


def _break_label_not_in_data_classes(project: Path) -> str:
    _set(project, data={"classes": ["0", "1"]})
    return (
        "data.classes: data.label_column 'label' in data/table.csv holds '2' (at row-"
    )


def _set(project: Path, **sections: dict) -> None:
    path = project / "params.yaml"
    text = path.read_text()
    head, marker, chain = text.partition("# --- generated")
    params = yaml.safe_load(head)
    for section, values in sections.items():
        params.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(params, sort_keys=False) + "\n" + marker + chain)


CORPUS = {
    "truncated-png": ("images", _break_truncated_png),
    "text-file-in-class-folder": ("images", _break_text_file),
    "empty-class-folder": ("images", _break_empty_class),
    "mixed-image-shapes-strict": ("images", _break_mixed_sizes_strict),
    "empty-folder": ("images", _break_empty_folder),
    "missing-label-column": ("table", _break_missing_label_column),
    "nan-features": ("table", _break_nan_features),
    "strings-in-numeric-column": ("table", _break_string_in_numeric),
    "single-class": ("table", _break_single_class),
    "label-outside-declared-classes": ("table", _break_label_outside_classes),
    "fractional-label": ("table", _break_fractional_label),
    "label-not-in-data-classes": ("table", _break_label_not_in_data_classes),
}


@pytest.mark.parametrize("case", list(CORPUS))
def test_bad_input_fails_clearly_and_costs_nothing(
    case: str, good: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    kind, breaker = CORPUS[case]
    project = tmp_path / kind
    shutil.copytree(good[kind], project, symlinks=True)
    lock = (project / "dvc.lock").read_text()
    kept = {
        **file_hashes(project, "models/round-*/weights.npz"),
        **file_hashes(project, "data/prepared/*"),
        **file_hashes(project, "data/partition/manifest.json"),
    }
    expected = breaker(project)

    args = [FEDPIPE, "run", "--no-server-start", "--no-report"]
    if breaker is _break_empty_class:
        args.append("--force")
    proc = run_cli(args, project, cli_env, check=False)
    assert proc.returncode != 0
    assert expected in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr.split("error:")[-1]
    assert (project / "dvc.lock").read_text() == lock
    after = {
        **file_hashes(project, "models/round-*/weights.npz"),
        **file_hashes(project, "data/prepared/*"),
        **file_hashes(project, "data/partition/manifest.json"),
    }
    assert after == kept


def test_missing_data_path_stops_before_any_work(
    good: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = tmp_path / "table"
    shutil.copytree(good["table"], project, symlinks=True)
    _set(project, data={"path": "data/nowhere.csv"})
    proc = run_cli(
        [FEDPIPE, "run", "--no-server-start", "--no-report"],
        project,
        cli_env,
        check=False,
    )
    assert proc.returncode == 2
    assert "data.path='data/nowhere.csv' does not exist" in proc.stderr

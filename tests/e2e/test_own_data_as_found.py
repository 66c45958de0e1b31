"""Own data as people have it, end to end: a table whose labels are class names
and a photo folder copied from Windows or macOS (Thumbs.db, .DS_Store,
desktop.ini, __MACOSX/, ._name files), each through `fedpipe run`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from e2e_helpers import BIN, make_project, run_main, write_image_folder

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
RUN = [FEDPIPE, "run", "--no-server-start", "--no-report"]
TINY = {
    "model": {"name": "mlp"},
    "federation": {"clients": 2, "rounds": 2, "fraction_fit": 1.0, "min_clients": 1},
    "partition": {"min_samples": 5},
    "validation": {"min_rows": 20},
}
NAMES = ("with_mask", "cat", "dog")  # not in sorted order
OS_FILES = (
    "Thumbs.db",
    "desktop.ini",
    ".DS_Store",
    "with_mask/Thumbs.db",
    "with_mask/desktop.ini",
    "without_mask/.DS_Store",
    "without_mask/._img_000.png",
    "__MACOSX/with_mask/._img_000.png",
)


def _named_table(path: Path, rows: int = 60) -> Path:
    """Three blobs in 4 features, labelled by name."""
    rng = np.random.default_rng(3)
    labels = np.arange(rows) % 3
    x = rng.normal(0, 3, size=(3, 4))[labels] + rng.normal(0, 1, size=(rows, 4))
    df = pd.DataFrame(x, columns=[f"f{i}" for i in range(4)])
    df["label"] = [NAMES[i] for i in labels]
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


def _copied_from_a_desktop(root: Path) -> Path:
    write_image_folder(root, per_class=15)
    for name in OS_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"\x00\x05\x16\x07 not an image")
    return root


def _class_count_columns(project: Path) -> list[str]:
    counts = pd.read_csv(project / "reports/partition/class_counts.csv")
    return list(counts.columns)


def test_table_with_class_names_runs_end_to_end(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    _named_table(tmp_path / "p/data/table.csv")
    data = {"data": {"source": "table", "path": "data/table.csv"}}
    project = make_project(tmp_path / "p", cli_env, **TINY, **data)
    run_main(RUN, project, cli_env)
    schema = yaml.safe_load((project / "data/prepared/schema.json").read_text())
    assert schema["class_names"] == ["cat", "dog", "with_mask"]
    assert _class_count_columns(project) == [
        "client", "n_train", "n_test", "cat", "dog", "with_mask",
    ]  # fmt: skip
    summary = yaml.safe_load((project / "metrics/summary.json").read_text())
    assert summary["global"]["accuracy"] is not None


def test_photo_folder_with_os_metadata_runs_end_to_end(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    _copied_from_a_desktop(tmp_path / "p/data/images")
    data = {"data": {"source": "images", "path": "data/images", "image_size": [16, 16]}}
    project = make_project(tmp_path / "p", cli_env, **TINY, **data)
    proc = run_main(RUN, project, cli_env)
    samples = pd.read_parquet(project / "data/prepared/samples.parquet")
    assert len(samples) == 30
    assert (samples["status"] == "ok").all()
    ids = set(samples["sample_id"])
    assert not any(name in ids for name in OS_FILES)
    assert not any("__MACOSX" in s or "/." in s for s in samples["source"])
    assert _class_count_columns(project)[3:] == ["with_mask", "without_mask"]
    report = yaml.safe_load((project / "reports/validation/summary.json").read_text())
    assert report["success"]
    assert sorted(report["skipped"]) == sorted(
        [*OS_FILES[:-1], "__MACOSX/"]
    )  # the folder is skipped as a whole
    assert (project / "metrics/summary.json").is_file(), proc.stderr[-2000:]

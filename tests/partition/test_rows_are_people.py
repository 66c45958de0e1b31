"""A table's rows are people: ``data.dedupe`` by the kind of data, every drop
counted (issue 37, item 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.config.params import DataParams
from fedpipe.core.jsonio import write_json
from fedpipe.data.ingest import ingest_arrays, read_samples
from fedpipe.data.ingest.table import ingest_table
from fedpipe.data.partition import PartitionError
from fedpipe.data.partition.accounting import (
    accounting_problems,
    dropped_line,
    row_accounting,
)
from fedpipe.data.splits import partition_table

SETTINGS = {"min_samples": 2, "min_classes": 1}


def _people(n_groups: int = 20) -> pd.DataFrame:
    """``n_groups`` feature profiles (sex, class, age band), three people each:
    two of label 0 and one of label 1, as passengers who share every feature."""
    rows = []
    for g in range(n_groups):
        for label in (0, 0, 1):
            rows.append({"sex": g % 2, "pclass": g % 3, "age_band": g, "label": label})
    return pd.DataFrame(rows)


def _prepared(root: Path, frame: pd.DataFrame) -> Path:
    frame.to_csv(root / "people.csv", index=False)
    out = root / "data" / "prepared"
    ingest_table(root / "people.csv", out_dir=out, label_column="label")
    return out


def _partition(prepared: Path, dedupe: object, *, table: bool = True) -> dict:
    return partition_table(
        read_samples(prepared), classes=[0, 1], seed=3, test_fraction=0.2,
        method="iid", n_clients=3, local_test_fraction=0.2, dedupe=dedupe,
        settings=SETTINGS, table=table,
    )  # fmt: skip


def _placed(manifest: dict) -> int:
    return len(manifest["heldout"]) + sum(
        len(c["train"]) + len(c["test"]) for c in manifest["clients"]
    )


def test_default_keeps_every_person_of_a_table(tmp_path: Path) -> None:
    """60 people in 20 profiles: the default keeps all 60 (it kept 20)."""
    prepared = _prepared(tmp_path, _people())
    manifest = _partition(prepared, DataParams().dedupe)
    assert manifest["dropped_duplicates"] == []
    assert _placed(manifest) == 60
    assert manifest["dedupe"] == "none"
    assert dropped_line(manifest) is None


def test_false_on_a_table_is_not_refused_as_leakage(tmp_path: Path) -> None:
    """``data.dedupe: false`` kept the repeats and then refused them as leakage;
    a table's held-out check is by id, and the ids are distinct."""
    prepared = _prepared(tmp_path, _people())
    manifest = _partition(prepared, False)
    assert _placed(manifest) == 60


def test_row_drops_whole_repeated_rows_only(tmp_path: Path) -> None:
    """``row``: features and label; each profile's second label-0 person goes."""
    prepared = _prepared(tmp_path, _people())
    manifest = _partition(prepared, "row")
    assert len(manifest["dropped_duplicates"]) == 20
    assert _placed(manifest) == 40
    # the first of each profile's pair stays (data rows 1, 4, 7, ...), the second
    # (2, 5, 8, ...) is dropped
    assert sorted(manifest["dropped_duplicates"]) == sorted(
        f"row-{3 * g + 2}" for g in range(20)
    )


def test_content_on_a_table_drops_as_before_and_says_so(tmp_path: Path) -> None:
    prepared = _prepared(tmp_path, _people())
    manifest = _partition(prepared, "content")
    assert len(manifest["dropped_duplicates"]) == 40
    assert "dedupe" not in manifest  # content: recorded as every manifest before
    assert dropped_line(manifest) == (
        "40 of 60 rows (66.7 %) dropped before the held-out split: repeated "
        "content (data.dedupe: content)"
    )


def _images(root: Path) -> Path:
    """40 tiny images, the first 10 repeated once each (a copied file)."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(40, 4, 4, 1), dtype=np.uint8)
    x[30:40] = x[0:10]
    y = np.tile([0, 1], 20)
    out = root / "prepared"
    ingest_arrays(
        x, y, out_dir=out, source="tiny", class_names=["a", "b"],
        value_range=(0.0, 255.0), scale=255.0,
    )  # fmt: skip
    return out


def test_images_keep_dropping_repeated_content(tmp_path: Path) -> None:
    prepared = _images(tmp_path)
    auto = _partition(prepared, "auto", table=False)
    assert auto == _partition(prepared, True, table=False)
    assert len(auto["dropped_duplicates"]) == 10
    with pytest.raises(PartitionError, match="data.dedupe: content"):
        _partition(prepared, "none", table=False)


@pytest.mark.parametrize(("value", "mode"), [(True, "content"), (False, "none")])
def test_the_earlier_booleans_are_read(value: bool, mode: str) -> None:
    assert DataParams(dedupe=value).dedupe == mode


def _project(root: Path, dedupe: object) -> dict:
    prepared = _prepared(root, _people())
    manifest = _partition(prepared, dedupe)
    write_json(root / "data" / "partition" / "manifest.json", manifest)
    return manifest


def test_row_accounting_adds_up(tmp_path: Path) -> None:
    manifest = _project(tmp_path, "content")
    acct = row_accounting(tmp_path)
    assert acct["rows"] == 60
    assert acct["dropped"] == {"repeated content (data.dedupe: content)": 40}
    assert acct["heldout"] == len(manifest["heldout"])
    assert acct["heldout"] + acct["train"] + acct["test"] == 20
    assert [c["client"] for c in acct["clients"]] == [0, 1, 2]
    assert acct["adds_up"] and accounting_problems(acct) == []


def test_row_accounting_names_a_row_placed_nowhere(tmp_path: Path) -> None:
    manifest = _project(tmp_path, "none")
    lost = manifest["clients"][1]["train"].pop()
    write_json(tmp_path / "data" / "partition" / "manifest.json", manifest)
    acct = row_accounting(tmp_path)
    assert not acct["adds_up"]
    assert acct["missing"] == [lost]
    problems = accounting_problems(acct)
    assert problems[0].startswith("60 rows ingested but 59 placed")
    assert f"1 rows placed nowhere (e.g. {lost})" in problems

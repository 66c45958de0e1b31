"""A table's rows are people: ``data.dedupe`` by the kind of data, every drop
counted (issue 37, item 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from fedpipe.config.params import DataParams
from fedpipe.core.jsonio import write_json
from fedpipe.data.accounting import (
    accounting_problems,
    dropped_line,
    row_accounting,
)
from fedpipe.data.ingest import ingest_arrays, read_samples
from fedpipe.data.ingest.table import ingest_table
from fedpipe.data.partition import PartitionError
from fedpipe.data.partition.deal import partition_table

SETTINGS = {"min_samples": 2, "min_classes": 1}
ROOT = Path(__file__).resolve().parents[2]


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


def _params(root: Path, dedupe: str) -> None:
    """The project's params.yaml with ``data.dedupe`` set."""
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["data"]["dedupe"] = dedupe
    (root / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))


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


# ---------------------------------------------------------------- said everywhere


def test_status_says_what_was_dropped(tmp_path: Path) -> None:
    """``fedpipe status`` said only "validation passed: N rows"."""
    from fedpipe.observe.status import collect, format_text

    _params(tmp_path, "content")
    _project(tmp_path, "content")
    text = format_text(collect(tmp_path))
    assert (
        "40 of 60 rows (66.7 %) dropped before the held-out split: repeated "
        "content (data.dedupe: content)" in text
    )


def test_status_is_quiet_when_nothing_was_dropped(tmp_path: Path) -> None:
    from fedpipe.observe.status import collect, format_text

    _params(tmp_path, "auto")
    _project(tmp_path, "auto")
    assert "dropped" not in format_text(collect(tmp_path))


def test_report_counts_the_rows(tmp_path: Path) -> None:
    from fedpipe.observe.report import _labels_section
    from fedpipe.observe.runfiles import load_run

    manifest = _project(tmp_path, "content")
    html = _labels_section(load_run(tmp_path))
    held = len(manifest["heldout"])
    assert f"60 rows: {held} held out, " in html
    assert "40 of 60 rows (66.7 %) dropped" in html


@pytest.mark.parametrize(
    ("dedupe", "found"), [("content", True), ("auto", False), ("row", True)]
)
def test_doctor_names_a_drop_above_one_percent(
    tmp_path: Path, dedupe: str, found: bool
) -> None:
    from fedpipe.observe.doctor import check_rows_dropped, codes
    from fedpipe.observe.runfiles import load_run

    _params(tmp_path, dedupe)
    _project(tmp_path, dedupe)
    findings = check_rows_dropped(load_run(tmp_path))
    assert bool(findings) is found
    if found:
        (finding,) = findings
        assert finding.code == codes.ROWS_DROPPED
        assert "data.dedupe" in finding.fix
        assert f"data.dedupe = {dedupe}" in finding.fix


def test_doctor_leaves_one_percent_alone() -> None:
    """1 of 100 rows (an odd copied image) is not a finding; 2 of 100 is."""
    from fedpipe.observe.doctor import check_rows_dropped
    from fedpipe.observe.runfiles import RunFiles

    def run(dropped: int) -> RunFiles:
        ids = [f"s{i}" for i in range(100)]
        manifest = {
            "heldout": ids[dropped:20],
            "clients": [{"client": 0, "train": ids[20:], "test": []}],
            "dropped_duplicates": ids[:dropped],
        }
        return RunFiles(root=Path("."), manifest=manifest)

    assert check_rows_dropped(run(1)) == []
    assert len(check_rows_dropped(run(2))) == 1


# ---------------------------------------------------------------- on the console


@pytest.fixture
def task_log(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """The data tasks' run logger as a plain logger (their bodies run outside
    a flow run), its records captured."""
    import logging

    import tasks.data as data_tasks

    logger = logging.getLogger("test.data_tasks")
    monkeypatch.setattr(data_tasks, "get_run_logger", lambda: logger)
    caplog.set_level(logging.INFO, logger="test.data_tasks")
    return data_tasks, caplog


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


@pytest.mark.parametrize(("dedupe", "warned"), [("content", True), ("auto", False)])
def test_partition_warns_of_a_drop(task_log, tmp_path: Path, dedupe, warned) -> None:
    """A warning (shown on the console at the default verbosity); the count was
    in logs/ alone, at info level."""
    data_tasks, caplog = task_log
    prepared = _prepared(tmp_path, _people())
    data_tasks.partition.fn(
        prepared, tmp_path / "manifest.json", tmp_path / "reports",
        classes=[0, 1], seed=3, test_fraction=0.2, method="iid", n_clients=3,
        local_test_fraction=0.2, dedupe=dedupe, settings=SETTINGS,
        min_count_shown=5,
    )  # fmt: skip
    warnings = _warnings(caplog)
    if warned:
        assert warnings == [
            "partition: 40 of 60 rows (66.7 %) dropped before the held-out split: "
            "repeated content (data.dedupe: content); data.dedupe: none keeps "
            "every row"
        ]
    else:
        assert warnings == []


def test_ingest_warns_of_an_id_column(task_log, tmp_path: Path) -> None:
    data_tasks, caplog = task_log
    path = tmp_path / "people.csv"
    _people().to_csv(path)  # with the index: 'Unnamed: 0'
    data = DataParams(source="table", path=str(path), label_column="label")
    data_tasks.ingest.fn(data, tmp_path / "prepared")
    # (the other warnings: its few-level numeric columns may be category codes)
    (warning,) = [w for w in _warnings(caplog) if "Unnamed: 0" in w]
    assert warning.startswith("ingest: data.feature_columns: column 'Unnamed: 0'")
    assert "data.id_column: 'Unnamed: 0'" in warning

"""fedpipe.observe.audit: the invariants every run keeps, on files made here
(each check also on the shape the files had before its fix, where it must
report the broken promise)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fedpipe.core.jsonio import write_json
from fedpipe.data.preprocess.summary import summarize
from fedpipe.observe.audit import INVARIANTS, audit, small_cells

sys.path.insert(0, str(Path(__file__).parent))
from test_categorical import _fit, _frame, _prepared  # noqa: E402


def _stats() -> dict:
    c0 = np.array([0] * 20 + [1] * 6 + [2] * 3, dtype=np.float64)[:, None]
    return summarize(
        [c0, c0[:12]], [np.zeros(29, int), np.zeros(12, int)],
        columns=["color"], class_names=["no", "yes"], kind="table", min_count=5,
        bins=16, column_types={"color": "categorical"},
        strings={"color": ["red", "green", "teal"]},
    )  # fmt: skip


def test_cells_hold_on_a_stats_file_written_under_the_rule(tmp_path: Path) -> None:
    write_json(tmp_path / "data/preprocess/stats.json", _stats())
    assert small_cells(tmp_path) == []
    [result] = audit(tmp_path, only=("cells",))
    assert result.ok and result.name == "cells"


def test_cells_name_a_count_shown_by_difference(tmp_path: Path) -> None:
    stats = _stats()
    stats["global"]["color"]["top"]["green"] = 6  # as written before the rule
    write_json(tmp_path / "data/preprocess/stats.json", stats)
    [message] = small_cells(tmp_path)
    assert message.startswith("data/preprocess/stats.json: ")
    assert "written '<5' but 3 by difference" in message


def test_cells_name_a_small_class_count(tmp_path: Path) -> None:
    path = tmp_path / "reports/partition/class_counts.csv"
    path.parent.mkdir(parents=True)
    pd.DataFrame(
        {"client": [0, 1], "n_train": [40, 13], "n_test": [8, 8],
         "no": [40, 10], "yes": [0, 3]}
    ).to_csv(path, index=False)  # fmt: skip
    found = small_cells(tmp_path)
    assert found == [
        "reports/partition/class_counts.csv, row 2 (client 1): yes: shows a "
        "count of 3 (fewer than 5)"
    ]
    table = pd.read_csv(path).astype(object)
    table.loc[1, "yes"] = "<5"  # hidden, but 13 - 10 gives it away
    table.to_csv(path, index=False)
    assert "but 3 by difference" in small_cells(tmp_path)[0]
    table.loc[1, "no"] = ">=5"
    table.to_csv(path, index=False)
    assert small_cells(tmp_path) == []


def test_the_fit_record_keeps_no_small_count(tmp_path: Path) -> None:
    """transform.json kept exact small counts (the rare values' rows, the
    held-out rows of an unseen value) and named a value seen in one held-out
    row: on the code before the rule this failed ('unseen: a count of 1')."""
    frame = _frame()
    table = _prepared(tmp_path, frame)
    heldout = table["raw"]["heldout"]
    frame.loc[int(heldout[0].split("-")[1]) - 1, "color"] = "mauve"
    table = _prepared(tmp_path, frame)
    transform = _fit(table)
    write_json(tmp_path / "data/preprocess/transform.json", transform.to_json())
    assert small_cells(tmp_path) == []
    assert "mauve" not in (tmp_path / "data/preprocess/transform.json").read_text()


def test_an_unknown_invariant_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="known: rows, public, views, cells"):
        audit(tmp_path, only=("cell",))
    assert "cells" in INVARIANTS


def test_a_project_that_has_not_run_breaks_no_promise(tmp_path: Path) -> None:
    assert all(r.ok for r in audit(tmp_path))


def _rows_project(tmp_path: Path, *, dealt: dict) -> Path:
    (tmp_path / "data/prepared").mkdir(parents=True)
    pd.DataFrame(
        {"sample_id": [f"row-{i}" for i in range(1, 9)], "status": ["ok"] * 8}
    ).to_parquet(tmp_path / "data/prepared/samples.parquet")
    write_json(tmp_path / "data/partition/manifest.json", dealt)
    return tmp_path


def test_rows_hold_when_every_row_has_one_place(tmp_path: Path) -> None:
    root = _rows_project(tmp_path, dealt={
        "heldout": ["row-1", "row-2"], "dropped_duplicates": ["row-8"],
        "clients": [{"client": 0, "train": ["row-3", "row-4"], "test": ["row-5"]},
                    {"client": 1, "train": ["row-6"], "test": ["row-7"]}],
    })  # fmt: skip
    [result] = audit(root, only=("rows",))
    assert result.ok, result.violations


def test_rows_name_a_row_placed_nowhere_and_one_placed_twice(tmp_path: Path) -> None:
    root = _rows_project(tmp_path, dealt={
        "heldout": ["row-1", "row-2"],
        "clients": [{"client": 0, "train": ["row-3", "row-4"], "test": ["row-5"]},
                    {"client": 1, "train": ["row-6", "row-3"], "test": ["row-7"]}],
    })  # fmt: skip
    [result] = audit(root, only=("rows",))
    text = "\n".join(result.violations)
    assert "1 rows placed nowhere (e.g. row-8)" in text
    assert "1 rows placed more than once (e.g. row-3)" in text


def test_a_file_that_cannot_be_read_is_a_broken_promise_not_a_crash(
    tmp_path: Path,
) -> None:
    (tmp_path / "data/prepared").mkdir(parents=True)
    (tmp_path / "data/prepared/samples.parquet").write_bytes(b"PAR")  # truncated
    write_json(tmp_path / "data/partition/manifest.json", {"heldout": []})
    [result] = audit(tmp_path, only=("rows",))
    assert not result.ok
    assert result.violations[0].startswith("cannot be checked: ")

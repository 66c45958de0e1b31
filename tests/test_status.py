"""``fedpipe status``: reasons, grouping and formats, on in-memory records."""

from __future__ import annotations

import json
from pathlib import Path

from fedpipe.observe.status import (
    Reason,
    Status,
    _param_reasons,
    _stage_reasons,
    collect,
    format_json,
    format_text,
    stage_groups,
)


def test_changed_section_is_named_by_its_leaf_keys() -> None:
    recorded = {"train": {"lr": 0.05, "epochs": 1}, "seed": 7}
    raw = {"train": {"lr": 0.1, "epochs": 1}, "seed": 7}
    reasons = _param_reasons(recorded, {"train": "modified"}, raw)
    assert reasons == [Reason("params", key="train.lr", old=0.05, new=0.1)]
    assert reasons[0].text() == "param train.lr 0.05 -> 0.1"


def test_dotted_param_and_deleted_key() -> None:
    recorded = {"federation.rounds": 4, "faults": {"x": 1}}
    raw = {"federation": {"rounds": 5}}
    reasons = _param_reasons(
        recorded, {"federation.rounds": "modified", "faults": "deleted"}, raw
    )
    assert [r.text() for r in reasons] == [
        "param federation.rounds 4 -> 5",
        'param faults {"x": 1} -> (deleted)',
    ]


def test_dvc_status_entries_become_reasons() -> None:
    entries = [
        {
            "changed deps": {
                "data/raw/x.csv": "modified",
                "models/my_model.py": "modified",
                "params.yaml": {"train": "modified"},
            }
        },
        {"changed outs": {"models/round-1/weights.npz": "deleted"}},
        {"changed command": True},
    ]
    recorded = {"params.yaml": {"train": {"lr": 0.05}}}
    raw = {"train": {"lr": 0.2}}
    kinds = [r.kind for r in _stage_reasons(entries, recorded, raw)]
    assert kinds == ["data", "code", "params", "output", "command"]


def test_rounds_are_grouped() -> None:
    names = ["summary", "round@3", "round@1", "round@2", "partition"]
    assert stage_groups(names) == "partition, round@1-3, summary"
    assert stage_groups(["round@1", "round@4"]) == "round@1, round@4"


def _status(**changes: object) -> Status:
    base = dict(
        root="/p",
        git={"commit": "0123456789abcdef", "uncommitted": 0},
        data={"source": "mnist5k", "path": "data/raw/mnist5k.parquet"},
        validation={
            "passed": True,
            "rows": 5000,
            "expectations": 12,
            "failures": [],
            "warnings": [],
        },
        partition={"method": "iid", "clients": 3},
        rounds_planned=4,
        rounds_recorded=[1, 2, 3, 4],
        stale={},
        last_round={"round": 4, "global": {"accuracy": 0.857, "loss": 0.5837}},
        doctor={"findings": 0},
    )
    base.update(changes)
    return Status(**base)  # type: ignore[arg-type]


def test_text_of_an_up_to_date_run() -> None:
    text = format_text(_status())
    assert "up to date" in text
    assert "4 recorded in dvc.lock (last: 4), 4 planned" in text
    assert "round 4: global accuracy 0.857, loss 0.5837" in text
    assert "iid, 3 clients" in text
    assert "validation passed: 5000 rows" in text


def test_text_groups_stale_rounds_by_reason() -> None:
    reason = [Reason("params", key="train.lr", old=0.05, new=0.1)]
    stale = {f"round@{k}": reason for k in range(1, 5)}
    stale["round@5"] = [Reason("not recorded")]
    text = format_text(_status(stale=stale))
    assert "round@1-4: param train.lr 0.05 -> 0.1" in text
    assert "round@5: never ran (not in dvc.lock)" in text
    assert "up to date" not in text


def test_json_has_reasons_and_up_to_date() -> None:
    stale = {"ingest": [Reason("data", path="data/raw/x.csv", change="modified")]}
    out = json.loads(format_json(_status(stale=stale)))
    assert out["up_to_date"] is False
    assert out["stale"]["ingest"] == [
        {
            "kind": "data",
            "path": "data/raw/x.csv",
            "change": "modified",
            "text": "data data/raw/x.csv modified",
        }
    ]


def test_a_project_never_run_says_so(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("federation:\n  rounds: 3\n")
    status = collect(tmp_path)
    assert status.stale is None and status.rounds_planned == 3
    assert any("dvc.lock: not found" in p for p in status.problems)
    assert "not partitioned yet" in format_text(status)


def test_a_repository_before_its_first_commit_says_so() -> None:
    """``fedpipe init``'s repository has no commit: status said nothing of git."""
    text = format_text(
        _status(git={"commit": None, "uncommitted": None, "repository": True})
    )
    assert "no commit yet" in text and "git commit -m" in text
    outside = format_text(_status(git={"commit": None, "uncommitted": None}))
    assert "no commit yet" not in outside

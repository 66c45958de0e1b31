"""The one dotted-key lookup, the one git helper and the tolerant JSON reader
(fedpipe.core)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fedpipe.core.dotted import lookup
from fedpipe.core.git import git, git_output
from fedpipe.core.jsonio import read_json, read_json_or_none, write_json

TREE = {"train": {"lr": 0.05, "extra": None}, "seed": 7, "federation": [1, 2]}


@pytest.mark.parametrize(
    ("dotted", "found"),
    [("train.lr", 0.05), ("seed", 7), ("train", {"lr": 0.05, "extra": None})],
)
def test_lookup_finds_nested_keys(dotted: str, found: object) -> None:
    assert lookup(TREE, dotted) == found


@pytest.mark.parametrize(
    "dotted", ["train.momentum", "model.name", "seed.value", "federation.0", ""]
)
def test_lookup_gives_the_default_for_an_absent_key(dotted: str) -> None:
    missing = object()
    assert lookup(TREE, dotted, missing) is missing
    assert lookup(TREE, dotted) is None


def test_lookup_tells_a_stored_none_from_an_absent_key() -> None:
    missing = object()
    assert lookup(TREE, "train.extra", missing) is None
    assert lookup(None, "train.lr", missing) is missing


def test_json_files_round_trip_and_bad_ones_read_as_none(tmp_path: Path) -> None:
    good, broken = tmp_path / "a.json", tmp_path / "c.json"
    write_json(good, {"round": 1, "a": [1, 2]})
    assert good.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "round": 1\n}\n'
    assert read_json(good) == {"round": 1, "a": [1, 2]} == read_json_or_none(good)
    assert not list(tmp_path.glob("*.tmp"))  # written by rename
    broken.write_text('{"round": ')
    with pytest.raises(ValueError):
        read_json(broken)
    with pytest.raises(FileNotFoundError, match="run the stage that writes it"):
        read_json(tmp_path / "missing.json")
    for path in (broken, tmp_path / "missing.json"):
        assert read_json_or_none(path) is None


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_reports_failure_as_none_and_runs_in_root(tmp_path: Path) -> None:
    assert git_output(tmp_path / "nowhere", "status") is None
    proc = git(tmp_path, "init", "-q")
    assert proc is not None and proc.returncode == 0
    assert (tmp_path / ".git").is_dir()
    assert git_output(tmp_path, "rev-parse", "--is-inside-work-tree") == "true"
    assert git_output(tmp_path, "rev-parse", "--verify", "-q", "HEAD") is None

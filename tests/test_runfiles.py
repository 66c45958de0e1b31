"""fedpipe.observe.runfiles: a run's recorded files read once, and the shared text
helpers."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from report_fixtures import relock, write_run

from fedpipe.config import layout
from fedpipe.observe.runfiles import (
    Commit,
    flat_params,
    fmt,
    git_output,
    load_run,
    rounds_text,
)

# ---------------------------------------------------------------- load_run


def test_an_empty_directory_gives_empty_parts(tmp_path: Path) -> None:
    run = load_run(tmp_path)
    assert (run.rounds, run.health, run.clients, run.errors) == ({}, {}, {}, {})
    assert run.params is None and run.config is None and run.lock_outs is None
    assert run.n_classes is None


def test_a_complete_run_is_read(tmp_path: Path) -> None:
    write_run(tmp_path, rounds=11)
    run = load_run(tmp_path)
    assert list(run.rounds) == list(range(1, 12))  # numeric, not 1, 10, 11, 2
    assert list(run.health) == list(range(1, 12))
    assert run.history is None  # round files exist: history.csv is not read
    assert run.params["partition"]["alpha"] == 0.3
    assert run.class_counts is not None and run.skew is not None
    assert any(o["path"] == "models/round-4/weights.npz" for o in run.lock_outs)
    assert run.errors == {}


def test_history_csv_is_read_when_round_files_are_gone(tmp_path: Path) -> None:
    write_run(tmp_path)
    shutil.rmtree(tmp_path / layout.ROUND_METRICS_DIR)
    assert list(load_run(tmp_path).history["round"]) == [1, 2, 3, 4]


def test_an_unreadable_file_is_kept_and_raised_on_require(tmp_path: Path) -> None:
    write_run(tmp_path)
    (tmp_path / layout.health_metrics(2)).write_text("{not json")
    relock(tmp_path)  # recorded so (a record changed since is not read at all)
    run = load_run(tmp_path)
    assert run.health == {} and set(run.errors) == {"health"}
    assert len(run.rounds) == 4  # the other parts are read
    run.require("rounds", "params")
    with pytest.raises(json.JSONDecodeError):
        run.require("rounds", "health")


def test_require_names_the_known_parts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown run parts \\['round'\\]"):
        load_run(tmp_path).require("round")


def test_params_that_do_not_validate_have_no_typed_config(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text("train: {lr: -1}\n")
    run = load_run(tmp_path)
    assert run.params == {"train": {"lr": -1}}
    assert run.config is None and run.errors == {}


def test_typed_config_of_valid_params(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text(
        "federation: {rounds: 1}\ntrain: {lr: 0.5}\nround_chain: {1: 0}\n"
    )
    assert load_run(tmp_path).config.train.lr == 0.5


def test_outside_git_there_is_no_commit(tmp_path: Path) -> None:
    if shutil.which("git") and git_output(tmp_path, "rev-parse", "HEAD"):
        pytest.skip("tmp_path is inside a git repository")
    assert load_run(tmp_path).commit == Commit(sha=None, dirty=None)


# ---------------------------------------------------------------- text


@pytest.mark.parametrize(
    ("value", "kwargs", "text"),
    [
        (None, {}, "n/a"),
        (math.nan, {}, "n/a"),
        (0.123456, {}, "0.1235"),
        (0.1, {"decimals": True}, "0.1000"),
        (2.0, {"digits": 3}, "2"),
        (12345, {}, "12345"),
        (math.inf, {}, "inf"),
        ("dense", {}, "dense"),
    ],
)
def test_fmt(value: object, kwargs: dict, text: str) -> None:
    assert fmt(value, **kwargs) == text


@pytest.mark.parametrize(
    ("rounds", "text"),
    [
        ([3], "round 3"),
        ([2, 5], "rounds 2, 5"),
        ([4, 2, 3], "rounds 2-4"),
        ([1, 2, 3, 7], "rounds 1, 2, 3, 7"),
    ],
)
def test_rounds_text(rounds: list[int], text: str) -> None:
    assert rounds_text(rounds) == text


def test_flat_params() -> None:
    params = {"a": {"b": 1, "c": {"d": [2]}}, "e": {}, "f": None}
    assert flat_params(params) == [("a.b", 1), ("a.c.d", [2]), ("f", None)]
    assert ("e", {}) in flat_params(params, keep_empty=True)


def test_a_record_changed_since_dvc_lock_recorded_it_is_not_read(
    tmp_path: Path,
) -> None:
    """The views read a round's record only as ``dvc.lock`` records it: one
    changed since is left unread, named, not read as this run's."""
    write_run(tmp_path)
    (tmp_path / layout.health_metrics(2)).write_text("{not json")
    run = load_run(tmp_path)
    assert sorted(run.health) == [1, 3, 4] and run.errors == {}
    assert run.ignored == (
        f"{layout.health_metrics(2)}: not the file dvc.lock records (changed since)",
    )
    assert "Not read: 1 file(s)" in (run.view_text or "")

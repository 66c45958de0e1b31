"""scripts/matrix.py: the pairwise matrix of settings. The array covers every pair
of levels (checked here by enumeration, not by allpairspy), and rows run through
the real `fedpipe run` + `fedpipe audit` and are judged (the whole table is
docs/matrix.md, from the script)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from e2e_helpers import SCRIPTS, load_script

pytestmark = pytest.mark.e2e
matrix = load_script(SCRIPTS / "matrix.py")


@pytest.fixture(scope="module")
def refused() -> dict:
    return matrix.refusals()


@pytest.mark.parametrize("seed", [0, 1])
def test_every_pair_of_levels_runs_in_some_row_or_is_refused_by_a_rule(
    seed: int, refused: dict
) -> None:
    rows = matrix.rows(seed, refused)
    names = list(matrix.FACTORS)
    seen = {
        (a, row[a], b, row[b])
        for row in rows
        for a, b in itertools.combinations(names, 2)
    }
    apart = matrix.refused_pairs(refused)
    for a, b in itertools.combinations(names, 2):
        for la, lb in itertools.product(matrix.FACTORS[a], matrix.FACTORS[b]):
            assert (a, la, b, lb) in seen or (a, la, b, lb) in apart, (a, la, b, lb)
    # no row is spent on a refusal: each holds only what fedpipe runs together
    assert all(matrix.refused_by(row, refused) is None for row in rows)
    # a covering array, not the full product (millions of rows)
    assert len(rows) < 60
    # the refusals are fedpipe's own rules: each names its keys
    assert ("privacy", "local", "attack", "ipm") in apart
    assert ("data", "numeric", "personalization", "fedbn") in apart
    assert ("privacy", "dpsgd", "cohorts", "three") in apart  # no DP-SGD cohort step
    for rule in apart.values():
        assert "=" in rule and "\n" not in rule


def test_a_row_runs_and_keeps_the_invariants_or_is_refused_by_name(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    # secure aggregation with the clients' distributed DP noise, through the CLI
    # (the round stage's load_round, a Prefect run, DVC), the same bits twice
    row = {name: next(iter(levels)) for name, levels in matrix.FACTORS.items()}
    row |= {"data": "mixed", "privacy": "distributed", "wire": "secagg",
            "evaluation": "participants"}  # fmt: skip
    done = matrix.run_row(0, row, tmp_path, cli_env, repeat=True)
    assert done.outcome == "ok", done.detail
    assert "same bits" in done.detail
    summary = json.loads(
        (tmp_path / "row-00/p/metrics/rounds/round-2.json").read_text()
    )
    assert summary["privacy"]["accountant"] == "rdp-skellam"
    assert summary["wire"]["secure_aggregation"]["protocol"] == "secagg_plus"
    refused = row | {"attack": "ipm"}  # reads raw updates that DP keeps private
    done = matrix.run_row(1, refused, tmp_path, cli_env, repeat=False)
    assert done.outcome == "refused", done.detail
    assert "privacy.mechanism=distributed" in done.detail
    assert "attack.name" in done.detail
    assert not (tmp_path / "row-01/p/dvc.lock").exists()
    assert "\n" not in done.detail


def test_the_product_rows_hold_every_combination_of_the_dp_levels(
    refused: dict,
) -> None:
    # --product privacy,personalization,evaluation: every DP mechanism with every
    # personalization method and every evaluation setting, not only pairs
    made = matrix.product_rows(
        ["privacy", "personalization", "evaluation"], refused, [("privacy", "none")]
    )
    combos = [(r["privacy"], r["personalization"], r["evaluation"]) for r, _ in made]
    dp = [lv for lv in matrix.FACTORS["privacy"] if lv != "none"]
    assert sorted(combos) == sorted(
        itertools.product(
            dp, matrix.FACTORS["personalization"], matrix.FACTORS["evaluation"]
        )
    )
    for row, rule in made:
        # a row runs on its data level, or no data level runs it and a rule says so
        assert (matrix.refused_by(row, refused) is None) == (rule is None), row
        if rule is not None:
            assert all(
                matrix.refused_by({**row, "data": d}, refused)
                for d in matrix.FACTORS["data"]
            )
    # FedBN keeps batch-norm layers, which only the images' CNN has
    fedbn = [r for r, rule in made if r["personalization"] == "fedbn" and not rule]
    assert fedbn and all(r["data"] == "images" for r in fedbn)
    with pytest.raises(ValueError, match="no factor 'privcy'"):
        matrix.product_rows(["privcy"], refused)


def test_a_failed_rows_output_outlives_its_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a row that failed once (row 3's second run, under load) and passed when
    # run again left nothing to read: its project folder was deleted
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    work = tmp_path / "work"
    (work / "row-03").mkdir(parents=True)
    (work / "row-03/run2.stderr.txt").write_text("Traceback ...\n")
    (work / "row-04").mkdir()
    (work / "row-04/run.stderr.txt").write_text("fine\n")
    row = {name: next(iter(levels)) for name, levels in matrix.FACTORS.items()}
    matrix._keep_failures(
        work,
        [
            matrix.Outcome(3, row, "FAILED", "second run: exit 1: x", 1.0),
            matrix.Outcome(4, row, "ok", "invariants hold", 1.0),
        ],
    )
    kept = tmp_path / "tmp/fedpipe-matrix-failures"
    assert (kept / "row-03/run2.stderr.txt").read_text() == "Traceback ...\n"
    assert not (kept / "row-04").exists()

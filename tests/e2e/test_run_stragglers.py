"""Failing clients, a round deadline, slow clients and both kinds of straggler
through the real CLI and Prefect.

The session's tiny run again, now with 4 clients and 2 rounds, every client
sampled, ``faults.failing_clients`` (one client's job raises), a deadline of 6
local steps (``federation.round_deadline_steps``; ``train.local_steps: 6`` so
every client needs exactly 6) and half the clients slow
(``federation.slow_clients: 0.5``, ``slow_speed: 0.5``: they finish 3 steps).
One `fedpipe run` per straggler policy: ``partial`` (the slow clients send the 3
steps they finished, weighted by their full sample counts) and ``drop`` (the
slow clients are left out as stragglers; a copy of the ``partial`` run, so only
its rounds run). The records must say what docs/failures.md promises: who failed
and why, who straggled, the steps a partial straggler took, and the weights the
aggregation used.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from e2e_helpers import BIN, run_main

from fedpipe.config.overrides import set_params
from fedpipe.federation.failures import slow_set
from fedpipe.observe.doctor import codes

pytestmark = [
    pytest.mark.e2e,
]
FEDPIPE = str(BIN / "fedpipe")
CLIENTS, ROUNDS, SEED = 4, 2, 7  # SEED: the tiny project's
DEADLINE, SLOW_SPEED = 6, 0.5
SLOW = sorted(slow_set(CLIENTS, 0.5, SEED))  # fixed for the run, seeded
FAILING = min(set(range(CLIENTS)) - set(SLOW))
ON_TIME = sorted(set(range(CLIENTS)) - set(SLOW) - {FAILING})
FAILED = (
    "failed: PlantedClientFailure: client "
    f"{FAILING} failed on purpose (faults.failing_clients)"
)


def _settings(stragglers: str) -> dict[str, Any]:
    return {
        "federation.clients": CLIENTS,
        "federation.rounds": ROUNDS,
        "federation.fraction_fit": 1.0,
        "federation.min_clients": 1,
        "federation.round_deadline_steps": DEADLINE,
        "federation.stragglers": stragglers,
        "federation.slow_clients": 0.5,
        "federation.slow_speed": SLOW_SPEED,
        "train.local_steps": DEADLINE,
        "faults.failing_clients": [FAILING],
    }


def _rerun(source: Path, project: Path, stragglers: str, env: dict[str, str]) -> dict:
    """A copy of ``source`` run under one straggler policy."""
    shutil.copytree(source, project)
    set_params(project / "params.yaml", _settings(stragglers))
    proc = run_main([FEDPIPE, "run", "--no-server-start", "--no-report"], project, env)
    return {"project": project, "proc": proc, "stragglers": stragglers}


@pytest.fixture(scope="module")
def partial(
    tiny_run: dict, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> dict:
    """A copy of the session's tiny run under ``partial`` (4 clients: partitioned
    again)."""
    project = tmp_path_factory.mktemp("stragglers-partial") / "project"
    return _rerun(tiny_run["project"], project, "partial", cli_env)


@pytest.fixture(scope="module", params=["partial", "drop"])
def run(
    request: pytest.FixtureRequest,
    partial: dict,
    tmp_path_factory: pytest.TempPathFactory,
    cli_env: dict[str, str],
) -> dict:
    """The tiny run under one straggler policy: ``drop`` is a copy of the
    ``partial`` run with only the policy changed, so only its rounds run again."""
    if request.param == "partial":
        return partial
    project = tmp_path_factory.mktemp("stragglers-drop") / "project"
    done = _rerun(partial["project"], project, "drop", cli_env)
    assert "stage(s) ran (round@1, round@2, summary)" in done["proc"].stdout
    return done


def _json(project: Path, path: str) -> dict[str, Any]:
    return json.loads((project / path).read_text())


def test_the_planted_setting_is_what_the_test_expects() -> None:
    # half the clients slow, and one on time besides the failing one
    assert len(SLOW) == 2 and len(ON_TIME) == 1
    assert int(DEADLINE * SLOW_SPEED) < DEADLINE  # the slow ones cannot finish


def test_records_name_who_failed_and_who_straggled(run: dict) -> None:
    project, partial = run["project"], run["stragglers"] == "partial"
    excluded = {str(FAILING): FAILED}
    if not partial:
        excluded.update({str(c): "straggler" for c in SLOW})
    expected = dict(sorted(excluded.items()))
    for k in range(1, ROUNDS + 1):
        summary = _json(project, f"metrics/rounds/round-{k}.json")
        assert summary["clients_selected"] == list(range(CLIENTS))
        assert summary["clients_excluded"] == expected
        assert summary["clients_aggregated"] == CLIENTS - len(expected)
        counts = {"failed": 1} | ({} if partial else {"straggler": len(SLOW)})
        assert summary["excluded_counts"] == counts
        # the steps a partial straggler took: the slow clients' share of the
        # deadline; a dropped one took none and is not listed
        steps = {str(c): int(DEADLINE * SLOW_SPEED) for c in SLOW}
        assert summary.get("clients_partial") == (steps if partial else None)
        assert summary["global"]["loss"] is not None
        health = _json(project, f"metrics/health/round-{k}.json")
        assert health["excluded"] == expected
        table = pd.read_csv(project / f"metrics/clients/round-{k}.csv")
        marks = table.set_index("client")["excluded"].fillna("").to_dict()
        assert marks == {c: expected.get(str(c), "") for c in range(CLIENTS)}


def test_aggregation_weights_are_the_sample_shares_of_who_was_aggregated(
    run: dict,
) -> None:
    """Partial stragglers keep their full sample count in FedAvg's weights (the
    health record's nominal weights), and the weights the server's step is made
    of (fitted from the updates) are those shares."""
    project, partial = run["project"], run["stragglers"] == "partial"
    aggregated = sorted(ON_TIME + (SLOW if partial else []))
    for k in range(1, ROUNDS + 1):
        health = _json(project, f"metrics/health/round-{k}.json")
        rows = {c["client"]: c for c in health["clients"]}
        nominal = health["aggregation"]["nominal_weights"]
        # the failing client and a dropped straggler sent no update at all
        assert sorted(rows) == aggregated
        assert sorted(int(c) for c in nominal) == aggregated
        total = sum(rows[c]["n_train"] for c in aggregated)
        for c in aggregated:
            share = rows[c]["n_train"] / total  # the full count, partial or not
            assert nominal[str(c)] == pytest.approx(share, abs=1e-6)  # 6 places
            assert rows[c]["aggregation_weight"] == pytest.approx(share, abs=1e-3)
        assert health["aggregation"]["weight_sum"] == pytest.approx(1.0, abs=1e-3)


def test_the_round_lines_and_the_doctor_say_it(run: dict, cli_env) -> None:
    project, partial = run["project"], run["stragglers"] == "partial"
    out = run["proc"].stdout + run["proc"].stderr
    n_out = 1 if partial else 1 + len(SLOW)
    assert f"({CLIENTS - n_out} of {CLIENTS} clients, {n_out} out" in out
    assert f"round 1: client {FAILING} failed: PlantedClientFailure" in out
    # in this process (the command's own: test_run_diagnosis.py)
    proc = run_main(["doctor", "--format", "json"], project, cli_env, check=False)
    findings = {f["code"]: f for f in json.loads(proc.stdout)}
    assert proc.returncode == 0, proc.stdout  # warnings and info only
    assert codes.CLIENTS_FAILED in findings
    assert f"client {FAILING}" in json.dumps(findings[codes.CLIENTS_FAILED])
    assert (codes.CLIENTS_DROPPED_OUT in findings) == (not partial)

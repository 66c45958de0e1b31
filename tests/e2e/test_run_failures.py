"""A federation under fire through the real CLI: dropouts and a client sending NaN.

The session's tiny run (3 clients, all sampled, ``federation.min_clients: 1``)
again with ``federation.dropout: 0.2`` and ``faults.nonfinite_clients: [1]``:
`fedpipe run` completes every round (only the rounds run again), the round
metrics, health records and client tables name the clients left out and why, the
round lines say how many were out, and `fedpipe doctor` names them (and does not
blame the learning rate for one client's NaN).
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from e2e_helpers import BIN, run_cli, run_main

from fedpipe.config.overrides import set_params
from fedpipe.federation.failures import dropped_out
from fedpipe.observe.doctor import codes

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
CLIENTS, ROUNDS, SEED = 3, 4, 7  # the tiny project's
UNDER_FIRE = {
    "federation.fraction_fit": 1.0,
    "federation.min_clients": 1,
    "federation.dropout": 0.2,
    "faults.nonfinite_clients": [1],
}


@pytest.fixture(scope="module")
def run(tiny_run: dict, tmp_path_factory: pytest.TempPathFactory, cli_env) -> dict:
    """A copy of the session's tiny run with the failures on: its data, partition
    and initial model stay cached, the rounds run again."""
    project = tmp_path_factory.mktemp("failures") / "project"
    shutil.copytree(tiny_run["project"], project)
    set_params(project / "params.yaml", UNDER_FIRE)
    proc = run_cli(
        [FEDPIPE, "run", "--no-server-start", "--no-report"], project, cli_env
    )
    return {"project": project, "proc": proc}


def _expected(round_: int) -> dict[str, str]:
    out = {"1": "nonfinite"}
    gone = dropped_out(range(CLIENTS), dropout=0.2, seed=SEED, round_=round_)
    out.update({str(c): "dropout" for c in gone})
    return dict(sorted(out.items()))


def test_every_round_completes_and_names_the_clients_left_out(run: dict) -> None:
    project = run["project"]
    assert any(len(_expected(k)) > 1 for k in range(1, ROUNDS + 1))  # some drop out
    for k in range(1, ROUNDS + 1):
        summary = json.loads((project / f"metrics/rounds/round-{k}.json").read_text())
        assert summary["clients_excluded"] == _expected(k)
        assert summary["clients_aggregated"] == CLIENTS - len(_expected(k))
        assert summary["global"]["loss"] is not None  # a finite global model
        health = json.loads((project / f"metrics/health/round-{k}.json").read_text())
        assert health["excluded"] == _expected(k)
        table = pd.read_csv(project / f"metrics/clients/round-{k}.csv")
        assert table.set_index("client").loc[1, "excluded"] == "nonfinite"
    assert "models/round-4/weights.npz" in (project / "dvc.lock").read_text()


def test_the_round_lines_say_how_many_were_out(run: dict) -> None:
    out = run["proc"].stdout + run["proc"].stderr
    n = len(_expected(1))
    assert f"({CLIENTS - n} of {CLIENTS} clients, {n} out" in out


def test_the_doctor_names_them(run: dict, cli_env) -> None:
    # in this process (the command's own: test_run_diagnosis.py)
    proc = run_main(
        ["doctor", "--format", "json"], run["project"], cli_env, check=False
    )
    findings = {f["code"]: f for f in json.loads(proc.stdout)}
    assert proc.returncode == 0, proc.stdout  # warnings and info only
    nonfinite = findings[codes.CLIENT_UPDATES_NONFINITE]
    assert nonfinite["title"].startswith("client 1 sent NaN/inf updates")
    assert nonfinite["rounds"] == list(range(1, ROUNDS + 1))
    assert codes.CLIENTS_DROPPED_OUT in findings
    assert codes.LEARNING_RATE_TOO_HIGH not in findings

"""A planted sign-flip attack through the real CLI, named by the doctor.

The session's tiny run with 5 clients, all training every round, client 2
sending the negative of its update (``attack.name: sign_flip``). The round
metrics and `fedpipe lineage` record who attacked (the strategy never sees it);
`fedpipe doctor` names client 2 from the health records alone, and nobody else.
"""

from __future__ import annotations

import json
import shutil

import pytest
from e2e_helpers import BIN, run_main

from fedpipe.config.overrides import set_params
from fedpipe.observe.doctor import codes

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
ROUNDS = 4  # the tiny project's
SIGN_FLIP = {
    "federation.clients": 5,
    "federation.fraction_fit": 1.0,
    "federation.min_clients": 1,
    "attack.name": "sign_flip",
    "attack.clients": [2],
}


@pytest.fixture(scope="module")
def run(tiny_run: dict, tmp_path_factory: pytest.TempPathFactory, cli_env) -> dict:
    project = tmp_path_factory.mktemp("attack") / "project"
    shutil.copytree(tiny_run["project"], project)
    set_params(project / "params.yaml", SIGN_FLIP)
    run_main([FEDPIPE, "sync"], project, cli_env)  # five clients: the same chain
    run_main([FEDPIPE, "run", "--no-server-start", "--no-report"], project, cli_env)
    return {"project": project}


def test_the_records_say_who_attacked(run: dict, cli_env) -> None:
    project = run["project"]
    for k in range(1, ROUNDS + 1):
        summary = json.loads((project / f"metrics/rounds/round-{k}.json").read_text())
        assert summary["malicious"] == [2]
    lineage = run_main(["lineage", "round", "4"], project, cli_env)
    assert "malicious (planted by attack.*): 2" in lineage.stdout


def test_the_doctor_names_the_attacker_and_nobody_else(run: dict, cli_env) -> None:
    proc = run_main(
        ["doctor", "--format", "json"], run["project"], cli_env, check=False
    )
    findings = {f["code"]: f for f in json.loads(proc.stdout)}
    found = findings[codes.CLIENTS_AGAINST_FEDERATION]
    assert found["title"].startswith("client 2 sends")
    assert [e.split(":")[0] for e in found["evidence"]] == ["client 2"]
    assert proc.returncode == 1  # an error-level finding

"""`fedpipe status`, `fedpipe run -S` and `fedpipe run --exp` on one real project.

One tiny project that has run (a copy of the session's tiny run), committed as a
person would before trying variants; the tests then read it, change it and put it
back, in file order: the last one reruns the rounds with a new learning rate.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, run_cli, run_main

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
ROUNDS = [f"round@{k}" for k in range(1, 5)]  # TINY has 4 rounds


@pytest.fixture(scope="module")
def project(
    tiny_run: dict, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> Path:
    path = tmp_path_factory.mktemp("status") / "p"
    shutil.copytree(tiny_run["project"], path)  # the session's tiny run
    run_cli(["git", "add", "-A"], path, cli_env)
    run_cli(["git", "commit", "-qm", "first run"], path, cli_env)
    return path


def _status(project: Path, env: dict[str, str]) -> dict:
    """`fedpipe status --format json`, in this process (the command's own process:
    the first test)."""
    return json.loads(run_main(["status", "--format", "json"], project, env).stdout)


def test_status_of_a_finished_run_is_up_to_date(
    project: Path, cli_env: dict[str, str]
) -> None:
    status = _status(project, cli_env)
    assert status["up_to_date"] is True and status["stale"] == {}
    assert status["rounds_recorded"] == [1, 2, 3, 4] and status["rounds_planned"] == 4
    assert status["validation"]["passed"] is True
    assert status["partition"] == {**status["partition"], "method": "iid", "clients": 3}
    assert status["last_round"]["round"] == 4
    assert 0 < status["last_round"]["global"]["accuracy"] <= 1
    assert status["doctor"] is not None
    proc = run_cli([FEDPIPE, "status"], project, cli_env)  # the command's process
    assert "Traceback" not in proc.stderr
    text = proc.stdout
    assert "up to date" in text and "4 planned (federation.rounds)" in text


def test_status_names_a_changed_param_with_old_and_new_value(
    project: Path, cli_env: dict[str, str]
) -> None:
    params = project / "params.yaml"
    text = params.read_text()
    try:
        params.write_text(text.replace("lr: 0.05", "lr: 0.2"))
        status = _status(project, cli_env)
        assert sorted(status["stale"]) == ROUNDS
        for stage in ROUNDS:
            assert status["stale"][stage] == [
                {
                    "kind": "params",
                    "key": "train.lr",
                    "old": 0.05,
                    "new": 0.2,
                    "text": "param train.lr 0.05 -> 0.2",
                }
            ]
        shown = run_main(["status"], project, cli_env).stdout
        assert "round@1-4: param train.lr 0.05 -> 0.2" in shown
        # the same stages as DVC's own `dvc status`
        dvc = json.loads(run_cli([DVC, "status", "--json"], project, cli_env).stdout)
        assert sorted(dvc) == ROUNDS
    finally:
        params.write_text(text)


def test_status_reads_exponent_params_as_dvc_does(
    project: Path, cli_env: dict[str, str]
) -> None:
    # PyYAML reads `5e-2` as the text '5e-2', DVC (YAML 1.2) as the number 0.05
    params = project / "params.yaml"
    text = params.read_text()
    assert "lr: 0.05" in text
    try:
        params.write_text(text.replace("lr: 0.05", "lr: 5e-2"))
        dvc = json.loads(run_cli([DVC, "status", "--json"], project, cli_env).stdout)
        assert dvc == {}
        assert _status(project, cli_env)["up_to_date"] is True
        params.write_text(text.replace("lr: 0.05", "lr: 1e-3"))
        dvc = json.loads(run_cli([DVC, "status", "--json"], project, cli_env).stdout)
        status = _status(project, cli_env)
        assert sorted(status["stale"]) == sorted(dvc) == ROUNDS
        assert status["stale"]["round@1"][0]["new"] == 0.001
        shown = run_main(["status"], project, cli_env).stdout
        assert "round@1-4: param train.lr 0.05 -> 0.001" in shown
    finally:
        params.write_text(text)


def test_status_names_changed_data(project: Path, cli_env: dict[str, str]) -> None:
    raw = project / "data/raw/mnist5k.parquet"
    content = raw.read_bytes()
    try:
        import pandas as pd

        pd.read_parquet(raw).iloc[:100].to_parquet(raw)
        status = _status(project, cli_env)
        assert {
            "kind": "data",
            "path": "data/raw/mnist5k.parquet",
            "change": "modified",
            "text": "data data/raw/mnist5k.parquet modified",
        } in status["stale"]["ingest"]
        dvc = json.loads(run_cli([DVC, "status", "--json"], project, cli_env).stdout)
        assert sorted(dvc) == sorted(status["stale"])
    finally:
        raw.write_bytes(content)
    assert _status(project, cli_env)["up_to_date"] is True


def test_a_bad_override_exits_2_naming_the_key(
    project: Path, cli_env: dict[str, str]
) -> None:
    """The CLI's path for a refused override: exit 2, one line, nothing written.
    What each bad value says is tested in process (tests/test_overrides.py)."""
    params = project / "params.yaml"
    text = params.read_text()
    args = ["-S", "federation.rounds=2", "-S", "strategy.name=fedbest"]
    proc = run_cli([FEDPIPE, "run", *args], project, cli_env, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: -S: strategy.name: "), lines
    assert params.read_text() == text  # the good override not written either


def test_exp_is_listed_by_dvc_and_leaves_the_workspace(
    project: Path, cli_env: dict[str, str]
) -> None:
    params = project / "params.yaml"
    text = params.read_text()
    proc = run_cli(
        [FEDPIPE, "run", "--exp", "lr-high", "-S", "train.lr=0.1", "--no-server-start"],
        project,
        cli_env,
    )
    assert params.read_text() == text
    # it ends as `fedpipe run` does, from the experiment's results: the stages
    # that ran, the final table, the doctor and the report; DVC's per-stage
    # output in the log it names, not on the console
    out = proc.stdout
    assert f"done: 5 stage(s) ran ({', '.join(ROUNDS)}, summary)" in out
    assert "# fedpipe run: final round 4" in out and "| accuracy | " in out
    assert "fedpipe doctor:\n" in out
    (report,) = [x for x in out.splitlines() if x.startswith("run report: ")]
    page = Path(report.removeprefix("run report: "))
    assert page == project / ".fedpipe/experiments/lr-high/reports/report.html"
    assert "train.lr" in page.read_text()
    for chatter in ("Running stage", "didn't change, skipping", "Updating lock file"):
        assert chatter not in out + proc.stderr
    (log,) = {x.split()[1] for x in out.splitlines() if x.startswith("log: ")}
    assert "Running stage 'round@1':" in (project / log).read_text()
    assert run_cli(["git", "status", "--porcelain"], project, cli_env).stdout == ""
    shown = json.loads(run_cli([DVC, "exp", "show", "--json"], project, cli_env).stdout)
    exps = [
        rev
        for row in shown
        for group in row.get("experiments") or []
        for rev in group["revs"]
    ]
    (exp,) = [e for e in exps if e["name"] == "lr-high"]
    assert exp["data"]["params"]["params.yaml"]["data"]["train"]["lr"] == 0.1
    metrics = exp["data"]["metrics"]["metrics/rounds/round-4.json"]["data"]
    assert 0 < metrics["global"]["accuracy"] <= 1
    # the table printed is the experiment's, not the workspace's
    assert f"| accuracy | {metrics['global']['accuracy']:.4f} |" in out
    assert _status(project, cli_env)["up_to_date"] is True


def test_run_with_an_override_records_it_in_dvc_lock(
    project: Path, cli_env: dict[str, str]
) -> None:
    proc = run_main(
        [FEDPIPE, "run", "--no-report", "-S", "train.lr=0.1"], project, cli_env
    )
    assert "params.yaml: train.lr = 0.1" in proc.stdout
    assert yaml.safe_load((project / "params.yaml").read_text())["train"]["lr"] == 0.1
    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    for stage in ROUNDS:
        assert lock[stage]["params"]["params.yaml"]["train"]["lr"] == 0.1
    assert _status(project, cli_env)["up_to_date"] is True

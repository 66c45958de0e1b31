"""Scheduling from the Prefect UI: `fedpipe deploy`, a process worker, a triggered run.

Real Prefect server (the session's), real work pool and `prefect worker start`, a
run started through the API as the UI's Run button starts it, with an override
(rounds) a person would type there; then the run is read back through the API.

The session's server runs with ``--no-services``, and task runs are recorded by a
server service (the task run recorder). This module therefore starts its own
server with that service on (the scheduler and other services off).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, run_cli

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
POOL = "fedpipe-e2e"
CRON = "0 3 * * *"
ROUNDS = 2  # the project says 4; the run is started with rounds=2
# server services this test does not need (the task run recorder stays on)
OFF = (
    "FOREMAN",
    "TRIGGERS",
    "CANCELLATION_CLEANUP",
    "PAUSE_EXPIRATIONS",
    "REPOSSESSOR",
)


def _tree(client, root_id) -> list:  # type: ignore[no-untyped-def]
    """The flow run ``root_id`` and every subflow run below it."""
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterParentFlowRunId,
    )

    runs = client.read_flow_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[root_id]))
    )
    frontier = [root_id]
    while frontier:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)
            )
        )
        runs += children
        frontier = [r.id for r in children]
    return runs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def recording_env(
    tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> Iterator[dict[str, str]]:
    """CLI environment pointing at a server that records task runs."""
    from orchestration.server import server_env, wait_healthy

    home = tmp_path_factory.mktemp("prefect-recording-home")
    port = _free_port()
    env = server_env()
    env["PREFECT_HOME"] = str(home)
    for service in OFF:
        env[f"PREFECT_SERVER_SERVICES_{service}_ENABLED"] = "false"
    with open(home / "server.log", "w") as log:
        proc = subprocess.Popen(
            [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1"]
            + ["--port", str(port), "--analytics-off", "--no-ui"]
            + ["--no-scheduler", "--no-late-runs"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            url = f"http://127.0.0.1:{port}/api"
            wait_healthy(url, timeout=120)
            yield dict(cli_env, PREFECT_API_URL=url)
        finally:
            _stop(proc)


@pytest.fixture(scope="module")
def triggered(
    tiny_fresh: Path,
    tmp_path_factory: pytest.TempPathFactory,
    recording_env: dict[str, str],
) -> dict:
    """Deploy a copy of the session's tiny project, start a worker, run the
    deployment with rounds=2."""
    base = tmp_path_factory.mktemp("deploy")
    env = recording_env
    project = shutil.copytree(tiny_fresh, base / "nightly")  # TINY, committed
    deployed = run_cli(
        [FEDPIPE, "deploy", "--pool", POOL, "--cron", CRON, "--no-server-start"],
        project,
        env,
    )
    with open(base / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [str(BIN / "prefect"), "worker", "start", "--pool", POOL],
            env=dict(env, PREFECT_WORKER_QUERY_SECONDS="1"),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            found = _trigger_and_read_back(env["PREFECT_API_URL"])
        finally:
            _stop(worker)
    return found | {"project": project, "deploy_out": deployed.stdout}


def _trigger_and_read_back(api: str) -> dict:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
    )
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api}):
        # what the UI's Run button does; the timeout only guards against a hang
        flow_run = run_deployment(
            "fedpipe-federation/nightly",
            parameters={"rounds": ROUNDS},
            timeout=900,
            poll_interval=2,
        )
        with get_client(sync_client=True) as client:
            runs = _tree(client, flow_run.id)
            ids = [r.id for r in runs]
            return {
                "flow_run": flow_run,
                "deployment": client.read_deployment_by_name(
                    "fedpipe-federation/nightly"
                ),
                "runs": runs,
                "task_runs": client.read_task_runs(
                    task_run_filter=TaskRunFilter(
                        flow_run_id=TaskRunFilterFlowRunId(any_=ids)
                    )
                ),
                "artifacts": client.read_artifacts(
                    artifact_filter=ArtifactFilter(
                        flow_run_id=ArtifactFilterFlowRunId(any_=ids)
                    )
                ),
            }


def test_deployment_has_the_schedule_and_ui_parameters(triggered: dict) -> None:
    deployment = triggered["deployment"]
    assert [s.schedule.cron for s in deployment.schedules] == [CRON]
    assert deployment.parameters == {"project_dir": str(triggered["project"])}
    fields = deployment.parameter_openapi_schema["properties"]
    assert {"project_dir", "rounds", "strategy", "epochs", "runner", "force"} <= set(
        fields
    )
    assert "prefect worker start --pool fedpipe-e2e" in triggered["deploy_out"]


def test_triggered_run_completes(triggered: dict) -> None:
    flow_run = triggered["flow_run"]
    assert flow_run.state is not None and flow_run.state.is_completed(), flow_run.state
    assert flow_run.name == "nightly · rounds=2"
    names = {r.name for r in triggered["runs"]}
    assert "nightly · fedavg · mlp · 2 rounds" in names  # the fedpipe-run subflow
    # its stages are task runs of it (not subflows); a round's clients train
    # inside its task run (test_one_task_run_per_round_and_none_per_client_group)
    stages = {t.name: t for t in triggered["task_runs"]}
    assert {"round 1", "round 2", "partition", "summary"} <= set(stages)
    assert not {"round 1", "partition"} & names


def test_override_is_written_to_params_and_recorded(
    triggered: dict, recording_env: dict[str, str]
) -> None:
    project = triggered["project"]
    raw = yaml.safe_load((project / "params.yaml").read_text())
    assert raw["federation"]["rounds"] == ROUNDS
    assert sorted(raw["round_chain"]) == ["1", "2"]
    assert not (project / "metrics/rounds/round-3.json").exists()
    status = run_cli([str(BIN / "dvc"), "status"], project, recording_env)
    assert "Data and pipelines are up to date" in status.stdout


def test_one_task_run_per_round_and_none_per_client_group(triggered: dict) -> None:
    """Issue 39: the UI shows the flow, a task run per round (``round K``) and
    the round's table; the local runner makes no task run per client group by
    default (``runtime.clients_per_task: null``)."""
    rounds: list[int] = []
    for task_run in triggered["task_runs"]:
        assert not task_run.task_key.startswith("train_client"), task_run.name
        found = re.fullmatch(r"round (\d+)", task_run.name)
        if found:
            assert task_run.state_type is not None
            assert task_run.state_type.value == "COMPLETED", task_run.name
            rounds.append(int(found.group(1)))
    assert sorted(rounds) == list(range(1, ROUNDS + 1))


def test_round_tables_and_run_summary_are_artifacts(triggered: dict) -> None:
    by_key = {a.key: a for a in triggered["artifacts"]}
    for k in range(1, ROUNDS + 1):
        table = by_key[f"fedpipe-round-{k}"]
        assert table.type == "table"
        rows = json.loads(table.data)
        assert [r["client"] for r in rows] == [0, 1, 2]
        selected = json.loads(
            (triggered["project"] / f"metrics/rounds/round-{k}.json").read_text()
        )["clients_selected"]
        assert [r["client"] for r in rows if r["selected"]] == sorted(selected)
        for r in rows:
            assert 0.0 <= r["global_accuracy"] <= 1.0
            assert (r["local_accuracy"] is None) == (not r["selected"])
    summary = by_key["fedpipe-run-summary"]
    assert summary.type == "markdown"
    assert "| accuracy |" in summary.data and "`round@2`" in summary.data


def test_doctor_findings_and_report_link_are_artifacts(triggered: dict) -> None:
    by_key = {a.key: a for a in triggered["artifacts"]}
    doctor = by_key["fedpipe-doctor"]
    assert doctor.type == "markdown"
    assert doctor.data.strip()  # "no findings" or the findings, as the CLI says
    report = by_key["fedpipe-report"]
    assert report.type == "markdown"  # how Prefect stores link artifacts
    assert "reports/report.html" in report.data and "file://" in report.data

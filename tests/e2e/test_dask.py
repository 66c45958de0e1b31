"""Scale-out on Dask: the same tiny project trained locally and on Dask workers.

Two identical projects; one runs with ``runtime.runner: local`` (the session's
tiny run), the other, a copy of the same project with its data stages and
initial model done (``tiny_ready``), with ``runtime.runner: dask`` (a
LocalCluster of two worker processes for the whole ``fedpipe run``): only the
rounds run, since no stage tracks the runtime section.
The runtime section must not change results: every round's model must be the
same bytes, and ``dvc.lock`` the same text.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli

from fedpipe.config.overrides import set_params

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
ROUNDS = 4  # the tiny run's
COMPILED = re.compile(
    r"mlp compiled in (Dask worker (\S+) \(process \d+\)|process \d+)"
)


@pytest.fixture(scope="module")
def runs(
    tiny_ready: Path,
    tiny_run: dict,
    tmp_path_factory: pytest.TempPathFactory,
    cli_env: dict[str, str],
) -> dict:
    """The session's tiny run (local) and a copy of its ready project run on Dask;
    each with its console output and Prefect's logs (which process compiled)."""
    on_dask = shutil.copytree(tiny_ready, tmp_path_factory.mktemp("dask") / "on-dask")
    set_params(
        on_dask / "params.yaml", {"runtime.runner": "dask", "runtime.dask_workers": 2}
    )
    # -v: Prefect's logs on the console
    proc = run_cli(
        [FEDPIPE, "run", "-v", "--no-server-start", "--no-report"], on_dask, cli_env
    )
    ran = [f"round@{k}" for k in range(1, ROUNDS + 1)] + ["summary"]
    assert f"stage(s) ran ({', '.join(ran)})" in proc.stdout  # runtime: no record
    local = tiny_run["project"]
    (log,) = (local / "logs").glob("fedpipe-run-*.log")  # Prefect's logs, as -v
    return {
        "local": {
            "project": local,
            "log": tiny_run["proc"].stdout + tiny_run["proc"].stderr + log.read_text(),
        },
        "dask": {"project": on_dask, "log": proc.stdout + proc.stderr},
    }


def test_dask_gives_bitwise_identical_models(runs: dict) -> None:
    pattern = "models/round-*/weights.npz"
    local = file_hashes(runs["local"]["project"], pattern)
    on_dask = file_hashes(runs["dask"]["project"], pattern)
    assert len(local) == ROUNDS + 1
    assert on_dask == local
    metrics = "metrics/rounds/round-*.json"
    assert file_hashes(runs["dask"]["project"], metrics) == file_hashes(
        runs["local"]["project"], metrics
    )


def test_runtime_is_not_part_of_the_record(runs: dict, cli_env: dict[str, str]) -> None:
    # no stage tracks runtime.*: the same records, nothing to rerun after a switch
    def stages(name: str) -> dict:
        text = (runs[name]["project"] / "dvc.lock").read_text()
        assert "runtime" not in text
        return yaml.safe_load(text)["stages"]

    local, on_dask = stages("local"), stages("dask")
    assert list(on_dask) == list(local)
    for name in local:
        if name != "validate":  # its Data Docs pages carry the time they were made
            assert on_dask[name] == local[name], name
    status = run_cli([str(BIN / "dvc"), "status"], runs["dask"]["project"], cli_env)
    assert "Data and pipelines are up to date" in status.stdout


def test_clients_trained_on_workers_that_keep_their_model(runs: dict) -> None:
    log = runs["dask"]["log"]
    assert "client training runs on a local Dask cluster of 2 worker processes" in log
    compiled = COMPILED.findall(log)
    workers = [address for _, address in compiled if address]
    # every client training ran on a worker; each worker built the model once
    # for all its clients and rounds (4 rounds x 2 clients = 8 trainings)
    assert compiled and len(workers) == len(compiled)
    assert 1 <= len(workers) <= 2 and len(set(workers)) == len(workers)
    assert f"round   {ROUNDS}/{ROUNDS}" in log


def test_local_runner_trains_in_the_run_process(runs: dict) -> None:
    log = runs["local"]["log"]
    compiled = COMPILED.findall(log)
    assert len(compiled) == 1 and not compiled[0][1]
    assert "Dask" not in log

"""Dask across machines: a TLS scheduler and workers on hosts of their own.

``scripts/dask_hosts.py`` makes three hosts on this machine (network namespaces
on a bridge, a private /24), the certificates with docs/scaling.md's openssl
commands, the scheduler in host a and one single-threaded worker in each of
hosts b and c with docs/scaling.md's ``dask`` commands (mutual TLS). ``fedpipe
run`` runs in the root namespace (with the session's Prefect server) against
``tls://10.231.X.1:8786``. One small project (4 clients, all of them every round,
2 rounds) is run three times: locally, on the hosts, and on the hosts with host b
killed (SIGKILL of every process in it) while it has a group of clients. The two
runs on the hosts start from copies of the local run taken back to before round 1
(tests/e2e/undone.py): only the rounds, whose clients train on the workers, run
again.

Skips where namespaces cannot be made (not root, no ``ip``, refused).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (
    BIN,
    SCRIPTS,
    file_hashes,
    load_script,
    make_project,
    run_cli,
    run_main,
)
from undone import undo_from

from fedpipe.config.overrides import set_params

pytestmark = pytest.mark.e2e
dask_hosts = load_script(SCRIPTS / "dask_hosts.py")
FEDPIPE = str(BIN / "fedpipe")
ROUNDS = 2
CLIENTS = 4
RUN = [FEDPIPE, "run", "-v", "--no-server-start", "--no-report"]
MODELS = "models/round-*/weights.npz"


@pytest.fixture(scope="module", autouse=True)
def hosts_possible() -> None:
    """Skip the module, before any project is made, where namespaces cannot be
    made (probed once)."""
    why = dask_hosts.probe()
    if why:
        pytest.skip(f"no test hosts on this machine: {why}")


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> Iterator[dask_hosts.TlsCluster]:
    work = tmp_path_factory.mktemp("dask-hosts")
    certs = dask_hosts.make_certificates(work / "certs")
    with dask_hosts.Hosts(3) as hosts:
        # started now: the workers connect while the local run trains
        yield dask_hosts.TlsCluster(
            hosts, certs=certs, project=work, logs=work / "logs", env=cli_env
        ).start()


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]) -> Path:
    return make_project(
        tmp_path_factory.mktemp("dask-hosts-project") / "base",
        cli_env,
        federation={"clients": CLIENTS, "rounds": ROUNDS, "fraction_fit": 1.0},
    )


@pytest.fixture(scope="module")
def local(base: Path, cluster: dask_hosts.TlsCluster, cli_env: dict[str, str]) -> Path:
    project = base.parent / "local"
    shutil.copytree(base, project)
    run_main(RUN, project, cli_env)
    return project


def on_hosts(local: Path, name: str, cluster: dask_hosts.TlsCluster) -> Path:
    """A copy of the ``local`` run taken back to before round 1 (its data stages
    and init done: :func:`undone.undo_from`), whose runtime is the hosts'
    cluster."""
    project = local.parent / name
    shutil.copytree(local, project, symlinks=True)
    undo_from(project, 1)
    set_params(project / "params.yaml", cluster.params())
    return project


def round_records(project: Path) -> list[dict[str, Any]]:
    return [
        json.loads((project / f"metrics/rounds/round-{k}.json").read_text())
        for k in range(1, ROUNDS + 1)
    ]


def test_scheduler_requires_a_client_certificate(
    cluster: dask_hosts.TlsCluster,
) -> None:
    cluster.wait()
    host, port = cluster.address.removeprefix("tls://").split(":")
    ca_only = ssl.create_default_context(cafile=str(cluster.certs / "ca.pem"))
    ca_only.check_hostname = False  # Dask checks the CA, not host names
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with ca_only.wrap_socket(raw) as tls:
            with pytest.raises(ssl.SSLError, match="CERTIFICATE_REQUIRED"):
                tls.recv(1)


def test_run_across_hosts_is_bitwise_the_local_run(
    local: Path, cluster: dask_hosts.TlsCluster, cli_env: dict[str, str]
) -> None:
    workers = cluster.wait()
    assert len(workers) == 2
    assert all(info["nthreads"] == 1 for info in workers.values())
    project = on_hosts(local, "hosts", cluster)
    proc = run_cli(RUN, project, cli_env)
    log = proc.stdout + proc.stderr
    assert f"client training runs on the Dask scheduler at {cluster.address}" in log
    assert "(2 workers)" in log
    trained_on = set(re_workers(log))
    assert trained_on and trained_on <= set(workers)
    assert "Traceback" not in log
    assert file_hashes(project, MODELS) == file_hashes(local, MODELS)
    assert len(file_hashes(local, MODELS)) == ROUNDS + 1
    metrics = "metrics/rounds/round-*.json"
    assert file_hashes(project, metrics) == file_hashes(local, metrics)
    # the workers never needed the Prefect server (no route to it from their hosts)
    for log_file in cluster.logs.glob("worker-*.log"):
        assert "prefect" not in log_file.read_text().lower(), log_file


def re_workers(log: str) -> list[str]:
    """The workers that compiled the model for a group (the run's log)."""
    return re.findall(r"mlp compiled in Dask worker (tls://\S+) \(process", log)


def test_a_killed_worker_host_is_survived(
    local: Path, cluster: dask_hosts.TlsCluster, cli_env: dict[str, str]
) -> None:
    workers = cluster.wait()
    victim = next(a for a in workers if cluster.hosts.address(1) in a)
    project = on_hosts(local, "killed", cluster)
    run = subprocess.Popen(
        RUN, cwd=project, env=cli_env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    killed: dict[str, Any] = {}
    watcher = threading.Thread(
        target=kill_when_busy, args=(cluster, victim, run, project, killed)
    )
    watcher.start()
    out, _ = run.communicate(timeout=600)
    watcher.join()
    assert run.returncode == 0, out[-4000:]
    assert "Traceback" not in out
    # host b was killed while a group of clients was on it, before the last round
    assert killed.get("keys"), f"host b never had a group of clients: {killed}"
    assert len(killed["models_before"]) < ROUNDS + 1
    assert list(cluster.workers()) == [
        a for a in workers if a != victim
    ]  # the scheduler dropped it
    # what docs/scaling.md and docs/failures.md say: the lost worker's groups
    # are trained again on the other worker; no client is left out, same bits
    # (a round's record names clients left out only when there are some)
    for record in round_records(project):
        assert record["clients_selected"] == list(range(CLIENTS)), record
        assert "clients_excluded" not in record, record
    for k in range(1, ROUNDS + 1):
        table = (project / f"metrics/clients/round-{k}.csv").read_text()
        assert "excluded" not in table.splitlines()[0]
    assert file_hashes(project, MODELS) == file_hashes(local, MODELS)
    print(
        f"host b killed in round {len(killed['models_before'])} with "
        f"{len(killed['keys'])} group(s) on its worker ({len(killed['pids'])} pids)"
    )


def kill_when_busy(
    cluster: dask_hosts.TlsCluster,
    victim: str,
    run: subprocess.Popen,
    project: Path,
    killed: dict[str, Any],
) -> None:
    """Kill host b the moment the scheduler has a group of clients on its
    worker (while ``run`` goes on); what was killed goes to ``killed``."""
    try:
        _kill_when_busy(cluster, victim, run, project, killed)
    except Exception as error:  # said by the test's assertion
        killed["error"] = repr(error)


def _kill_when_busy(
    cluster: dask_hosts.TlsCluster,
    victim: str,
    run: subprocess.Popen,
    project: Path,
    killed: dict[str, Any],
) -> None:
    from distributed import Client

    with Client(
        cluster.address, timeout=30, security=cluster.security(), set_as_default=False
    ) as client:
        while run.poll() is None:
            keys = [
                k
                for k in client.processing(workers=[victim]).get(victim, ())
                if "train_shipped" in str(k)
            ]
            if keys:
                killed["models_before"] = sorted(project.glob(MODELS))
                killed["pids"] = cluster.hosts.kill(1)
                killed["keys"] = keys
                return
            time.sleep(0.02)

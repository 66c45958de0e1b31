"""End-to-end fixtures: a real Prefect server, real projects, real DVC.

One Prefect server (``prefect server start``) on a free loopback port serves the
whole session, with its own PREFECT_HOME, so tests never touch a developer's server
at 4200 and each CLI process reports to it instead of starting a temporary one.

The warm workers ``fedpipe stage`` starts (``dvc repro``) keep their sockets in a
folder of the session's (``FEDPIPE_WARM_DIR``), never the user's, and every one
still running when the session ends is stopped.

One tiny project (``tiny_fresh``), one `fedpipe run` of it (``tiny_run``) and one
`dvc repro` of it (``tiny_repro``) serve every module that needs the default tiny
federation as it is, or as it ran; ``tiny_ready`` (its data stages and initial
model done, no round) every module that only needs rounds run on TINY's data.

A ``fedpipe`` command whose process is not what a test checks (the project it
leaves is: models, records, dvc.lock) runs in the worker's own process through
:func:`e2e_helpers.run_main`, ``fedpipe run`` included: the same command line
without a new interpreter's start (~1 s of CPU for a tiny run of rounds against
~8 s). What only a process can show (its exit on a signal, a kill, its console
on a terminal or a pipe, a stage through DVC and the warm worker, Dask workers,
a user's code imported fresh) keeps a subprocess.

After every module, :func:`fedpipe.observe.audit.audit` checks the invariants every
run keeps (``fedpipe audit``) on each project the module ran or changed: a broken
promise fails the module's last test, naming the project and the file. A module
that damages a project on purpose says so with ``pytestmark =
pytest.mark.audit_exempt("why")``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, make_project, run_cli

from fedpipe.observe.audit import audit


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _drain_prefect_clients() -> None:
    """Send what flows run in this process (tests that call a flow directly)
    still queue for the server while it is up: at exit, Prefect's log and event
    workers would otherwise post to a stopped server and print "Error logging
    to API" under the test summary."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=30)


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a Prefect API started for this test session."""
    from orchestration.server import server_env, wait_healthy

    home = tmp_path_factory.mktemp("prefect-home")
    port = _free_port()
    env = server_env()
    env["PREFECT_HOME"] = str(home)
    log = open(home / "server.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            str(BIN / "prefect"),
            "server",
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--analytics-off",
            "--no-services",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/api"
    try:
        wait_healthy(url, timeout=120)
        yield url
    finally:
        _drain_prefect_clients()
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="session")
def warm_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The session's folder of warm-worker sockets; its workers stop at the end."""
    from fedpipe_app.stageclient import stop_workers

    path = tmp_path_factory.mktemp("fedpipe-warm")
    path.chmod(0o700)
    yield path
    stop_workers(path)


@pytest.fixture(scope="session")
def cli_env(
    prefect_api: str, warm_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """Environment for CLI subprocesses: the session's Prefect API, quiet tools."""
    env = dict(os.environ)
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        PREFECT_API_URL=prefect_api,
        PREFECT_HOME=str(tmp_path_factory.mktemp("prefect-client-home")),
        DVC_NO_ANALYTICS="1",
        DVC_SITE_CACHE_DIR=str(tmp_path_factory.mktemp("dvc-site-cache")),
        # `fedpipe init`'s default remote for every project of the session, never
        # the user's (only tests/e2e/test_lineage_remote.py pushes to it)
        FEDPIPE_DVC_REMOTE=str(tmp_path_factory.mktemp("dvc-remote")),
        GIT_AUTHOR_NAME="fedpipe tests",
        GIT_AUTHOR_EMAIL="tests@fedpipe.invalid",
        GIT_COMMITTER_NAME="fedpipe tests",
        GIT_COMMITTER_EMAIL="tests@fedpipe.invalid",
        TF_CPP_MIN_LOG_LEVEL="3",
        FEDPIPE_WARM_DIR=str(warm_dir),
    )
    return env


@pytest.fixture(scope="session")
def tiny_fresh(
    tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> Path:
    """The default tiny project (``TINY``: 3 clients, 4 rounds), committed, never
    run. Shared by the session: copy it before changing or running it."""
    return make_project(tmp_path_factory.mktemp("tiny") / "fresh", cli_env)


@pytest.fixture(scope="session")
def tiny_run(
    tiny_fresh: Path, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> dict:
    """One `fedpipe run` of a copy of ``tiny_fresh`` (in a pipe, report included),
    shared by the session: ``project`` (copy it before changing it) and ``proc``.
    Its validate stage runs in the process begun beside the run's imports
    (``FEDPIPE_PREWARM=1``, whatever the machine's load: ``orchestration.prewarm``);
    ``tiny_repro``'s runs in the stage's own process, and test_pipeline compares
    the two."""
    project = tmp_path_factory.mktemp("tiny-run") / "project"
    shutil.copytree(tiny_fresh, project)
    proc = run_cli(
        [str(BIN / "fedpipe"), "run", "--no-server-start"],
        project,
        {**cli_env, "FEDPIPE_PREWARM": "1"},
    )
    return {"project": project, "proc": proc}


READY_STAGES = ("mnist5k", "ingest", "validate", "partition", "preprocess", "init")
"""The stages ``tiny_ready`` has up to date: the data stages and the initial model."""


@pytest.fixture(scope="session")
def tiny_ready(
    tiny_fresh: Path,
    tiny_run: dict,
    tmp_path_factory: pytest.TempPathFactory,
    cli_env: dict[str, str],
) -> Path:
    """``tiny_fresh`` as a run stopped after ``init`` leaves it, committed: the
    data stages and the initial model up to date in dvc.lock (``READY_STAGES``),
    no round run, so a run of a copy runs the rounds (and what its params
    change) only. Made from the session's tiny run, not run again: its dvc.lock
    records of those stages (its first ones: dvc.lock keeps pipeline order), the
    outputs they name with the ``.gitignore`` DVC wrote beside each, and its DVC
    cache. Shared by the session: copy it before changing or running it."""
    project = tmp_path_factory.mktemp("tiny-ready") / "project"
    shutil.copytree(tiny_fresh, project)
    ran = tiny_run["project"]
    head = (ran / "dvc.lock").read_text().partition("\n  round@1:\n")[0] + "\n"
    stages = yaml.safe_load(head)["stages"]
    assert tuple(stages) == READY_STAGES, list(stages)
    for out in (o["path"] for s in stages.values() for o in s.get("outs", [])):
        source, target = ran / out, project / out
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copy2(source, target)
        if (source.parent / ".gitignore").is_file():
            shutil.copy2(source.parent / ".gitignore", target.parent / ".gitignore")
    shutil.copytree(ran / ".dvc/cache", project / ".dvc/cache", dirs_exist_ok=True)
    (project / "dvc.lock").write_text(head)
    run_cli(["git", "add", "-A"], project, cli_env)
    run_cli(["git", "commit", "-qm", "data stages and init"], project, cli_env)
    return project


@pytest.fixture(scope="session")
def tiny_repro(
    tiny_fresh: Path, tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> dict:
    """One `dvc repro` of a copy of ``tiny_fresh`` (its stages through a warm
    worker of the session's), shared by the session: ``project`` (copy it before
    changing it) and ``proc``."""
    project = tmp_path_factory.mktemp("tiny-repro") / "project"
    shutil.copytree(tiny_fresh, project)
    proc = run_cli([str(BIN / "dvc"), "repro"], project, cli_env)
    return {"project": project, "proc": proc}


def _projects_changed_since(base: Path, since: float) -> list[Path]:
    """Projects under ``base`` that have run (a ``dvc.lock``) and whose
    ``dvc.lock`` or published metrics changed since ``since``."""
    found = []
    for folder, subfolders, files in os.walk(base):
        # git's and DVC's own folders hold no project (and most of the files)
        subfolders[:] = [d for d in subfolders if d not in (".git", ".dvc")]
        root = Path(folder)
        if "dvc.lock" not in files or not (root / "params.yaml").is_file():
            continue
        lock = root / "dvc.lock"
        touched = [lock, root / "metrics", root / "data/preprocess", root / "reports"]
        if any(p.exists() and p.stat().st_mtime >= since for p in touched):
            found.append(root)
    return sorted(found)


@pytest.fixture(scope="module", autouse=True)
def audited_projects(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Every project this module ran keeps the invariants (``fedpipe audit``)."""
    import time

    start = time.time() - 1.0
    yield
    if request.node.get_closest_marker("audit_exempt") is not None:
        return
    broken = []
    for root in _projects_changed_since(tmp_path_factory.getbasetemp(), start):
        for result in audit(root):
            broken += [f"{root}: {result.name}: {v}" for v in result.violations]
    if broken:
        pytest.fail(
            "invariants broken (fedpipe audit):\n" + "\n".join(broken[:30]),
            pytrace=False,
        )

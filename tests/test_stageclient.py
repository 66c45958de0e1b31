"""The warm-worker client's rules: when it is on, what makes a worker fit, where
its socket may live. (The worker itself: tests/e2e/test_warm_stage.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fedpipe_app import stageclient


@pytest.mark.parametrize("value", ["0", "false", "No", "off "])
def test_fedpipe_warm_off(value: str) -> None:
    assert not stageclient.enabled({"FEDPIPE_WARM": value})


def test_on_by_default() -> None:
    assert stageclient.enabled({})


def test_key_ignores_per_stage_variables(tmp_path: Path) -> None:
    env = {"PREFECT_API_URL": "http://127.0.0.1:1/api", "DVC_STAGE": "round@1"}
    other_stage = env | {"DVC_STAGE": "round@2", "COLUMNS": "80"}
    key = stageclient.worker_key(tmp_path, verbose=False, environ=env)
    assert stageclient.worker_key(tmp_path, verbose=False, environ=other_stage) == key


@pytest.mark.parametrize(
    "change",
    [
        {"environ": {"PREFECT_API_URL": "http://127.0.0.1:2/api"}},
        {"environ": {"PREFECT_API_URL": "http://127.0.0.1:1/api", "TF_X": "1"}},
        {"verbose": True},
        {"project": "elsewhere"},
    ],
)
def test_key_differs_for_another_server_env_verbosity_or_project(
    tmp_path: Path, change: dict
) -> None:
    base = {
        "project": tmp_path,
        "verbose": False,
        "environ": {"PREFECT_API_URL": "http://127.0.0.1:1/api"},
    }
    changed = base | change
    if change.get("project"):
        changed["project"] = tmp_path / change["project"]
    assert stageclient.worker_key(**changed) != stageclient.worker_key(**base)


def test_runtime_dir_is_made_private(tmp_path: Path) -> None:
    folder = stageclient.runtime_dir({"FEDPIPE_WARM_DIR": str(tmp_path / "w")})
    assert folder.stat().st_mode & 0o777 == 0o700


def test_runtime_dir_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(stageclient.WorkerUnavailable, match="not a private folder"):
        stageclient.runtime_dir({"FEDPIPE_WARM_DIR": str(shared)})


def test_stage_argv() -> None:
    argv = stageclient.stage_argv("round", 3, flags=["-q"])
    assert argv == ["stage", "round", "3", "-q"]
    assert stageclient.stage_argv("ingest", None, flags=[]) == ["stage", "ingest"]


def test_no_stray_socket_breaks_a_stage_start(tmp_path: Path) -> None:
    """A socket file nobody listens on (a killed worker's) counts as no worker."""
    import socket

    path = tmp_path / "dead.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))  # bound, never listening, then closed: a stale file
    assert path.exists()
    assert stageclient._try_connect(path) is None


def test_client_imports_nothing_heavy() -> None:
    code = (
        "import sys, fedpipe_app.cli, fedpipe_app.stageclient\n"
        "heavy = {'prefect', 'tensorflow', 'keras', 'great_expectations', 'dvc',"
        " 'pandas', 'numpy', 'pydantic', 'yaml'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"

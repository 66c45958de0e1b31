"""The orchestration's own failures, tried as an operator would (issue 12): how a
run finds its Prefect server, and that server killed mid-run.

- how a run finds its Prefect server: ``PREFECT_API_URL``, a Prefect profile, a
  server answering at the default address, none (one is started in the
  background, a stale PID file cleared first);
- that server killed mid-run: the run ends within 30 s with one line, and the
  next run, against another server, resumes to the same bits.

One Prefect server of this module's own (started by fedpipe itself, the
background case) is the one killed; the resumed runs report to the session's.
Bits are compared with the session's uninterrupted tiny run (``tiny_run``).

Two runs in one project, a damaged DVC lock and SCAFFOLD killed mid-round are in
tests/e2e/test_operator_locks.py, Ctrl-C in tests/e2e/test_run_console.py (the
module was split so that the two test workers share its time).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli, run_main
from e2e_helpers import start_in_session as _start
from e2e_helpers import wait_for_file as _wait_for

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
RUN = [FEDPIPE, "run", "--no-server-start", "--no-report"]
MODELS = "models/round-*/weights.npz"
ENSURE_API = "from orchestration.server import ensure_api; print(ensure_api())"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _ensure_api(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``orchestration.server.ensure_api()`` in a fresh process (what ``fedpipe run``
    calls before Prefect is imported); its last line is the URL."""
    return subprocess.run(
        [sys.executable, "-c", ENSURE_API],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    for proc in [*root.children(recursive=True), root]:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture(scope="module")
def background(
    tmp_path_factory: pytest.TempPathFactory, cli_env: dict[str, str]
) -> dict:
    """No server answers and a stale PID file (a kill -9, a reboot) is left: the
    first run starts one in the background. This module's own server."""
    home = tmp_path_factory.mktemp("prefect-bg-home")
    stale = _dead_pid()
    (home / "server.pid").write_text(str(stale))
    port = _free_port()
    env = {k: v for k, v in cli_env.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_API_PORT=str(port))
    began = time.monotonic()
    started = _ensure_api(env)
    print(f"\na server started in the background in {time.monotonic() - began:.1f} s")
    url = f"http://127.0.0.1:{port}/api"
    info = {"url": url, "env": env, "home": home, "stale": stale, "proc": started}
    yield info
    pid = (home / "server.pid").read_text().strip()
    if pid.isdigit():
        _kill_tree(int(pid))


def test_no_server_and_a_stale_pid_file_start_one(background: dict) -> None:
    proc = background["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == background["url"]
    where = background["url"].removesuffix("/api")
    assert f"starting a local Prefect server at {where}" in proc.stdout
    pid = int((background["home"] / "server.pid").read_text())
    assert pid != background["stale"] and psutil.pid_exists(pid)
    # in a session of its own: a Ctrl-C to the run's terminal (its process
    # group) does not end the server that is meant to outlive the run
    assert os.getsid(pid) != os.getsid(0) and os.getpgid(pid) != os.getpgid(0)


def test_a_server_answering_profile_or_env_is_used(
    background: dict, tmp_path: Path, cli_env: dict[str, str], tiny_fresh: Path
) -> None:
    url = background["url"]
    # answering at the default address (PREFECT_SERVER_API_PORT): used, none started
    found = _ensure_api(background["env"])
    assert found.stdout.splitlines() == [url], found.stdout + found.stderr
    # the active Prefect profile's PREFECT_API_URL (the default address is dead)
    home = tmp_path / "profile-home"
    home.mkdir()
    (home / "profiles.toml").write_text(
        f'active = "fl"\n[profiles.fl]\nPREFECT_API_URL = "{url}"\n'
    )
    dead_port = str(_free_port())
    env = {
        **background["env"],
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_API_PORT": dead_port,
    }
    by_profile = _ensure_api(env)
    assert by_profile.stdout.splitlines() == [url], by_profile.stderr
    # PREFECT_API_URL wins over both; a dead one is one line, nothing started
    assert _ensure_api({**env, "PREFECT_API_URL": url}).stdout.splitlines() == [url]
    project = shutil.copytree(tiny_fresh, tmp_path / "dead-url")
    dead = f"http://127.0.0.1:{dead_port}/api"
    proc = run_cli(
        [FEDPIPE, "run"], project, {**cli_env, "PREFECT_API_URL": dead}, check=False
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        f"error: PREFECT_API_URL={dead} does not answer; start that server or unset "
        "PREFECT_API_URL to let fedpipe use a local one"
    ]
    assert not (project / "data/raw").exists()


def _ran(stdout: str) -> list[str]:
    """The stages ``done: N stage(s) ran (a, b)`` names."""
    found = re.search(r"^done: \d+ stage\(s\) ran(?: \((.*)\))?$", stdout, re.M)
    assert found, stdout[-2000:]
    return found.group(1).split(", ") if found.group(1) else []


def _recorded(project: Path) -> list[str]:
    lock = yaml.safe_load((project / "dvc.lock").read_text()) or {}
    return list(lock.get("stages") or {})


def _rounds(stages: list[str]) -> list[int]:
    return [int(s.partition("@")[2]) for s in stages if s.startswith("round@")]


def _finished_rounds(project: Path) -> int:
    """The last round whose metrics file is written (0: none)."""
    done = [
        int(p.stem.partition("-")[2])
        for p in (project / "metrics/rounds").glob("round-*.json")
    ]
    return max(done, default=0)


def test_server_killed_mid_run_stops_in_30_s_and_resumes_to_the_same_bits(
    background: dict,
    tiny_fresh: Path,
    tiny_run: dict,
    tmp_path: Path,
    cli_env: dict[str, str],
) -> None:
    url = background["url"]
    project = shutil.copytree(tiny_fresh, tmp_path / "server-killed")
    run = _start(RUN, project, {**cli_env, "PREFECT_API_URL": url})
    _wait_for(project / "metrics/rounds/round-1.json", run)  # round 2 starts
    _kill_tree(int((background["home"] / "server.pid").read_text()))
    killed = time.monotonic()
    done_at_kill = _finished_rounds(project)
    out, _ = run.communicate(timeout=120)
    took = time.monotonic() - killed
    print(f"\nthe run ended {took:.1f} s after its Prefect server was killed")
    assert took <= 30, f"{took:.0f} s after the server died\n{out[-3000:]}"
    assert run.returncode == 1, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    [line] = [ln for ln in out.splitlines() if ln.startswith("error:")]
    said = re.fullmatch(
        rf"error: the Prefect server at {re.escape(url)} stopped answering "
        r"\(nothing for \d+ s\): run stopped; (round (\d) is the last recorded round"
        r"|no round recorded yet) \(dvc\.lock\); `fedpipe run` resumes from there "
        r"once a Prefect server answers",
        line,
    )
    assert said, line
    recorded = _recorded(project)
    last = max(_rounds(recorded), default=None)
    assert said.group(2) == (None if last is None else str(last))
    assert "init" in recorded  # what had finished is recorded, not lost

    resumed = run_main(RUN, project, cli_env)  # the session's server
    ran = _ran(resumed.stdout)
    assert not set(ran) & set(recorded)
    # at most the interrupted round again (none: a round needs no server while it
    # trains, so a tiny run may have finished every round before it was stopped)
    assert all(k >= done_at_kill for k in _rounds(ran))
    assert file_hashes(project, MODELS) == file_hashes(tiny_run["project"], MODELS)

"""The orchestration's own failures, tried as an operator would (issue 12).

- how a run finds its Prefect server: ``PREFECT_API_URL``, a Prefect profile, a
  server answering at the default address, none (one is started in the
  background, a stale PID file cleared first);
- that server killed mid-run: the run ends within 30 s with one line, and the
  next run, against another server, resumes to the same bits;
- two runs in one project, or a run and ``dvc repro``: the second refuses,
  naming the first;
- Ctrl-C: the run stops within seconds, only whole stages are recorded, and
  ``dvc repro`` resumes from the interrupted round to the same bits.

One Prefect server of this module's own (started by fedpipe itself, the
background case) is the one killed; the resumed runs report to the session's.
Bits are compared with the session's uninterrupted tiny run (``tiny_run``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli

from fedpipe.config.overrides import set_params

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
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


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before the failure could be planted"


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], project: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        args,
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as in a terminal
        preexec_fn=_default_sigint,  # SIGINT at its default (see NOTES.md)
    )


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

    resumed = run_cli(RUN, project, cli_env)  # the session's server
    ran = _ran(resumed.stdout)
    assert not set(ran) & set(recorded)
    # at most the interrupted round again (none: a round needs no server while it
    # trains, so a tiny run may have finished every round before it was stopped)
    assert all(k >= done_at_kill for k in _rounds(ran))
    assert file_hashes(project, MODELS) == file_hashes(tiny_run["project"], MODELS)


def _lock_holder(project: Path) -> int | None:
    """The pid in DVC's repo lock while someone holds it (None: free)."""
    fd = os.open(project / ".dvc/tmp/lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return int((project / ".dvc/tmp/lock").read_text().split()[0])
    finally:
        os.close(fd)  # closing drops a lock this test took
    return None


def test_a_second_run_and_dvc_repro_refuse_while_a_run_holds_the_project(
    tiny_fresh: Path, tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = shutil.copytree(tiny_fresh, tmp_path / "busy")
    first = _start(RUN, project, cli_env)
    deadline = time.monotonic() + 120
    while _lock_holder(project) != first.pid and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()[0][-3000:]
        time.sleep(0.05)
    params = (project / "params.yaml").read_text()

    second = run_cli([*RUN, "-S", "train.lr=0.5"], project, cli_env, check=False)
    assert second.returncode == 1, second.stdout + second.stderr
    assert second.stderr.splitlines()[0] == (
        f"error: {project.resolve()}: pid {first.pid} (fedpipe run --no-server-start "
        "--no-report) is running in this project (it holds DVC's lock, "
        ".dvc/tmp/lock); `fedpipe run` refused: wait for it to end, or stop it"
    )
    assert (project / "params.yaml").read_text() == params  # -S not applied
    repro = run_cli([DVC, "repro"], project, cli_env, check=False)
    assert repro.returncode != 0
    assert "Unable to acquire lock" in repro.stderr
    assert "Running stage" not in repro.stdout
    assert first.poll() is None, "the first run ended before the others were tried"

    out, _ = first.communicate(timeout=300)
    assert first.returncode == 0, out[-3000:]
    assert file_hashes(project, MODELS) == file_hashes(tiny_run["project"], MODELS)


def _rwlock_pids(project: Path) -> set[int]:
    try:
        info = json.loads((project / ".dvc/tmp/rwlock").read_text() or "{}")
    except (OSError, ValueError):
        return set()
    entries = list(info.get("write", {}).values())
    return {e["pid"] for e in entries}


def test_a_run_refuses_while_dvc_repro_runs_a_stage(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = shutil.copytree(tiny_run["project"], tmp_path / "repro-busy")
    repro = _start([DVC, "repro", "-f", "-s", "summary"], project, cli_env)
    deadline = time.monotonic() + 120
    # DVC lets go of its repo lock while a stage's command runs; its rwlock
    # names the stage's files and the dvc process
    while repro.pid not in _rwlock_pids(project) and time.monotonic() < deadline:
        assert repro.poll() is None, repro.communicate()[0][-3000:]
        time.sleep(0.05)
    run = run_cli(RUN, project, cli_env, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    [line] = run.stderr.splitlines()
    assert f"pid {repro.pid} (dvc repro -f -s summary) is running" in line
    assert "`fedpipe run` refused" in line
    out, _ = repro.communicate(timeout=300)
    assert repro.returncode == 0, out[-3000:]


def test_an_emptied_rwlock_is_repaired_by_the_next_run_in_one_line(
    tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A kill while DVC rewrote ``.dvc/tmp/rwlock`` (in place) leaves it empty:
    DVC then refuses every command; the next ``fedpipe run`` repairs it."""
    project = shutil.copytree(tiny_run["project"], tmp_path / "rwlock")
    rwlock = project / ".dvc/tmp/rwlock"
    rwlock.write_text("")
    wedged = run_cli([DVC, "status"], project, cli_env, check=False)
    assert wedged.returncode != 0
    assert "RWLock-file '.dvc/tmp/rwlock'. JSON structure is corrupted" in (
        wedged.stdout + wedged.stderr
    )
    run = run_cli(RUN, project, cli_env, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    said = [line for line in run.stderr.splitlines() if "rwlock" in line]
    assert said == [
        f"repaired {project.resolve()}/.dvc/tmp/rwlock: it was empty (0 bytes: a "
        "DVC write cut short); no live process is named in it, so it was removed "
        "(DVC reads no file as no paths locked)"
    ]
    assert "Traceback" not in run.stdout + run.stderr
    status = run_cli([DVC, "status"], project, cli_env)
    assert "Data and pipelines are up to date" in status.stdout
    assert file_hashes(project, MODELS) == file_hashes(tiny_run["project"], MODELS)


def test_ctrl_c_stops_in_seconds_records_whole_stages_and_dvc_repro_resumes(
    tiny_fresh: Path, tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    project = shutil.copytree(tiny_fresh, tmp_path / "ctrl-c")
    run = _start(RUN, project, cli_env)
    _wait_for(project / "metrics/rounds/round-2.json", run)
    os.killpg(run.pid, signal.SIGINT)
    sent = time.monotonic()
    done_at_signal = _finished_rounds(project)
    out, _ = run.communicate(timeout=120)
    took = time.monotonic() - sent
    print(f"\nthe run ended {took:.1f} s after Ctrl-C")
    assert run.returncode == 130, out[-3000:]
    assert took <= 15, f"{took:.1f} s after Ctrl-C"
    recorded = _recorded(project)
    # every recorded stage is whole: DVC finds nothing changed in any of them
    status = run_cli([DVC, "status", "--json"], project, cli_env)
    changed = set(json.loads(status.stdout or "{}"))
    assert not changed & set(recorded), changed & set(recorded)
    assert "round@1" in recorded  # rounds done before Ctrl-C are kept

    repro = run_cli([DVC, "repro"], project, cli_env)
    again = [
        int(k) for k in re.findall(r"^Running stage 'round@(\d+)'", repro.stdout, re.M)
    ]
    assert again and min(again) >= done_at_signal, repro.stdout[-2000:]
    assert file_hashes(project, MODELS) == file_hashes(tiny_run["project"], MODELS)


def test_scaffold_killed_at_several_points_of_a_round_resumes_to_the_same_bits(
    tiny_fresh: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """SCAFFOLD carries state on the server and on every client from round to
    round; ``kill -9`` of the run's process group (its recorder, a process of its
    own, lands what it was writing) during round 2's training, then while round 3
    writes its outputs (model written, state and metrics not yet)."""
    reference = shutil.copytree(tiny_fresh, tmp_path / "scaffold")
    set_params(reference / "params.yaml", {"strategy.name": "scaffold"})
    killed = shutil.copytree(reference, tmp_path / "scaffold-killed")
    run_cli(RUN, reference, cli_env)
    for marker in ("metrics/rounds/round-1.json", "models/round-3/weights.npz"):
        run = _start(RUN, killed, cli_env)
        _wait_for(killed / marker, run)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
    assert not (killed / "metrics/summary.json").exists()
    run_cli(RUN, killed, cli_env)
    for files in ("models/round-*/*.npz", "models/round-*/clients/*"):
        assert file_hashes(killed, files) == file_hashes(reference, files), files
    assert len(file_hashes(killed, "models/round-4/clients/*")) > 1  # their state
    status = run_cli([DVC, "status"], killed, cli_env)
    assert "Data and pipelines are up to date" in status.stdout

"""Helpers for the end-to-end tests: tiny projects and CLI calls."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import yaml

BIN = Path(sys.executable).parent
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))  # the scripts' own tiny data, shared with them

from tiny_data import TINY, merge, write_image_folder, write_table  # noqa: E402

__all__ = [
    "BIN", "TINY", "copy_project", "file_hashes",
    "load_script", "make_project", "run_cli", "run_main",
    "start_in_session", "wait_for_file", "write_image_folder", "write_table",
]  # fmt: skip


def run_cli(
    args: list[str], cwd: Path, env: dict[str, str], *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run a command in a project; on unexpected failure show its output."""
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(args)} exited {proc.returncode}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


def run_main(
    args: list[str], cwd: Path, env: dict[str, str], *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``fedpipe ARGS`` in ``cwd`` in this process (``fedpipe_app.cli.main``), read
    as :func:`run_cli` reads a subprocess (``ARGS`` may start with the
    ``fedpipe`` script's path, as :func:`run_cli`'s do).

    For commands whose process is not what a test checks: read-only ones, and
    ``fedpipe run`` where the test reads the project it leaves (models, records,
    dvc.lock), not the process's own output, exit on a signal or timing. The
    same command line as the script, without a new interpreter's start: a tiny
    run of rounds costs ~1 s of CPU here against ~8 s in a process of its own
    (TensorFlow's, Prefect's and fedpipe's imports, and the first compile of
    each model, are paid once per test worker); the bits are the same (the
    compiled models of :mod:`fedpipe.model.process` are shared as the warm
    stage worker shares them). Each command keeps at least one subprocess test
    (tests/e2e/conftest.py's ``tiny_run`` for ``fedpipe run``). The
    environment is ``env`` during the call; it, the working folder and the
    SIGINT/SIGTERM handlers the command installs are put back after it."""
    # Prefect's first import configures logging (dictConfig), which closes
    # every handler there is: absl's (TensorFlow's) closes its stream unless
    # it is sys.stderr at that moment. Imported here, before sys.stderr is
    # redirected, the stream (pytest's capture of this worker) stays open.
    import prefect.main  # noqa: F401

    from fedpipe_app.cli import main

    if args and Path(args[0]).name == "fedpipe":
        args = args[1:]
    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    out, err = io.StringIO(), io.StringIO()
    os.environ.clear()
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(["-C", str(cwd), *args])
            except SystemExit as exc:  # argparse's refusals
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        for sig, handler in saved_signals.items():
            signal.signal(sig, handler)
    proc = subprocess.CompletedProcess(
        ["fedpipe", *args], code, out.getvalue(), err.getvalue()
    )
    if check and code != 0:
        raise AssertionError(
            f"fedpipe {' '.join(args)} (in process) exited {code}\n"
            f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-6000:]}"
        )
    return proc


def make_project(path: Path, env: dict[str, str], **overrides: dict) -> Path:
    """A new fedpipe project (git + dvc initialised, committed) with tiny params."""
    run_main(["init", str(path)], Path.cwd(), env)  # in process: cheap, not checked
    raw = yaml.safe_load((path / "params.yaml").read_text())
    raw.pop("round_chain")
    params = merge(merge(raw, TINY), overrides)
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_main(["sync"], path, env)
    run_cli(["git", "add", "-A"], path, env)
    run_cli(["git", "commit", "-qm", "tiny experiment"], path, env)
    return path


def copy_project(
    source: Path, path: Path, env: dict[str, str], **overrides: dict
) -> Path:
    """A copy of the tiny project ``source`` (e.g. the session's ``tiny_ready``)
    at ``path`` with ``overrides`` laid on its params, synced and committed, as
    :func:`make_project` makes a new one. Files already in ``path`` (a user's
    code brought first) stay; the copy keeps what ``source`` has run."""
    shutil.copytree(source, path, dirs_exist_ok=True)
    raw = yaml.safe_load((path / "params.yaml").read_text())
    raw.pop("round_chain")
    (path / "params.yaml").write_text(
        yaml.safe_dump(merge(raw, overrides), sort_keys=False)
    )
    run_main(["sync"], path, env)
    run_cli(["git", "add", "-A"], path, env)
    run_cli(["git", "commit", "-qm", "tiny experiment", "--allow-empty"], path, env)
    return path


def file_hashes(project: Path, pattern: str) -> dict[str, str]:
    """md5 of every file matching ``pattern`` under ``project``."""
    return {
        str(p.relative_to(project)): hashlib.md5(p.read_bytes()).hexdigest()
        for p in sorted(project.glob(pattern))
    }


def load_script(path: Path) -> ModuleType:
    """A benchmark or script file imported as a module named after it."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_in_session(
    args: list[str], project: Path, env: dict[str, str], *, merge_stderr: bool = True
) -> subprocess.Popen:
    """Start ``args`` in ``project`` as a terminal would: its own process group,
    SIGINT at its default, stdout and stderr in one text pipe (two with
    ``merge_stderr=False``).

    SIGINT at its default even when the tests run as a background job: a
    non-interactive shell starts those with SIGINT ignored, the child would
    inherit that, and Python would then never raise KeyboardInterrupt."""
    return subprocess.Popen(
        args,
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as in a terminal
        preexec_fn=_default_sigint,  # SIGINT at its default (see NOTES.md)
    )


def wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Wait until ``path`` exists; ``proc`` must still be running then."""
    deadline = time.monotonic() + timeout
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before the failure could be planted"

"""``fedpipe run --exp NAME``: a variant as a named DVC experiment.

The ``-S`` overrides are validated as ``params.yaml`` is
(:func:`fedpipe.config.overrides.check_overrides`) and written into ``params.yaml``
(``round_chain`` regenerated for ``federation.rounds``, which DVC's own ``-S``
cannot do); then ``dvc exp run --temp -n NAME`` takes the workspace as it is
(what git tracks, with its uncommitted changes) into a temporary copy under
``.dvc/tmp/exps`` and runs the stages there (``dvc repro``: one ``fedpipe stage
...`` process per stage that is not up to date); ``params.yaml`` is put back
when that ends, however it ends. The experiment is a git ref of
its own: ``dvc exp show`` lists it with its params and metrics, ``dvc exp apply
NAME`` brings it into the workspace.

DVC runs as a command (``dvc``), not imported: fedpipe's core stays free of DVC.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from fedpipe.config.overrides import check_overrides, parse_overrides, set_params
from fedpipe.config.params import ParamsError
from fedpipe.core import atomic
from fedpipe.core.git import git_output


def dvc_command() -> str:
    """``dvc`` beside this interpreter (a venv not activated), else on PATH."""
    beside = Path(sys.executable).with_name("dvc")
    return str(beside) if beside.exists() else (shutil.which("dvc") or "dvc")


def stage_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a ``dvc`` that runs ``fedpipe stage ...`` by name: this
    interpreter's bin directory first on ``PATH``, so that the ``fedpipe`` beside
    it is found when the venv is not activated (``.venv/bin/fedpipe run --exp``);
    DVC's analytics off."""
    env = dict(os.environ if base is None else base, DVC_NO_ANALYTICS="1")
    bindir = str(Path(sys.executable).parent)
    rest = [d for d in env.get("PATH", "").split(os.pathsep) if d and d != bindir]
    env["PATH"] = os.pathsep.join([bindir, *rest])
    return env


def experiment_command(name: str, *, force: bool = False) -> list[str]:
    """The DVC command that runs the workspace as experiment ``name`` (``force``:
    every stage, up to date or not)."""
    return [dvc_command(), "exp", "run", "--temp", "-n", name] + (
        ["--force"] if force else []
    )


def untracked_lock(root: Path) -> bool:
    """True when ``dvc.lock`` exists but git does not track it: ``dvc exp run
    --temp`` copies only what git tracks (and its changes) into the experiment."""
    if not (root / "dvc.lock").is_file():
        return False
    return git_output(root, "ls-files", "--error-unmatch", "dvc.lock") is None


def run_experiment(
    name: str,
    overrides: Sequence[str],
    *,
    params_file: str | Path = "params.yaml",
    force: bool = False,
    log: Path | None = None,
    show: Callable[[str], None] | None = None,
) -> int:
    """Run the project with ``overrides`` as DVC experiment ``name``.

    With ``log``, DVC's output goes to that file, each line also to ``show``
    (:class:`StageLines` picks what a person sees); else to the console.

    The workspace's ``params.yaml`` is the same afterwards as before (byte for
    byte), whatever happens to the run. Returns ``dvc exp run``'s exit status.

    Raises
    ------
    ParamsError
        A bad override or experiment name (nothing is written or run).
    """
    if not name or any(c.isspace() for c in name) or name.startswith("-"):
        raise ParamsError(f"--exp {name!r}: give a name without spaces, e.g. lr-0.1")
    if not Path(".git").exists():
        raise ParamsError(
            "--exp needs a git repository (DVC keeps experiments as git refs); "
            "`fedpipe init` makes one"
        )
    values = parse_overrides(overrides)
    check_overrides(params_file, values)
    if untracked_lock(Path(".")):
        print(
            "note: dvc.lock is not in git, so the experiment starts with nothing "
            "recorded and runs every stage; `git add -A && git commit` after a run "
            "lets it reuse what that run recorded",
            file=sys.stderr,
        )
    path = Path(params_file)
    original = path.read_bytes()
    try:
        set_params(path, values)
        command = experiment_command(name, force=force)
        if log is None:
            return subprocess.run(command, env=stage_env(), check=False).returncode
        return _logged(command, log, show or (lambda line: None))
    finally:
        atomic.write_bytes(path, original)


def _logged(command: list[str], log: Path, show: Callable[[str], None]) -> int:
    """Run ``command`` with its output (stdout and stderr) written to ``log``,
    each line also passed to ``show`` as it comes; its exit status."""
    with (
        open(log, "a", encoding="utf-8") as out,
        subprocess.Popen(
            command,
            env=stage_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        ) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out.flush()
            show(line.rstrip("\n"))
        return proc.wait()


class StageLines:
    """What of ``dvc exp run``'s output a person sees: the stages DVC ran
    (:attr:`ran`, from its ``Running stage 'NAME':`` lines), and a line to show
    for each of its lines (:meth:`shown`): fedpipe's own round lines, warnings
    and errors, DVC's errors, and the Prefect server line once; DVC's per-stage
    chatter (``Stage ... didn't change, skipping``, ``> fedpipe stage ...``,
    ``Updating lock file``, its warnings about the temporary copy) goes to the
    log only."""

    _RUNNING = re.compile(r"^Running stage '([^']+)':")
    _SHOWN = re.compile(
        r"^(round\s+\d+/\d+ |error:|warning:|ERROR:|Prefect: runs report)"
    )

    def __init__(self) -> None:
        self.ran: list[str] = []
        self._seen: set[str] = set()
        self._error = False  # the last line with text was DVC's ERROR: line

    def shown(self, line: str) -> str | None:
        """``line`` if a person should see it, else ``None``."""
        running = self._RUNNING.match(line)
        if running:
            self.ran.append(running.group(1))
            return None
        if self._error and line[:1].isspace() and line.strip():
            return line  # an error's indented continuation (the command to type)
        if line.strip():
            self._error = line.startswith("ERROR:")
        if not self._SHOWN.match(line):
            return None
        if line.startswith("Prefect: "):  # every stage's process says it
            if line in self._seen:
                return None
            self._seen.add(line)
        return line

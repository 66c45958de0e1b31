"""``fedpipe init``: a new project directory with the pipeline and default params."""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

TEMPLATE_FILES = ("dvc.yaml", "params.yaml")


def template_text(name: str) -> str:
    """The packaged template for ``name`` (identical to the repository's root copy).

    Stored as ``NAME.in`` so DVC does not take the package's copy of ``dvc.yaml``
    for a second pipeline of the repository.
    """
    return resources.files("fedpipe").joinpath("templates", f"{name}.in").read_text()


def init_project(directory: Path, *, git: bool = True) -> Path:
    """Write ``dvc.yaml`` and ``params.yaml`` into ``directory``; git + dvc init.

    Refuses to overwrite existing files, so nothing already there is lost.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name in TEMPLATE_FILES:
        target = directory / name
        if target.exists():
            raise FileExistsError(f"{target}: already exists; not overwriting it")
    for name in TEMPLATE_FILES:
        (directory / name).write_text(template_text(name))
    if git:
        env = dict(os.environ, DVC_NO_ANALYTICS="1")
        if not (directory / ".git").exists():
            subprocess.run(["git", "init", "-q"], cwd=directory, check=True)
        if not (directory / ".dvc").exists():
            dvc = shutil.which("dvc") or "dvc"
            subprocess.run([dvc, "init", "-q"], cwd=directory, check=True, env=env)
    return directory.resolve()

"""A real git + DVC project, its pipeline reproduced: what the tests of DVC's
answers (``fedpipe status``, the kept staleness) start from."""

from __future__ import annotations

import subprocess
from contextlib import chdir
from pathlib import Path

import pytest
from dvc.repo import Repo


def run_ok(args: list[str], root: Path) -> None:
    """Run ``args`` in ``root``; its output in the failure when it fails."""
    proc = subprocess.run(args, cwd=root, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(args)}: {proc.stdout}{proc.stderr}"


def reproduced_project(
    root: Path, files: dict[str, str], mp: pytest.MonkeyPatch, site_cache: Path
) -> Path:
    """``git init`` and ``dvc init`` in ``root``, ``files`` (relative path ->
    text) written, then ``dvc repro``. DVC's analytics off and its site cache in
    ``site_cache`` (``mp`` keeps the environment for the caller's scope)."""
    mp.setenv("DVC_NO_ANALYTICS", "1")
    mp.setenv("DVC_SITE_CACHE_DIR", str(site_cache))
    for who in ("AUTHOR", "COMMITTER"):
        mp.setenv(f"GIT_{who}_NAME", "fedpipe tests")
        mp.setenv(f"GIT_{who}_EMAIL", "tests@fedpipe.invalid")
    run_ok(["git", "init", "-q"], root)
    Repo.init(str(root)).close()  # `dvc init`
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    with chdir(root), Repo(str(root)) as repo:
        repo.reproduce()  # `dvc repro`
    return root

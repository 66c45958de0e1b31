"""Helpers for the end-to-end tests: tiny projects and CLI calls."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import yaml

BIN = Path(sys.executable).parent
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
sys.path.insert(0, str(SCRIPTS))  # the scripts' own tiny data, shared with them

from tiny_data import TINY, merge, write_image_folder, write_table  # noqa: E402

__all__ = [
    "BIN", "TINY", "file_hashes", "load_script", "make_project", "run_cli",
    "write_image_folder", "write_table",
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


def make_project(path: Path, env: dict[str, str], **overrides: dict) -> Path:
    """A new fedpipe project (git + dvc initialised, committed) with tiny params."""
    run_cli([str(BIN / "fedpipe"), "init", str(path)], Path.cwd(), env)
    raw = yaml.safe_load((path / "params.yaml").read_text())
    raw.pop("round_chain")
    params = merge(merge(raw, TINY), overrides)
    (path / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_cli([str(BIN / "fedpipe"), "sync"], path, env)
    run_cli(["git", "add", "-A"], path, env)
    run_cli(["git", "commit", "-qm", "tiny experiment"], path, env)
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

"""Git, asked the way every part of fedpipe asks it: ``git -C root ...`` with its
output captured, never raising when git is missing or hangs."""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(
    root: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str] | None:
    """``git -C root <args>``, its output captured as text; ``None`` if git cannot
    be run (not installed, timed out)."""
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.SubprocessError):
        return None


def git_output(root: Path, *args: str) -> str | None:
    """The stripped stdout of ``git -C root <args>``; ``None`` if it failed."""
    proc = git(root, *args)
    return proc.stdout.strip() if proc is not None and proc.returncode == 0 else None

"""Where the project stands in git: HEAD, uncommitted paths, dvc.lock and
params.yaml committed or not. Reported beside the audit, never flagged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedpipe.core.git import git
from fedpipe.observe.runfiles import DVC_LOCK, PARAMS_YAML

__all__ = ["GitState", "git_state"]


@dataclass(frozen=True)
class GitState:
    """Where the project stands in git (None fields: not a git repository)."""

    commit: str | None
    subject: str | None
    dirty: tuple[str, ...]
    lock: str  # "committed" | "differs from HEAD" | "not committed" | "no git"
    params: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "subject": self.subject,
            "working_tree_clean": not self.dirty,
            "changed_paths": list(self.dirty),
            "dvc_lock": self.lock,
            "params_yaml": self.params,
        }


def _file_state(root: Path, name: str, has_head: bool) -> str:
    tracked = git(root, "ls-files", "--error-unmatch", "--", name)
    if tracked is None or tracked.returncode != 0 or not has_head:
        return "not committed"
    diff = git(root, "diff", "--quiet", "HEAD", "--", name)
    if diff is None:
        return "unknown"
    return "committed" if diff.returncode == 0 else "differs from HEAD"


def git_state(root: Path) -> GitState:
    """HEAD, uncommitted changes under ``root``, and whether dvc.lock is committed."""
    inside = git(root, "rev-parse", "--is-inside-work-tree")
    if inside is None or inside.returncode != 0:
        return GitState(None, None, (), "no git", "no git")
    head = git(root, "log", "-1", "--format=%H%n%s")
    commit = subject = None
    if head is not None and head.returncode == 0 and head.stdout.strip():
        commit, _, subject = head.stdout.strip().partition("\n")
    status = git(root, "status", "--porcelain", "--", ".")
    dirty = tuple(
        line[3:] for line in (status.stdout if status else "").splitlines() if line
    )
    return GitState(
        commit,
        subject or None,
        dirty,
        _file_state(root, DVC_LOCK.as_posix(), commit is not None),
        _file_state(root, PARAMS_YAML.as_posix(), commit is not None),
    )

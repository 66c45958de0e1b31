"""A finished DVC experiment's results, brought out of git and DVC's cache.

``dvc exp run --temp`` runs the stages in a temporary copy of the project and
keeps the result as a git commit of its own (``refs/exps/.../NAME``): the files
git tracks (``params.yaml``, ``dvc.lock`` and the uncached outputs: the
per-round metrics, health records and client tables, ``reports/summary.md``)
are in that commit, the cached outputs (models, the prepared data, the
partition manifest) in the project's DVC cache under the md5 ``dvc.lock``
records. :func:`materialize` lays both out in a folder of their own, the cached
files as symbolic links into the cache (nothing is copied), so that the doctor
and the report read the experiment as they read a run in the workspace
(:func:`fedpipe.observe.runfiles.load_run`), and the workspace stays as it was.

DVC is read as files (its cache layout, ``dvc.lock``), not imported: fedpipe's
core stays free of DVC.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import yaml

from fedpipe.core.git import git_output

__all__ = ["EXPERIMENTS_DIR", "experiment_commit", "materialize"]

EXPERIMENTS_DIR = Path(".fedpipe/experiments")
"""Where an experiment's results are laid out, one folder a name (git-ignored)."""

_CACHE = Path(".dvc/cache/files/md5")


def experiment_commit(root: Path, name: str) -> str | None:
    """The commit of the newest experiment called ``name`` in the repository at
    ``root`` (``None``: there is none)."""
    out = git_output(
        root,
        "for-each-ref",
        "--sort=-creatordate",
        "--format=%(objectname) %(refname)",
        "refs/exps",
    )
    for line in (out or "").splitlines():
        sha, _, ref = line.partition(" ")
        if ref.rsplit("/", 1)[-1] == name:
            return sha
    return None


def _cache_object(root: Path, md5: str) -> Path:
    return root / _CACHE / md5[:2] / md5[2:]


def _link(target: Path, link: Path) -> None:
    if target.is_file() and not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target.resolve())


def _cached_outs(root: Path, dest: Path) -> None:
    """Every output ``dest/dvc.lock`` records that is not in ``dest`` already
    (the uncached ones came with the commit), linked from ``root``'s cache; an
    object missing from the cache is left out (the doctor and the report read
    what is there)."""
    lock = yaml.safe_load((dest / "dvc.lock").read_text()) or {}
    for entry in (lock.get("stages") or {}).values():
        for out in (entry or {}).get("outs") or []:
            md5, path = out.get("md5"), dest / str(out.get("path"))
            if not md5 or path.exists():
                continue
            obj = _cache_object(root, str(md5))
            if not str(md5).endswith(".dir"):
                _link(obj, path)
            elif obj.is_file():
                for item in json.loads(obj.read_text()):
                    _link(_cache_object(root, item["md5"]), path / item["relpath"])


def materialize(root: Path, commit: str, dest: Path) -> Path:
    """The experiment at ``commit`` laid out in ``dest`` (made anew): its git
    files extracted, its cached outputs linked from ``root``'s DVC cache."""
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", "--format=tar", commit],
        capture_output=True,
        check=True,
    ).stdout
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    if (dest / "dvc.lock").is_file():
        _cached_outs(root, dest)
    return dest

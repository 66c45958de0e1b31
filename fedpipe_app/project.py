"""``fedpipe init``: a new project directory with the pipeline and default params."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
from importlib import resources
from pathlib import Path

TEMPLATE_FILES = ("dvc.yaml", "params.yaml")
# the secret key of DP noise (fedpipe.core.secretkey): in no commit, no DVC
# output or dependency, never pushed
SECRET_DIR = ".fedpipe/"
# written by every run but not versioned: the HTML report is rebuilt from the
# versioned metrics (`fedpipe report`); `fedpipe predict` rebuilds a round's
# model.keras from its versioned weights and transform
GITIGNORED = ("reports/report.html", "logs/", SECRET_DIR, "models/*/model.keras")
DVCIGNORED = (SECRET_DIR,)

REMOTE_NAME = "storage"
# Outside every clone, the same for every clone of a project on this machine: DVC
# expands "~" when it uses the remote, so the URL in .dvc/config stays as written.
REMOTE_ROOT = "~/.local/share/fedpipe/dvc-remote"
REMOTE_ENV = "FEDPIPE_DVC_REMOTE"  # overrides the default URL for `fedpipe init`


def template_text(name: str) -> str:
    """The packaged template for ``name`` (identical to the repository's root copy).

    Stored as ``NAME.in`` so DVC does not take the package's copy of ``dvc.yaml``
    for a second pipeline of the repository.
    """
    return (
        resources.files("fedpipe_app").joinpath("templates", f"{name}.in").read_text()
    )


def default_remote_url(project: str) -> str:
    """The default DVC remote of a new project: a folder of its own under
    ``REMOTE_ROOT``.

    Named after the project plus a random suffix, so that two projects never share
    a folder (``dvc gc --cloud`` in one would delete the other's data). The URL is
    written into the committed ``.dvc/config``, so every clone reaches the same
    folder wherever it is checked out.
    """
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", project).strip("-.") or "project"
    return f"{REMOTE_ROOT}/{slug}-{secrets.token_hex(4)}"


def init_project(
    directory: Path, *, git: bool = True, remote: str | None = None
) -> Path:
    """Write ``dvc.yaml`` and ``params.yaml`` into ``directory``; git + dvc init.

    Refuses to overwrite existing files, so nothing already there is lost. With
    ``git``, a newly initialised DVC repository gets a default remote named
    ``REMOTE_NAME`` at ``remote`` (any DVC remote URL; default
    ``default_remote_url(directory.name)``), so ``dvc push`` / ``dvc pull`` work
    at once.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for name in TEMPLATE_FILES:
        target = directory / name
        if target.exists():
            raise FileExistsError(f"{target}: already exists; not overwriting it")
    for name in TEMPLATE_FILES:
        (directory / name).write_text(template_text(name))
    _ignore(directory / ".gitignore", GITIGNORED)
    # `dvc init` keeps a .dvcignore that exists
    _ignore(directory / ".dvcignore", DVCIGNORED)
    if git:
        if not (directory / ".git").exists():
            subprocess.run(["git", "init", "-q"], cwd=directory, check=True)
        if not (directory / ".dvc").exists():
            url = remote or default_remote_url(directory.resolve().name)
            _dvc_init(directory, url)
    return directory.resolve()


def _dvc_init(directory: Path, url: str) -> None:
    """``dvc init`` and ``dvc remote add -d REMOTE_NAME url`` through DVC's API,
    in this process: the same files (``.dvc/`` staged in git as ``dvc init``
    stages it), without two ``dvc`` processes' start-up (about 2-5 s each)."""
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    from dvc.repo import Repo

    repo = Repo.init(str(directory))
    try:
        with repo.config.edit() as conf:
            conf["remote"][REMOTE_NAME] = {"url": url}
            conf["core"]["remote"] = REMOTE_NAME
    finally:
        repo.close()


def _ignore(path: Path, lines: tuple[str, ...]) -> None:
    """Append to the ignore file ``path`` those of ``lines`` it lacks."""
    present = path.read_text().splitlines() if path.exists() else []
    missing = [line for line in lines if line not in present]
    if missing:
        with path.open("a") as f:
            f.write("".join(f"{line}\n" for line in missing))


def sync_demo_stage(source: str, path: Path = Path("dvc.yaml")) -> bool:
    """``dvc.yaml`` has the demo-data stage (:data:`fedpipe.config.layout.DEMO_STAGE`,
    as the template writes it) exactly when ``source`` (``data.source``) is the
    demo data: a project on its own table or image folder neither runs it nor
    records its file. Comments and layout survive (round-trip YAML). Returns
    True when the file changed."""
    from ruamel.yaml import YAML

    from fedpipe.config.layout import DEMO_STAGE
    from fedpipe.core import atomic

    yaml_rt = YAML()
    yaml_rt.preserve_quotes = True
    yaml_rt.width = 4096
    yaml_rt.indent(mapping=2, sequence=4, offset=2)
    doc = yaml_rt.load(path.read_text())
    stages = doc.get("stages")
    if stages is None:
        return False
    wanted = source == DEMO_STAGE
    if (DEMO_STAGE in stages) == wanted:
        return False
    if wanted:
        template = yaml_rt.load(template_text("dvc.yaml"))
        stages.insert(0, DEMO_STAGE, template["stages"][DEMO_STAGE])
    else:
        del stages[DEMO_STAGE]
    with atomic.writing(path) as tmp, tmp.open("w") as handle:
        yaml_rt.dump(doc, handle)
    return True


def demo_stage_said(source: str) -> str:
    """The line that says :func:`sync_demo_stage` changed ``dvc.yaml``."""
    from fedpipe.config.layout import DEMO_STAGE

    if source == DEMO_STAGE:
        return f"dvc.yaml: the {DEMO_STAGE} stage added (data.source: {source})"
    return (
        f"dvc.yaml: the {DEMO_STAGE} stage left out (data.source: {source}, "
        "not the demo data)"
    )

"""A disk that fills mid-round (issue 28, item 3).

The tiny project lives on a small filesystem of its own (a tmpfs; a loop-mounted
ext4 image where tmpfs cannot be mounted; skipped where neither can be made). Round
1 is recorded, then a ballast file leaves less free space than round 2 writes (the
disk fills as fedpipe writes round 2's model), or a little more (it fills later,
as DVC copies an output into its cache for the dvc.lock record): ``fedpipe run``
stops with one ``error:`` line naming the file (or the cache, where DVC does not
say the file), the free space and, where known, about what the write needed; no
traceback; dvc.lock and round 1's outputs are untouched, and no half-written file
(fedpipe's or DVC's) is left to hold the space.
With the ballast gone, ``fedpipe run`` resumes to the bits of an uninterrupted run
(the session's ``tiny_run``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli, run_main
from undone import undo_from

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
RUN = [FEDPIPE, "run", "--no-server-start", "--no-report"]
SIZE_MB = 64  # the tiny project takes about 20 MB with 4 rounds
OUTPUTS = ("models/round-*/weights.npz", "metrics/rounds/round-*.json")


def _mount(mnt: Path, image: Path) -> str | None:
    """Mount a small filesystem at ``mnt``: why not, or None when mounted."""
    if os.geteuid() != 0:
        return "mounting a small filesystem needs root"
    tmpfs = ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(mnt)]
    if subprocess.run(tmpfs, capture_output=True).returncode == 0:
        return None
    with image.open("wb") as f:
        f.truncate(SIZE_MB * 2**20)
    made = subprocess.run(["mkfs.ext4", "-q", str(image)], capture_output=True)
    loop = ["mount", "-o", "loop", str(image), str(mnt)]
    if made.returncode or subprocess.run(loop, capture_output=True).returncode:
        return "neither a tmpfs nor a loop-mounted ext4 image can be mounted here"
    return None


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A filesystem of :data:`SIZE_MB` MB, unmounted at the end."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    why = _mount(mnt, tmp_path / "fs.img")
    if why is not None:
        pytest.skip(why)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture(scope="module")
def round_1_done(tiny_run: dict, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session's tiny run taken back to round 1 done (data stages,
    init, round 1 recorded; rounds 2-4, the summary and their cache objects
    gone: :func:`undone.undo_from`), made once for the module; each case copies
    it onto its own small filesystem (DVC's cache included) before filling
    that."""
    project = tmp_path_factory.mktemp("disk-full") / "round-1"
    shutil.copytree(tiny_run["project"], project, symlinks=True)
    return undo_from(project, 2)


def _round_1(project: Path) -> dict[str, str]:
    """md5 of every file round 1 wrote."""
    found = file_hashes(project, "models/round-1/*.npz")
    found |= file_hashes(project, "models/round-1/clients/*")
    return found | file_hashes(project, "metrics/*/round-1.*")


def _lost_or_altered(project: Path) -> list[str]:
    """The files ``dvc.lock`` records (outputs and metrics of every stage) that
    are missing or whose md5 is not the recorded one; a recorded folder
    (``.dir``) is checked to exist."""
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    bad = []
    for name, stage in lock["stages"].items():
        for out in stage.get("outs", []):
            path = project / out["path"]
            if out["md5"].endswith(".dir"):
                if not path.is_dir():
                    bad.append(f"{name}: {out['path']} (folder) missing")
            elif not path.is_file():
                bad.append(f"{name}: {out['path']} missing")
            elif file_hashes(project, out["path"]) != {out["path"]: out["md5"]}:
                bad.append(f"{name}: {out['path']} altered")
    return bad


def _fill(ballast: Path, leave: int) -> None:
    """Write ``ballast`` so that ``leave`` bytes stay free on its filesystem."""
    st = os.statvfs(ballast.parent)
    free = st.f_bavail * st.f_frsize
    assert free > leave, f"only {free} bytes free on {ballast.parent}"
    with ballast.open("wb") as f:
        f.write(b"\0" * (free - leave))
        f.flush()
        os.fsync(f.fileno())


@pytest.mark.parametrize(
    ("leave_kib", "writing"),
    [
        (100, "models/round-2/weights.npz"),  # round 2's model, about 100 KiB
        # later, where the timing puts it: DVC copying an output into its cache
        # (named .dvc/cache: DVC does not say the file), dvc.lock being replaced,
        # a later round's files
        (420, None),
    ],
)
def test_a_full_disk_stops_in_one_line_and_the_run_resumes(
    leave_kib: int,
    writing: str | None,
    small_fs: Path,
    round_1_done: Path,
    tiny_run: dict,
    cli_env: dict[str, str],
) -> None:
    project = small_fs / "project"
    shutil.copytree(round_1_done, project, symlinks=True)
    lock = (project / "dvc.lock").read_bytes()
    round_1 = _round_1(project)
    assert "models/round-1/weights.npz" in round_1

    ballast = small_fs / "ballast"
    _fill(ballast, leave=leave_kib * 1024)
    full = run_cli(RUN, project, cli_env, check=False)
    assert full.returncode == 1, full.stdout + full.stderr
    assert "Traceback" not in full.stdout + full.stderr, full.stderr
    errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, full.stderr
    said = errors[0]
    assert said.startswith("error: disk full: no space left writing "), said
    named = said.removeprefix("error: disk full: no space left writing ")
    named = named.split(" (")[0]
    assert (project / named).resolve().is_relative_to(project.resolve()), said
    assert " free there" in said, said
    if writing is not None:  # fedpipe's own write knows its size
        assert named == writing, said
        assert " free there, about " in said and " needed" in said, said
    # nothing recorded was lost: every record dvc.lock held is there as it was
    # (stages that finished before the disk filled may have been recorded since:
    # where the disk fills depends on the timing), and round 1's outputs too
    before = yaml.safe_load(lock)["stages"]
    after = yaml.safe_load((project / "dvc.lock").read_bytes())["stages"]
    assert {name: after.get(name) for name in before} == before
    if writing is not None:  # stopped in round 2: nothing after round 1 recorded
        assert (project / "dvc.lock").read_bytes() == lock
    assert _round_1(project) == round_1
    # every file dvc.lock records now (those recorded since included) is there
    # with the bytes it records
    assert _lost_or_altered(project) == [], said
    # no half-written file left behind (fedpipe's name.tmp, DVC's .NAME.tmp)
    left = [
        f"{p.relative_to(project)} ({p.stat().st_size} B)"
        for p in sorted(project.rglob("*.tmp"))
    ]
    assert not left, f"half-written files left: {', '.join(left)}; run said: {said}"

    ballast.unlink()
    resumed = run_main(RUN, project, cli_env)
    assert "round@1" not in resumed.stdout.split("done:")[-1], resumed.stdout
    reference = tiny_run["project"]
    for pattern in OUTPUTS:
        assert file_hashes(project, pattern) == file_hashes(reference, pattern)
    status = run_cli([str(BIN / "dvc"), "status"], project, cli_env)
    assert "up to date" in status.stdout, status.stdout

"""A recorded round's output damaged in the workspace or in DVC's cache (issue 28,
item 4).

Round 2's model of a finished tiny run is altered or deleted, in the workspace or
as its object in ``.dvc/cache``. The cache object is altered in place and left
read-only with its time kept, as bit rot or a root process leaves it: DVC trusts a
read-only cache file without hashing it, so ``dvc status`` alone says "up to date"
(checked here). In every case ``fedpipe status`` and ``fedpipe lineage`` name the
file, and ``fedpipe run`` rebuilds round 2 rather than reuse it: the bits equal the
uninterrupted run's, the cache object is its md5 again and ``dvc status`` is clean.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import yaml
from e2e_helpers import BIN, file_hashes, run_cli, run_main

from fedpipe.observe.cachecheck import damaged_objects

pytestmark = pytest.mark.e2e
FEDPIPE = str(BIN / "fedpipe")
DVC = str(BIN / "dvc")
TARGET = "models/round-2/weights.npz"
RUN = [FEDPIPE, "run", "--no-server-start", "--no-report"]
OUTPUTS = ("models/round-*/weights.npz", "metrics/rounds/round-*.json")


def _recorded_md5(project: Path, path: str) -> str:
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    for out in lock["stages"]["round@2"]["outs"]:
        if out["path"] == path:
            return str(out["md5"])
    raise AssertionError(f"{path} is not an output of round@2")


def _cache_object(project: Path, md5: str) -> Path:
    return project / ".dvc/cache/files/md5" / md5[:2] / md5[2:]


def _flip_a_byte(path: Path) -> None:
    """Alter ``path`` in place, keeping its size, mode and times."""
    st = path.stat()
    path.chmod(0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    with path.open("r+b") as f:
        f.write(data)
    path.chmod(st.st_mode & 0o777)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "damage",
    ["workspace-altered", "workspace-deleted", "cache-altered", "cache-deleted"],
)
def test_a_damaged_round_output_is_named_and_rebuilt(
    damage: str, tiny_run: dict, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    reference = tiny_run["project"]
    project = tmp_path / "project"
    shutil.copytree(reference, project, symlinks=True)
    md5 = _recorded_md5(project, TARGET)
    obj = _cache_object(project, md5)
    assert _md5(obj) == md5
    where, how = damage.split("-")
    victim = project / TARGET if where == "workspace" else obj
    if how == "altered":
        _flip_a_byte(victim)
    else:
        victim.unlink()

    if damage == "cache-altered":  # what DVC alone says: nothing
        said = run_cli([DVC, "status"], project, cli_env)
        assert "up to date" in said.stdout, said.stdout
        assert [d.path for d in damaged_objects(project)] == [TARGET]

    # in this process: the commands' own processes are tested in
    # test_status_params.py and test_lineage_remote.py
    status = run_main(["status"], project, cli_env)
    assert TARGET in status.stdout, status.stdout
    lineage = run_main(["lineage"], project, cli_env, check=False)
    flagged = lineage.stdout.split("FLAGGED:")[-1]
    assert "FLAGGED:" in lineage.stdout and TARGET in flagged, lineage.stdout

    run = run_main(RUN, project, cli_env)
    ran = run.stdout.split("done:")[-1]
    assert "round@2" in ran and "round@1," not in ran, run.stdout
    assert "Traceback" not in run.stdout + run.stderr, run.stderr
    for pattern in OUTPUTS:
        assert file_hashes(project, pattern) == file_hashes(reference, pattern)
    assert _md5(obj) == md5 and _md5(project / TARGET) == md5
    assert damaged_objects(project) == []
    clean = run_cli([DVC, "status"], project, cli_env)
    assert "up to date" in clean.stdout, clean.stdout
    verified = run_main(["lineage"], project, cli_env)
    assert "FLAGGED" not in verified.stdout, verified.stdout

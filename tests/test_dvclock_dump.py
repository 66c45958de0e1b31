"""The recorder writes dvc.lock whole (orchestration.dvclock.dump_lock): the same
bytes DVC's own ``Lockfile.dump_stages`` writes in place, and a failed write
leaves the old file as it was."""

from __future__ import annotations

import errno
import subprocess
import sys
from pathlib import Path

import pytest

from fedpipe.core.diskspace import DiskFullError
from orchestration import dvclock

DVC_YAML = """stages:
  one:
    cmd: echo one > one.txt
    outs:
      - one.txt
  two:
    cmd: echo two > two.txt
    deps:
      - one.txt
    params:
      - seed
      - train
      - model.name
    outs:
      - two.txt
"""
PARAMS = (
    "seed: 1\ntrain:\n  lr: {lr}\n  epochs: 2\nmodel:\n  name: mlp\n  width: null\n"
)


def _repo(root: Path) -> Path:
    root.mkdir()
    dvc = str(Path(sys.executable).parent / "dvc")
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=root, check=True)
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "one.txt").write_text("one\n")
    (root / "two.txt").write_text("two\n")
    (root / "params.yaml").write_text(PARAMS.format(lr=0.1))
    return root


def _dvcs_own(root: Path, names: list[str]) -> None:
    """What the recorder did before: DVC's ``dump_stages``, in place."""
    from dvc.repo import Repo

    repo = Repo(str(root))
    with repo.lock:
        by_name = {stage.addressing: stage for stage in repo.index.stages}
        stages = [by_name[n] for n in names]
        for stage in stages:
            stage.save()
            stage.commit(relink=False)
        stages[0].dvcfile.dump_stages(stages, update_pipeline=False)


def test_the_same_bytes_as_dvcs_own_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours, theirs = _repo(tmp_path / "ours"), _repo(tmp_path / "theirs")
    for names in (["one"], ["two"], ["one", "two"]):
        monkeypatch.chdir(ours)  # as the recorder runs: in its project
        dvclock.commit_stages(ours, names, lock_held=False)
        monkeypatch.chdir(theirs)
        _dvcs_own(theirs, names)
        assert (ours / "dvc.lock").read_bytes() == (theirs / "dvc.lock").read_bytes()
    assert not list(ours.glob("dvc.lock.tmp"))


def test_one_repository_for_a_runs_records_writes_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The recorder of a run that holds DVC's lock opens the repository once for
    all its records (``_RecordSession``): the same ``dvc.lock`` and run cache as
    opening it for each, also when a stage's output changed between records."""
    ours, theirs = _repo(tmp_path / "ours"), _repo(tmp_path / "theirs")
    session = dvclock._RecordSession(ours, lock_held=True)
    try:
        for names, two, lr in (
            (["one"], "two\n", 0.1),
            (["two"], "2\n", 0.1),
            (["two"], "II\n", 0.5),  # the params read once a record: read again
            (["one", "two"], "II\n", 0.25),
        ):
            for root in (ours, theirs):
                (root / "two.txt").write_text(two)
                (root / "params.yaml").write_text(PARAMS.format(lr=lr))
            monkeypatch.chdir(ours)
            session.record(names)
            monkeypatch.chdir(theirs)
            dvclock.commit_stages(theirs, names, lock_held=False)
            assert (ours / "dvc.lock").read_bytes() == (
                theirs / "dvc.lock"
            ).read_bytes()
    finally:
        session.close()
    assert "lr: 0.25" in (ours / "dvc.lock").read_text()
    from dvc.dependency import param

    assert param.read_param_file.__module__ == "dvc.dependency.param"  # put back
    runs = [
        sorted(p.relative_to(root) for p in (root / ".dvc/cache/runs").rglob("*"))
        for root in (ours, theirs)
    ]
    assert runs[0] == runs[1] and runs[0]


def test_a_full_disk_leaves_the_old_lock_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _repo(tmp_path / "repo")
    monkeypatch.chdir(root)  # as the recorder runs: in its project
    dvclock.commit_stages(root, ["one"], lock_held=False)
    before = (root / "dvc.lock").read_bytes()

    def no_space(self: Path, data: bytes) -> int:  # the disk, not dump_lock
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", no_space)
    with pytest.raises(DiskFullError, match="dvc.lock"):
        dvclock.commit_stages(root, ["two"], lock_held=False)
    monkeypatch.undo()
    assert (root / "dvc.lock").read_bytes() == before
    assert not (root / "dvc.lock.tmp").exists()


def _record(k: int, *, changed: bool = False) -> dict:
    """A stage record shaped like DVC's (``serialize.to_lockfile``), with the
    scalars YAML must quote or fold."""
    digest = f"{k:02d}" * 16
    return {
        f"round@{k}": {
            "cmd": f"fedpipe stage round {k}" + (" --again" if changed else ""),
            "deps": [
                {"path": "data/prepared", "hash": "md5", "md5": f"{digest}.dir",
                 "size": 7325070 + k, "nfiles": 3},
                {"path": f"models/round-{k - 1}/weights.npz", "hash": "md5",
                 "md5": digest, "size": 6446},
            ],
            "params": {"params.yaml": {
                "federation": {"clients": 1000, "fraction_fit": 0.01, "dropout": 0.0},
                "train": {"lr": 0.05, "optimizer": "sgd", "local_steps": None},
                "privacy": {"mechanism": None, "delta": 1e-05, "on": True},
                "tricky": ["yes", "null", "0.10", "1e-3", "", "a: b", "#x", "@at"],
                "note": "two\nlines",
            }},
            "outs": [{"path": f"models/round-{k}/weights.npz", "hash": "md5",
                      "md5": digest[::-1], "size": 6446 + k}],
        }
    }  # fmt: skip


def test_splicing_gives_the_bytes_of_dvcs_full_rewrite() -> None:
    # the recorder emits only the stages it records; the file must be the one
    # DVC's parse-and-rewrite gives: appended, replaced in the middle, several
    text = dvclock.rewrite_lock("", _record(1))
    steps = [[2], [3], [4, 5], [3], [2, 6], [1], list(range(1, 8))]
    for i, ks in enumerate(steps):
        records: dict = {}
        for k in ks:
            records |= _record(k, changed=i % 2 == 1)
        spliced = dvclock.splice_lock(text, records)
        assert spliced is not None
        assert spliced == dvclock.rewrite_lock(text, records)
        text = spliced
    assert list(__import__("yaml").safe_load(text)["stages"]) == [
        f"round@{k}" for k in range(1, 8)
    ]


def test_a_lock_not_laid_out_as_dvc_writes_it_is_rewritten_whole() -> None:
    text = dvclock.rewrite_lock("", _record(1))
    for odd in (
        text.replace("stages:\n", "# a comment\nstages:\n"),
        text.replace("stages:\n", "stages:\n  # a comment\n", 1),
        text.removesuffix("\n"),
        "",
    ):
        assert dvclock.splice_lock(odd, _record(2)) is None


def test_the_recorder_ends_quietly_when_its_run_is_gone(tmp_path: Path) -> None:
    """The run killed (kill -9 of its process group) while a request is in
    flight: the recorder, in a session of its own, finds its reply pipe closed.
    It ends at once, status 0, with no BrokenPipeError traceback written into
    the killed run's output (its stderr is the run's)."""
    import json
    import os

    env = os.environ | {"PYTHONPATH": dvclock._import_path()}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestration.dvclock", str(tmp_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({"fresh": ["one"]}) + "\n")
    proc.stdin.flush()
    proc.stdout.close()  # the run is gone: nobody reads the reply
    proc.stdin.close()
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 0, err


def test_a_failed_record_leaves_no_file_dvc_was_writing(tmp_path: Path) -> None:
    """DVC names a file it is writing ``.<22 characters>.tmp`` beside its place;
    a record that fails (a full disk) left such files in the workspace
    (metrics/clients, metrics/health: the 420 KiB case of
    tests/e2e/test_disk_full.py), where nothing removed them. The recorder's
    process removes them after any failed record while the run holds the lock;
    the project's own files, fedpipe's ``name.tmp`` included, stay."""
    import json
    import os

    from orchestration.repolock import HOLDER_ENV

    root = _repo(tmp_path / "p")
    (root / "one.txt").unlink()  # the record of stage one fails: no output
    partials = [
        root / "metrics/clients/.Q3RJtkaPtAQrAbCdEfGh-_.tmp",
        root / "metrics/health/.C3JMSOvbQ1Cxiz8m5Oxhjw.tmp",
        root / ".dvc/cache/files/md5/ab/.cdef0123.tmp",
    ]
    kept = [root / "metrics/health/round-1.json", root / "notes/.draft.tmp"]
    for path in partials + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half")
    proc = subprocess.run(
        [sys.executable, "-m", "orchestration.dvclock", str(root)],
        input=json.dumps({"stages": ["one"]}) + "\n",
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, HOLDER_ENV: str(os.getpid())},  # the run holds the lock
        check=True,
    )
    assert "error" in json.loads(proc.stdout)
    assert [p for p in partials if p.exists()] == []
    assert all(p.exists() for p in kept)

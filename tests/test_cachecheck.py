"""Recorded rounds' DVC cache objects against their md5 (observe.cachecheck).

A tiny project on disk: a dvc.yaml with a templated round stage (a cached model, a
``cache: false`` metric), a dvc.lock recording two rounds, the cache as DVC leaves
it. The whole path through DVC and ``fedpipe run`` is tests/e2e/test_damaged_cache.py.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from fedpipe.observe.cachecheck import (
    damaged_objects,
    model_stage,
    remove_damaged,
    uncached,
)

PIPELINE = {
    "stages": {
        "ingest": {"cmd": "x", "outs": ["data/prepared"]},
        "round": {
            "foreach": {1: 0, 2: 1},
            "do": {
                "cmd": "fedpipe stage round ${key}",
                "outs": ["models/round-${key}/weights.npz", "models/round-${key}/c"],
                "metrics": [{"metrics/rounds/round-${key}.json": {"cache": False}}],
            },
        },
    }
}


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _object(root: Path, md5: str) -> Path:
    return root / ".dvc/cache/files/md5" / md5[:2] / md5[2:]


def _cache(root: Path, data: bytes, suffix: str = "") -> str:
    md5 = _md5(data) + suffix
    _object(root, md5).parent.mkdir(parents=True, exist_ok=True)
    _object(root, md5).write_bytes(data)
    return md5


def _project(root: Path) -> Path:
    stages = {"ingest": {"outs": [{"path": "data/prepared", "md5": "ab" * 16}]}}
    for k in (1, 2):
        model = _cache(root, f"w{k}".encode())
        inner = _cache(root, f"state{k}".encode())
        listing = json.dumps([{"md5": inner, "relpath": "0.npz"}]).encode()
        folder = _cache(root, listing, ".dir")
        stages[f"round@{k}"] = {
            "outs": [
                {"path": f"metrics/rounds/round-{k}.json", "md5": _md5(b"m")},
                {"path": f"models/round-{k}/weights.npz", "md5": model},
                {"path": f"models/round-{k}/c", "md5": folder},
            ]
        }
    (root / "dvc.yaml").write_text(yaml.safe_dump(PIPELINE))
    (root / "dvc.lock").write_text(yaml.safe_dump({"stages": stages}))
    return root


def test_a_cache_as_a_run_leaves_it_is_whole(tmp_path: Path) -> None:
    # the metric is not in the cache (cache: false), the data stage not checked
    assert damaged_objects(_project(tmp_path)) == []
    assert uncached(tmp_path) == ["metrics/rounds/round-*.json"]
    assert model_stage("round@3") and model_stage("init")
    assert not model_stage("ingest")


def test_altered_and_deleted_objects_are_named(tmp_path: Path) -> None:
    root = _project(tmp_path)
    altered = _object(root, _md5(b"w1"))
    altered.write_bytes(b"w1 rotten")
    _object(root, _md5(b"state2")).unlink()  # a file inside a directory output
    found = damaged_objects(root)
    assert [(d.stage, d.path, d.problem) for d in found] == [
        ("round@1", "models/round-1/weights.npz", "altered"),
        ("round@2", "models/round-2/c/0.npz", "missing"),
    ]
    assert found[0].actual == _md5(b"w1 rotten")
    assert "round-1/weights.npz (round@1): DVC's cache object" in found[0].text()
    assert found[1].text(stage=False).endswith("missing from DVC's cache")
    remove_damaged(root, found)  # the altered one goes, so DVC rebuilds it
    assert not altered.exists()
    assert [d.problem for d in damaged_objects(root)] == ["missing", "missing"]


def test_no_lock_nothing_to_check(tmp_path: Path) -> None:
    assert damaged_objects(tmp_path) == []


def test_status_calls_an_altered_writable_cache_object_altered(tmp_path: Path) -> None:
    """An object altered in the cache and left writable (mode changed): DVC's own
    status hashes it and deletes it, so fedpipe status, which asked DVC first,
    called it "missing from DVC's cache" before."""
    import subprocess
    import sys

    from fedpipe.observe.status import collect

    dvc = str(Path(sys.executable).with_name("dvc"))
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    write = "open('m.bin', 'w').write('model')"
    stage = {"cmd": f'{sys.executable} -c "{write}"', "outs": ["m.bin"]}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"init": stage}}))
    subprocess.run([dvc, "repro", "-q"], cwd=tmp_path, check=True)
    obj = _object(tmp_path, _md5(b"model"))
    obj.chmod(0o644)
    obj.write_bytes(b"rotten")
    (damaged,) = collect(tmp_path).damaged_cache
    assert damaged.startswith("m.bin (init): ")
    assert f"is altered (its md5 is {_md5(b'rotten')})" in damaged, damaged


def test_an_object_hashed_before_and_altered_since_is_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects hashed once are not hashed again while their stat holds
    (``.dvc/tmp/fedpipe-verified.json``); one altered in place with its mode
    and times put back is hashed again (its ctime moved) and named."""
    import os

    from fedpipe.observe import cachecheck

    monkeypatch.setattr(cachecheck, "SETTLE_S", 0.0)  # the files were just made
    root = _project(tmp_path)
    (root / ".dvc/tmp").mkdir(parents=True)
    assert damaged_objects(root) == []
    kept = json.loads((root / cachecheck.VERIFIED).read_text())
    assert len(kept) == 6  # two models, two listings, two files in them
    hashed: list[Path] = []
    real_md5 = cachecheck._md5
    monkeypatch.setattr(cachecheck, "_md5", lambda p: hashed.append(p) or real_md5(p))
    assert damaged_objects(root) == [] and hashed == []
    obj = _object(root, _md5(b"state1"))
    st = obj.stat()
    obj.write_bytes(b"state!")  # same size
    os.chmod(obj, st.st_mode & 0o777)
    os.utime(obj, ns=(st.st_atime_ns, st.st_mtime_ns))
    found = damaged_objects(root)
    assert [(d.path, d.problem) for d in found] == [
        ("models/round-1/c/0.npz", "altered")
    ]
    assert hashed == [obj]

"""Files replaced whole (fedpipe.core.atomic): a writer killed mid-write, or one
that raises, leaves the file as it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fedpipe.core import atomic
from fedpipe.core.jsonio import read_json, write_json
from fedpipe.core.weights import load_weights, save_weights
from fedpipe.federation.clientstate import load_client_states, save_client_states

ROOT = Path(__file__).resolve().parents[1]
# writes half of the new content, says so, and waits to be killed
HALF_WRITE = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from fedpipe.core import atomic\n"
    "with atomic.writing(Path(sys.argv[1])) as tmp, tmp.open('w') as f:\n"
    "    f.write('new ' * 1000); f.flush()\n"
    "    print('half', flush=True)\n"
    "    time.sleep(60)\n"
    "    f.write('end')\n"
)


def test_a_writer_killed_mid_write_leaves_the_old_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    target.write_text("old\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", HALF_WRITE, str(target)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdout.readline() == "half\n"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert target.read_text() == "old\n"  # a plain write_text would be cut short
    assert atomic.temp_path(target).stat().st_size >= 4000  # the half-written new
    write_json(target, {"a": 1})  # the next writer replaces the leftover
    assert read_json(target) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json"]


def test_a_writer_that_raises_leaves_the_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "w.npz"
    save_weights(target, [np.arange(3.0)])
    with pytest.raises(ZeroDivisionError):
        with atomic.writing(target) as tmp:
            tmp.write_bytes(b"partial")
            _ = 1 / 0
    assert [a.tolist() for a in load_weights(target)] == [[0.0, 1.0, 2.0]]
    assert sorted(p.name for p in target.parent.iterdir()) == ["w.npz"]


@pytest.mark.parametrize("durable", [True, False])
def test_write_text_replaces_the_content(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "a" / "t.txt"
    atomic.write_text(target, "one", durable=durable)
    atomic.write_text(target, "two", durable=durable)
    assert target.read_text() == "two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["t.txt"]


def test_client_state_folder_left_by_a_killed_write_is_replaced(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "clients"
    states = {3: {"scaffold": {"c_i/000": np.ones(2)}}}
    save_client_states(folder, states)
    # what a write killed between its two renames leaves: both leftovers
    (tmp_path / "clients.tmp").mkdir()
    (tmp_path / "clients.tmp" / "client-0009.npz").write_bytes(b"half")
    (tmp_path / "clients.old").mkdir()
    save_client_states(folder, {4: {"scaffold": {"c_i/000": np.zeros(2)}}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clients"]
    loaded = load_client_states(folder)
    assert sorted(loaded) == [4]
    assert loaded[4]["scaffold"]["c_i/000"].tolist() == [0.0, 0.0]


def test_a_write_another_thread_has_under_way_is_discarded(tmp_path: Path) -> None:
    # a process ending on an error raised elsewhere (the dvc.lock recorder's full
    # disk, another thread's) removes the temporary files still being written
    import threading

    target = tmp_path / "metrics" / "round-3.csv"
    started, release = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def writer() -> None:
        try:
            with atomic.writing(target) as tmp:
                tmp.write_text("half")
                started.set()
                release.wait(10)
        except BaseException as exc:  # noqa: BLE001 - looked at below
            failed.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    assert started.wait(10)
    assert atomic.discard_partial() == [atomic.temp_path(target)]
    assert list(target.parent.iterdir()) == []
    release.set()
    thread.join(10)
    assert isinstance(failed[0], FileNotFoundError)  # its rename finds nothing
    assert not target.exists()
    assert atomic.discard_partial() == []  # nothing live any more


def test_a_failed_rename_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "w.json"
    target.write_text("old")

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt  # not an OSError: Ctrl-C during the rename

    monkeypatch.setattr(atomic, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_text(target, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w.json"]
    assert target.read_text() == "old"


def test_a_client_state_write_that_fails_leaves_no_half_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from fedpipe.federation import clientstate

    folder = tmp_path / "clients"
    save_client_states(folder, {3: {"scaffold": {"c_i/000": np.ones(2)}}})
    calls = []

    def full(path: Path, *args: object, **kwargs: object) -> None:
        calls.append(path)
        if len(calls) == 2:  # the second client's file meets a full disk
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        save_state(path, *args, **kwargs)

    save_state = clientstate.save_state
    monkeypatch.setattr(clientstate, "save_state", full)
    states = {c: {"scaffold": {"c_i/000": np.full(2, c)}} for c in (4, 5, 6)}
    with pytest.raises(OSError, match="No space left"):
        save_client_states(folder, states)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clients"]
    assert sorted(load_client_states(folder)) == [3]  # the old folder, whole


def test_unflushed_skips_the_flushes_but_not_an_explicit_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within ``unflushed`` (a round's outputs, which DVC versions) a write that
    does not say ``durable=`` is not flushed; one that says ``durable=True`` is,
    and after the block the default is back."""
    flushed: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: flushed.append(fd) or real_fsync(fd))
    target = tmp_path / "round.json"
    with atomic.unflushed():
        atomic.write_text(target, "one")
        assert flushed == [] and target.read_text() == "one"
        atomic.write_text(target, "two", durable=True)
        assert len(flushed) == 2  # the file's bytes, then its folder's entry
    atomic.write_text(target, "three")
    assert len(flushed) == 4 and target.read_text() == "three"

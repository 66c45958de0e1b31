"""A full disk said in one line (fedpipe.core.diskspace), whoever raised it.

The real full filesystem is in tests/e2e/test_disk_full.py; here the error's
words, its way through the exception chain and fedpipe's atomic writes."""

from __future__ import annotations

import errno
import pickle
from pathlib import Path

import numpy as np
import pytest

from fedpipe.core import atomic
from fedpipe.core.diskspace import DiskFullError, disk_full_in, human_bytes
from fedpipe.core.errors import FedpipeError
from fedpipe_app.exits import exit_code, known_failure


def _full(filename: str | None = None) -> OSError:
    return OSError(errno.ENOSPC, "No space left on device", filename)


def test_the_line_names_the_file_the_free_space_and_the_need(tmp_path: Path) -> None:
    err = DiskFullError(tmp_path / "models/round-2/weights.npz", needed=102_800)
    said = str(err)
    assert said.startswith(f"disk full: no space left writing {tmp_path}/models/")
    assert " free there, about 100.4 KiB needed" in said
    assert "\n" not in said
    assert isinstance(err, FedpipeError) and isinstance(err, OSError)
    assert err.errno == errno.ENOSPC and exit_code(err) == 1
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == said


def test_human_bytes() -> None:
    assert human_bytes(812) == "812 B"
    assert human_bytes(102_800) == "100.4 KiB"
    assert human_bytes(5 * 2**30) == "5.0 GiB"


def test_a_full_disk_wrapped_by_a_library_is_found(tmp_path: Path) -> None:
    try:
        try:
            raise _full(str(tmp_path / "cache" / "obj"))
        except OSError as exc:
            raise RuntimeError("DVC failed to commit") from exc
    except RuntimeError as wrapped:
        found = disk_full_in(wrapped, where=tmp_path)
        said = known_failure(wrapped)
    assert found is not None and found.path == tmp_path / "cache" / "obj"
    assert said is not None and said.startswith("disk full: ")


def test_no_file_named_names_the_project(tmp_path: Path) -> None:
    found = disk_full_in(_full(), where=tmp_path)
    assert found is not None and found.path == tmp_path


@pytest.mark.parametrize("code", [errno.EACCES, errno.EIO])
def test_other_os_errors_are_not_a_full_disk(code: int, tmp_path: Path) -> None:
    assert disk_full_in(OSError(code, "no"), where=tmp_path) is None
    assert known_failure(RuntimeError("a bug")) is None


def test_an_atomic_write_on_a_full_disk_names_its_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(DiskFullError) as caught, atomic.writing(target, size=4096):
        raise _full()
    assert caught.value.path == target and caught.value.needed == 4096
    assert target.read_text() == "old"  # the old file stays whole
    assert not atomic.temp_path(target).exists()


def test_save_weights_says_about_what_it_needed(tmp_path: Path) -> None:
    from fedpipe.core import weights

    arrays = [np.zeros((10, 10), np.float32), np.zeros(10, np.float32)]
    path = tmp_path / "weights.npz"
    weights.save_weights(path, arrays)
    size = path.stat().st_size
    estimate = sum(a.nbytes for a in arrays) + 2 * weights._MEMBER_OVERHEAD
    assert size <= estimate < 2 * size  # "about" what the file takes

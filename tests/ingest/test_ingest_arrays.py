"""Tests for fedpipe.data.ingest.ingest_arrays: in-memory data sets such as MNIST."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedpipe.data.ingest import (
    IngestError,
    ingest_arrays,
    open_features,
    read_samples,
    read_schema,
)

# ---------------------------------------------------------------- helpers


def _digits(n: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """MNIST-like uint8 images (n, 28, 28, 1) and labels 0..9."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (n, 28, 28, 1), dtype=np.uint8)
    return x, np.arange(n) % 10


def _ingest(tmp_path: Path, x: np.ndarray, y: np.ndarray, **kwargs: object):
    settings: dict[str, object] = {
        "source": "mnist5k",
        "class_names": [str(k) for k in range(10)],
        "value_range": (0.0, 255.0),
        "scale": 255.0,
        **kwargs,
    }
    return ingest_arrays(x, y, out_dir=tmp_path / "out", **settings)


# ---------------------------------------------------------------- tests


def test_features_are_stored_unchanged(tmp_path: Path) -> None:
    x, y = _digits()
    _ingest(tmp_path, x, y)
    features = open_features(tmp_path / "out")
    assert features.dtype == np.uint8
    np.testing.assert_array_equal(features, x)


def test_schema(tmp_path: Path) -> None:
    x, y = _digits()
    _ingest(tmp_path, x, y)
    assert read_schema(tmp_path / "out") == {
        "source": "mnist5k",
        "input_shape": [28, 28, 1],
        "dtype": "uint8",
        "value_range": [0.0, 255.0],
        "scale": 255.0,
        "classes": list(range(10)),
        "class_names": [str(k) for k in range(10)],
        "n_samples": 6,
    }


def test_samples(tmp_path: Path) -> None:
    x, y = _digits(3)
    _ingest(tmp_path, x, y)
    samples = read_samples(tmp_path / "out")
    assert samples["sample_id"].tolist() == ["row-1", "row-2", "row-3"]
    assert samples["label"].tolist() == [0, 1, 2]
    assert samples["status"].tolist() == ["ok"] * 3
    assert samples["source"].tolist() == ["mnist5k:1", "mnist5k:2", "mnist5k:3"]


def test_given_sample_ids_are_kept(tmp_path: Path) -> None:
    x, y = _digits(2)
    _ingest(tmp_path, x, y, sample_ids=["mnist-00000", "mnist-00001"])
    ids = read_samples(tmp_path / "out")["sample_id"].tolist()
    assert ids == ["mnist-00000", "mnist-00001"]


def test_float32_features(tmp_path: Path) -> None:
    x = np.array([[0.5, np.nan], [1.0, 2.0]], dtype=np.float32)
    result = _ingest(tmp_path, x, np.array([0, 1]), class_names=["a", "b"], scale=1.0)
    assert result.input_shape == (2,)
    np.testing.assert_array_equal(open_features(tmp_path / "out"), x)


def test_unsupported_dtype_raises(tmp_path: Path) -> None:
    x, y = _digits()
    with pytest.raises(IngestError, match=r"x: dtype int64 not supported; pass uint8"):
        _ingest(tmp_path, x.astype(np.int64), y)


def test_label_count_mismatch_raises(tmp_path: Path) -> None:
    x, y = _digits()
    with pytest.raises(IngestError, match=r"y: shape \(5,\) .* expected 6 integer"):
        _ingest(tmp_path, x, y[:5])


def test_duplicate_sample_ids_raise(tmp_path: Path) -> None:
    x, y = _digits(2)
    with pytest.raises(IngestError, match=r"sample_ids: 'a' appears more than once"):
        _ingest(tmp_path, x, y, sample_ids=["a", "a"])


def test_empty_arrays_raise(tmp_path: Path) -> None:
    x, y = _digits(0)
    with pytest.raises(IngestError, match=r"x: shape \(0, 28, 28, 1\)"):
        _ingest(tmp_path, x, y)


@pytest.mark.parametrize("value_range", [(255.0, 0.0), (0.0, float("inf")), "0-255"])
def test_bad_value_range_raises(tmp_path: Path, value_range: object) -> None:
    x, y = _digits()
    with pytest.raises(IngestError, match=r"value_range: "):
        _ingest(tmp_path, x, y, value_range=value_range)


def test_what_a_killed_writer_left_is_cleared_by_the_next(tmp_path: Path) -> None:
    # a kill mid-ingest leaves its temporary folder; a kill mid-swap the old one
    # (found by scripts/chaos.py); the next ingest of the same folder clears both
    partial = tmp_path / ".out.0badc0de.partial"
    set_aside = tmp_path / ".out.12345678.partial.old"
    for left in (partial, set_aside):
        left.mkdir()
        (left / "features.npy").write_bytes(b"half")
    other = tmp_path / ".elsewhere.0badc0de.partial"  # another folder's: kept
    other.mkdir()
    x, y = _digits()
    _ingest(tmp_path, x, y)
    assert not partial.exists() and not set_aside.exists() and other.exists()
    assert read_schema(tmp_path / "out")["n_samples"] == len(y)

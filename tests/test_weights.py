"""Tests for fedpipe.core.weights: deterministic .npz save and load."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from fedpipe.core.weights import load_weights, save_weights

# ---------------------------------------------------------------- helpers


def _weights() -> list[np.ndarray]:
    """Arrays of several dtypes and shapes, including 0-d and empty ones."""
    rng = np.random.default_rng(0)
    return [
        rng.normal(size=(3, 3, 1, 4)).astype(np.float32),
        rng.normal(size=4).astype(np.float64),
        np.arange(6, dtype=np.int64).reshape(2, 3),
        np.array(7, dtype=np.int32),
        np.array([True, False, True]),
        np.zeros((0, 5), dtype=np.float16),
        np.asfortranarray(rng.normal(size=(2, 5)).astype(np.float32)),
    ]


def _many(n: int) -> list[np.ndarray]:
    return [np.full(2, i, dtype=np.float32) for i in range(n)]


# ---------------------------------------------------------------- tests


def test_round_trip_is_bitwise_and_in_order(tmp_path: Path) -> None:
    weights = _weights()
    path = tmp_path / "model" / "weights.npz"
    save_weights(path, weights)
    loaded = load_weights(path)
    assert len(loaded) == len(weights)
    for got, want in zip(loaded, weights, strict=True):
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert got.tobytes() == np.ascontiguousarray(want).tobytes()


def test_order_survives_more_than_ten_layers(tmp_path: Path) -> None:
    path = tmp_path / "w.npz"
    save_weights(path, _many(23))
    assert [int(a[0]) for a in load_weights(path)] == list(range(23))


def test_zero_dim_array_keeps_its_shape(tmp_path: Path) -> None:
    path = tmp_path / "w.npz"
    save_weights(path, [np.array(2.5, dtype=np.float32)])
    (loaded,) = load_weights(path)
    assert loaded.shape == ()
    assert loaded.dtype == np.float32
    assert float(loaded) == 2.5


def test_memory_layout_does_not_change_bytes(tmp_path: Path) -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    c_path, f_path = tmp_path / "c.npz", tmp_path / "f.npz"
    save_weights(c_path, [array])
    save_weights(f_path, [np.asfortranarray(array)])
    assert c_path.read_bytes() == f_path.read_bytes()


def test_same_weights_give_identical_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    save_weights(first, _weights())
    save_weights(second, _weights())
    assert first.read_bytes() == second.read_bytes()


def test_different_weights_give_different_bytes(tmp_path: Path) -> None:
    changed = _weights()
    changed[0][0, 0, 0, 0] += 1.0
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    save_weights(first, _weights())
    save_weights(second, changed)
    assert first.read_bytes() != second.read_bytes()


def test_file_is_a_valid_npz(tmp_path: Path) -> None:
    path = tmp_path / "w.npz"
    weights = _weights()
    save_weights(path, weights)
    assert zipfile.is_zipfile(path)
    with np.load(path) as archive:
        assert archive.files == [f"w{i:03d}" for i in range(len(weights))]
        np.testing.assert_array_equal(archive["w002"], weights[2])


def test_no_temporary_file_is_left(tmp_path: Path) -> None:
    save_weights(tmp_path / "w.npz", _weights())
    assert [p.name for p in tmp_path.iterdir()] == ["w.npz"]


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "models" / "round-3" / "weights.npz"
    with pytest.raises(FileNotFoundError) as info:
        load_weights(path)
    assert str(path) in str(info.value)

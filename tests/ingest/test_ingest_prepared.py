"""Tests for the prepared format shared by every ingest: block-wise writing,
atomic replacement of out_dir, the readers and row_summaries."""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

import fedpipe.data.ingest.images as images_module
from fedpipe.data.ingest import (
    IngestError,
    ingest_arrays,
    ingest_image_folder,
    open_features,
    read_samples,
    read_schema,
    row_summaries,
)
from fedpipe.data.ingest.prepared import _PreparedWriter

# ---------------------------------------------------------------- helpers


def _floats(n: int = 7, d: int = 3) -> np.ndarray:
    """(n, d) float32 with a NaN in rows 1 and 5 and an all-NaN row 4."""
    x = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)
    x[1, 0] = np.nan
    x[5, 2] = np.nan
    x[4, :] = np.nan
    return x


def _ingest_floats(out: Path, x: np.ndarray) -> None:
    ingest_arrays(
        x,
        np.arange(len(x)) % 2,
        out_dir=out,
        source="test",
        class_names=["a", "b"],
        value_range=(-5.0, 5.0),
        scale=1.0,
    )


def _image_folder(root: Path, n: int = 3) -> Path:
    for i in range(n):
        path = root / "data" / "k" / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (i, 2 * i, 3 * i)).save(path)
    return root / "data"


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _write_directly(out: Path, rows: np.ndarray, block_bytes: int) -> None:
    with _PreparedWriter(
        out,
        n_samples=len(rows),
        input_shape=rows.shape[1:],
        dtype=rows.dtype,
        block_bytes=block_bytes,
    ) as writer:
        writer.append(rows[:3])
        for row in rows[3:]:
            writer.append_row(row)
        writer.commit(
            samples={
                "sample_id": [f"s{i}" for i in range(len(rows))],
                "label": [0] * len(rows),
                "status": ["ok"] * len(rows),
                "source": ["mem"] * len(rows),
            },
            source="test",
            class_names=["a"],
            value_range=(0.0, 255.0),
            scale=255.0,
            started=0.0,
        )


# ---------------------------------------------------------------- writer


def test_writes_across_many_blocks(tmp_path: Path) -> None:
    rows = np.random.default_rng(1).integers(0, 256, (10, 4, 4), dtype=np.uint8)
    _write_directly(tmp_path / "out", rows, block_bytes=3 * 16)  # 3 rows per block
    np.testing.assert_array_equal(open_features(tmp_path / "out"), rows)


def test_hashes_follow_rows_across_blocks(tmp_path: Path) -> None:
    rows = np.random.default_rng(1).integers(0, 256, (10, 4, 4), dtype=np.uint8)
    _write_directly(tmp_path / "out", rows, block_bytes=3 * 16)
    hashes = read_samples(tmp_path / "out")["content_hash"].tolist()
    assert hashes == [hashlib.sha1(r.tobytes()).hexdigest() for r in rows]


def test_append_row_none_writes_zeros(tmp_path: Path) -> None:
    with _PreparedWriter(
        tmp_path / "out", n_samples=2, input_shape=(2,), dtype=np.uint8
    ) as writer:
        writer.append_row(np.array([7, 9], dtype=np.uint8))
        writer.append_row(None)
        writer.commit(
            samples={
                "sample_id": ["a", "b"],
                "label": [0, -1],
                "status": ["ok", "unreadable: x"],
                "source": ["a", "b"],
            },
            source="test",
            class_names=["a"],
            value_range=(0.0, 255.0),
            scale=255.0,
            started=0.0,
        )
    assert open_features(tmp_path / "out").tolist() == [[7, 9], [0, 0]]


def test_schema_json_is_sorted_and_indented(tmp_path: Path) -> None:
    _ingest_floats(tmp_path / "out", _floats())
    text = (tmp_path / "out" / "schema.json").read_text()
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=2) + "\n"


# ---------------------------------------------------------------- atomicity


def test_failing_ingest_leaves_existing_out_dir_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _image_folder(tmp_path)
    out = tmp_path / "out"
    ingest_image_folder(data, out_dir=out, image_size=(4, 4))
    before = _snapshot(out)
    (data / "k" / "3.png").write_bytes((data / "k" / "0.png").read_bytes())

    decode = images_module._decode
    calls = []

    def fail_on_third(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("disk full")
        return decode(*args, **kwargs)

    monkeypatch.setattr(images_module, "_decode", fail_on_third)
    with pytest.raises(RuntimeError, match="disk full"):
        ingest_image_folder(data, out_dir=out, image_size=(6, 6))
    assert _snapshot(out) == before


def test_failing_ingest_leaves_no_temporary_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _image_folder(tmp_path)

    def fail(*args: object, **kwargs: object) -> object:
        raise RuntimeError("interrupted")

    monkeypatch.setattr(images_module, "_decode", fail)
    with pytest.raises(RuntimeError):
        ingest_image_folder(data, out_dir=tmp_path / "out", image_size=(4, 4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_successful_ingest_replaces_out_dir_completely(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("from an older layout")
    ingest_image_folder(_image_folder(tmp_path), out_dir=out, image_size=(4, 4))
    assert sorted(p.name for p in out.iterdir()) == [
        "features.npy",
        "samples.parquet",
        "schema.json",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]


def test_out_dir_that_is_a_file_raises(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("not a directory")
    with pytest.raises(IngestError, match=r"out_dir: .* is not a directory"):
        _ingest_floats(tmp_path / "out", _floats())


# ---------------------------------------------------------------- readers


def test_readers_on_a_missing_directory_raise(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"schema\.json: not found"):
        read_schema(tmp_path / "nothing")


def test_open_features_is_a_read_only_memmap(tmp_path: Path) -> None:
    _ingest_floats(tmp_path / "out", _floats())
    features = open_features(tmp_path / "out")
    assert isinstance(features, np.memmap)
    assert not features.flags.writeable


def test_row_summaries_over_three_chunks_equal_direct_computation(
    tmp_path: Path,
) -> None:
    x = _floats(n=7)
    _ingest_floats(tmp_path / "out", x)
    summary = row_summaries(tmp_path / "out", chunk_rows=3)  # 3 + 3 + 1 rows
    with warnings.catch_warnings():  # nanmin/nanmax warn on the all-NaN row
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = pd.DataFrame(
            {
                "feature_min": np.nanmin(x, axis=1).astype(np.float64),
                "feature_max": np.nanmax(x, axis=1).astype(np.float64),
                "feature_nan_count": np.isnan(x).sum(axis=1).astype(np.int64),
            }
        )
    pd.testing.assert_frame_equal(summary[list(expected.columns)], expected)
    assert summary["feature_nan_count"].tolist() == [0, 1, 0, 0, 3, 1, 0]


def test_row_summaries_columns(tmp_path: Path) -> None:
    _ingest_floats(tmp_path / "out", _floats())
    assert list(row_summaries(tmp_path / "out").columns) == [
        "sample_id",
        "feature_min",
        "feature_max",
        "feature_nan_count",
        "label",
        "content_hash",
        "status",
        "source",
    ]


def test_row_summaries_of_uint8_images(tmp_path: Path) -> None:
    ingest_image_folder(
        _image_folder(tmp_path), out_dir=tmp_path / "out", image_size=(4, 4)
    )
    summary = row_summaries(tmp_path / "out", chunk_rows=2)
    assert summary["feature_min"].tolist() == [0.0, 1.0, 2.0]
    assert summary["feature_max"].tolist() == [0.0, 3.0, 6.0]
    assert summary["feature_nan_count"].tolist() == [0, 0, 0]

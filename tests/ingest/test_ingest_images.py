"""Tests for fedpipe.data.ingest.ingest_image_folder: good folders and the bad-input
corpus (truncated, non-image, empty class, empty folder, missing path, ...)."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedpipe.data.ingest import (
    IngestError,
    ingest_image_folder,
    open_features,
    read_samples,
    read_schema,
)

SIZE = (16, 12)  # height, width after resizing

# ---------------------------------------------------------------- helpers


def _pixels(height: int, width: int, channels: int, seed: int) -> np.ndarray:
    shape = (height, width) if channels == 1 else (height, width, channels)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _save(path: Path, image: Image.Image, fmt: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, format=fmt)
    return path


def _image(height: int, width: int, mode: str, seed: int = 0) -> Image.Image:
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    return Image.fromarray(_pixels(height, width, channels, seed), mode=mode)


def _good_folder(root: Path) -> Path:
    """2 classes, 5 images: png/jpg/bmp, sizes 20x30 and 40x40, one L, one RGBA."""
    data = root / "data"
    _save(data / "with_mask" / "a.png", _image(20, 30, "RGB", 1))
    _save(data / "with_mask" / "b.jpg", _image(40, 40, "RGB", 2))
    _save(data / "with_mask" / "c.bmp", _image(20, 30, "L", 3))
    _save(data / "without_mask" / "d.png", _image(40, 40, "RGBA", 4))
    _save(data / "without_mask" / "e.bmp", _image(40, 40, "RGB", 5))
    return data


def _ingest(data: Path, out: Path, **kwargs: object):
    return ingest_image_folder(data, out_dir=out, image_size=SIZE, **kwargs)


def _truncated_png(path: Path) -> Path:
    buffer = io.BytesIO()
    _image(40, 40, "RGB", 9).save(buffer, format="PNG")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue()[:300])
    return path


def _by_id(out: Path) -> dict[str, dict]:
    return {r["sample_id"]: r for r in read_samples(out).to_dict("records")}


# ---------------------------------------------------------------- good folder


def test_good_folder_features_shape_and_dtype(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out")
    features = open_features(tmp_path / "out")
    assert features.shape == (5, 16, 12, 3)
    assert features.dtype == np.uint8


def test_good_folder_schema(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out")
    assert read_schema(tmp_path / "out") == {
        "source": "images",
        "input_shape": [16, 12, 3],
        "dtype": "uint8",
        "value_range": [0.0, 255.0],
        "scale": 255.0,
        "classes": [0, 1],
        "class_names": ["with_mask", "without_mask"],
        "n_samples": 5,
    }


def test_good_folder_sample_ids_and_labels_in_sorted_order(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out")
    samples = read_samples(tmp_path / "out")
    assert samples["sample_id"].tolist() == [
        "with_mask/a.png",
        "with_mask/b.jpg",
        "with_mask/c.bmp",
        "without_mask/d.png",
        "without_mask/e.bmp",
    ]
    assert samples["label"].tolist() == [0, 0, 0, 1, 1]


def test_good_folder_result(tmp_path: Path) -> None:
    result = _ingest(_good_folder(tmp_path), tmp_path / "out")
    assert result.out_dir == tmp_path / "out"
    assert result.n_samples == 5
    assert result.n_problems == 0
    assert result.input_shape == (16, 12, 3)
    assert result.class_names == ("with_mask", "without_mask")
    assert result.seconds > 0


def test_good_folder_statuses_ok(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out")
    assert read_samples(tmp_path / "out")["status"].tolist() == ["ok"] * 5


def test_good_folder_records_original_sizes(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out")
    samples = read_samples(tmp_path / "out")
    assert samples["orig_height"].tolist() == [20, 40, 20, 40, 40]
    assert samples["orig_width"].tolist() == [30, 40, 30, 40, 40]
    assert samples["orig_channels"].tolist() == [3, 3, 1, 4, 3]


def test_samples_columns_and_types(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out")
    samples = read_samples(tmp_path / "out")
    assert list(samples.columns) == [
        "sample_id",
        "label",
        "content_hash",
        "status",
        "source",
        "orig_height",
        "orig_width",
        "orig_channels",
    ]
    assert samples["label"].dtype == np.int64
    assert samples["orig_height"].dtype == np.int64


def test_source_is_the_file_path(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    _ingest(data, tmp_path / "out")
    source = read_samples(tmp_path / "out")["source"].tolist()
    assert source[0] == str(data / "with_mask" / "a.png")


def test_out_dir_holds_exactly_the_three_files(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["features.npy", "samples.parquet", "schema.json"]


def test_two_ingests_are_byte_identical(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    _ingest(data, tmp_path / "one")
    _ingest(data, tmp_path / "two")
    for name in ("features.npy", "samples.parquet", "schema.json"):
        one = (tmp_path / "one" / name).read_bytes()
        assert one == (tmp_path / "two" / name).read_bytes(), name


def test_pixels_are_bilinear_resize_of_converted_image(tmp_path: Path) -> None:
    image = _image(40, 40, "RGBA", 7)
    _save(tmp_path / "data" / "k" / "x.png", image)
    _ingest(tmp_path / "data", tmp_path / "out")
    expected = np.asarray(
        image.convert("RGB").resize((12, 16), Image.Resampling.BILINEAR)
    )
    np.testing.assert_array_equal(open_features(tmp_path / "out")[0], expected)


def test_grayscale_mode_stores_one_channel(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out", color_mode="grayscale")
    assert open_features(tmp_path / "out").shape == (5, 16, 12, 1)
    assert read_schema(tmp_path / "out")["input_shape"] == [16, 12, 1]


@pytest.mark.parametrize(
    ("mode", "channels"), [("L", 1), ("LA", 2), ("RGB", 3), ("RGBA", 4), ("P", 3)]
)
def test_original_channels_follow_the_file_mode(
    tmp_path: Path, mode: str, channels: int
) -> None:
    image = _image(10, 10, "RGB", 0).convert(mode)
    _save(tmp_path / "data" / "k" / "x.png", image)
    _ingest(tmp_path / "data", tmp_path / "out")
    assert read_samples(tmp_path / "out")["orig_channels"].tolist() == [channels]


def test_content_hash_is_sha1_of_the_stored_row(tmp_path: Path) -> None:
    _ingest(_good_folder(tmp_path), tmp_path / "out")
    features = open_features(tmp_path / "out")
    hashes = read_samples(tmp_path / "out")["content_hash"].tolist()
    assert hashes == [hashlib.sha1(row.tobytes()).hexdigest() for row in features]


def test_duplicate_content_gets_the_same_hash(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    copy = data / "without_mask" / "f.png"
    copy.write_bytes((data / "with_mask" / "a.png").read_bytes())
    _ingest(data, tmp_path / "out")
    rows = _by_id(tmp_path / "out")
    assert (
        rows["without_mask/f.png"]["content_hash"]
        == (rows["with_mask/a.png"]["content_hash"])
    )


def test_mixed_image_shapes_ingest_to_one_shape(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _save(data / "k" / "tall.png", _image(60, 10, "RGB"))
    _save(data / "k" / "wide.png", _image(10, 60, "RGB"))
    result = _ingest(data, tmp_path / "out")
    samples = read_samples(tmp_path / "out")
    assert result.n_problems == 0
    assert open_features(tmp_path / "out").shape == (2, 16, 12, 3)
    assert samples["orig_height"].tolist() == [60, 10]
    assert samples["orig_width"].tolist() == [10, 60]


def test_hidden_entries_and_nested_folders_are_ignored(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    _save(data / ".cache" / "x.png", _image(10, 10, "RGB"))
    _save(data / "with_mask" / ".hidden.png", _image(10, 10, "RGB"))
    _save(data / "with_mask" / "nested" / "y.png", _image(10, 10, "RGB"))
    (data / "README.txt").write_text("top-level files are not samples")
    result = _ingest(data, tmp_path / "out")
    assert result.n_samples == 5
    assert result.class_names == ("with_mask", "without_mask")


# ---------------------------------------------------------------- OS metadata


def _with_os_metadata(data: Path) -> Path:
    """Windows and macOS leftovers at the top level and inside class folders."""
    (data / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (data / "desktop.ini").write_text("[.ShellClassInfo]\n")
    (data / "with_mask" / "Thumbs.db").write_bytes(b"\xd0\xcf\x11\xe0")
    (data / "with_mask" / "desktop.ini").write_text("[ViewState]\n")
    (data / "without_mask" / "._d.png").write_bytes(b"\x00\x05\x16\x07")
    (data / "without_mask" / ".DS_Store").write_bytes(b"Bud1")
    (data / "__MACOSX" / "with_mask").mkdir(parents=True)
    (data / "__MACOSX" / "with_mask" / "._a.png").write_bytes(b"\x00\x05\x16\x07")
    return data


def test_os_metadata_files_are_skipped(tmp_path: Path) -> None:
    data = _with_os_metadata(_good_folder(tmp_path))
    result = _ingest(data, tmp_path / "out")
    assert result.class_names == ("with_mask", "without_mask")
    assert result.n_samples == 5
    assert result.n_problems == 0
    assert "__MACOSX" not in str(read_samples(tmp_path / "out")["sample_id"].tolist())


def test_os_metadata_files_are_listed_as_skipped(tmp_path: Path) -> None:
    data = _with_os_metadata(_good_folder(tmp_path))
    assert _ingest(data, tmp_path / "out").skipped == (
        ".DS_Store",
        "__MACOSX/",
        "desktop.ini",
        "with_mask/Thumbs.db",
        "with_mask/desktop.ini",
        "without_mask/.DS_Store",
        "without_mask/._d.png",
    )


def test_os_metadata_names_ignore_case(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    (data / "with_mask" / "THUMBS.DB").write_bytes(b"\xd0\xcf")
    (data / "with_mask" / "Desktop.ini").write_text("x")
    result = _ingest(data, tmp_path / "out")
    assert (result.n_samples, len(result.skipped)) == (5, 2)


def test_only_macosx_folder_is_not_a_class(tmp_path: Path) -> None:
    (tmp_path / "data" / "__MACOSX" / "cat").mkdir(parents=True)
    _save(tmp_path / "data" / "__MACOSX" / "cat" / "a.png", _image(4, 4, "RGB"))
    with pytest.raises(IngestError, match=r"no class subfolders .*__MACOSX"):
        _ingest(tmp_path / "data", tmp_path / "out")


def test_skipped_files_are_recorded_in_the_schema(tmp_path: Path) -> None:
    data = _with_os_metadata(_good_folder(tmp_path))
    result = _ingest(data, tmp_path / "out")
    assert read_schema(tmp_path / "out")["skipped"] == list(result.skipped)


def test_good_folders_skip_nothing(tmp_path: Path) -> None:
    assert _ingest(_good_folder(tmp_path), tmp_path / "out").skipped == ()
    assert "skipped" not in read_schema(tmp_path / "out")


def test_non_image_next_to_os_metadata_still_fails_by_path(tmp_path: Path) -> None:
    data = _with_os_metadata(_good_folder(tmp_path))
    (data / "with_mask" / "notes.txt").write_text("not an image\n")
    result = _ingest(data, tmp_path / "out")
    assert result.n_problems == 1
    row = _by_id(tmp_path / "out")["with_mask/notes.txt"]
    assert row["status"] == "unreadable: cannot identify image file"
    assert row["source"] == str(data / "with_mask" / "notes.txt")


# ---------------------------------------------------------------- data.classes


def test_data_classes_orders_the_folders(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    result = _ingest(data, tmp_path / "out", classes=["without_mask", "with_mask"])
    assert result.class_names == ("without_mask", "with_mask")
    labels = {k: v["label"] for k, v in _by_id(tmp_path / "out").items()}
    assert labels["with_mask/a.png"] == 1 and labels["without_mask/d.png"] == 0


def test_data_classes_may_declare_a_class_without_folder(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    classes = ["with_mask", "without_mask", "mask_worn_badly"]
    result = _ingest(data, tmp_path / "out", classes=classes)
    assert result.class_names == tuple(classes)
    assert read_schema(tmp_path / "out")["classes"] == [0, 1, 2]


def test_folder_not_in_data_classes_raises_with_allowed(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    with pytest.raises(
        IngestError,
        match=r"data\.classes: .* class folders 'without_mask' not in data\.classes; "
        r"allowed: 'with_mask', 'mask'",
    ):
        _ingest(data, tmp_path / "out", classes=["with_mask", "mask"])


# ---------------------------------------------------------------- bad samples


def test_truncated_png_is_unreadable_and_named_by_path(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    _truncated_png(data / "with_mask" / "broken.png")
    result = _ingest(data, tmp_path / "out")
    rows = _by_id(tmp_path / "out")
    assert result.n_problems == 1
    assert rows["with_mask/broken.png"]["status"] == (
        "unreadable: image file is truncated"
    )
    assert [r["status"] for k, r in rows.items() if k != "with_mask/broken.png"] == [
        "ok"
    ] * 5


def test_unreadable_row_is_zeros_with_zero_original_size(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    _truncated_png(data / "with_mask" / "broken.png")
    _ingest(data, tmp_path / "out")
    samples = read_samples(tmp_path / "out")
    i = samples.index[samples["sample_id"] == "with_mask/broken.png"][0]
    assert not open_features(tmp_path / "out")[i].any()
    assert samples.loc[i, ["orig_height", "orig_width", "orig_channels"]].tolist() == [
        0,
        0,
        0,
    ]


def test_text_file_in_class_folder_is_unreadable(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    (data / "without_mask" / "notes.txt").write_text("not an image\n")
    result = _ingest(data, tmp_path / "out")
    assert result.n_problems == 1
    assert _by_id(tmp_path / "out")["without_mask/notes.txt"]["status"] == (
        "unreadable: cannot identify image file"
    )


def test_empty_file_is_unreadable(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    (data / "with_mask" / "empty.jpg").write_bytes(b"")
    _ingest(data, tmp_path / "out")
    assert _by_id(tmp_path / "out")["with_mask/empty.jpg"]["status"] == (
        "unreadable: empty file"
    )


def test_empty_class_folder_is_a_declared_class_without_samples(
    tmp_path: Path,
) -> None:
    data = _good_folder(tmp_path)
    (data / "mask_incorrect").mkdir()
    result = _ingest(data, tmp_path / "out")
    assert result.class_names == ("mask_incorrect", "with_mask", "without_mask")
    assert read_schema(tmp_path / "out")["classes"] == [0, 1, 2]
    assert read_samples(tmp_path / "out")["label"].tolist() == [1, 1, 1, 2, 2]


# ---------------------------------------------------------------- bad folders


def test_empty_folder_raises_naming_data_path(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    with pytest.raises(IngestError, match=r"data\.path: .* has no class subfolders"):
        _ingest(tmp_path / "data", tmp_path / "out")


def test_class_folders_without_files_raise(tmp_path: Path) -> None:
    (tmp_path / "data" / "a").mkdir(parents=True)
    (tmp_path / "data" / "b").mkdir()
    with pytest.raises(IngestError, match=r"data\.path: .*\(a, b\) but no files"):
        _ingest(tmp_path / "data", tmp_path / "out")


def test_missing_path_raises(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"data\.path: .*nope does not exist"):
        _ingest(tmp_path / "nope", tmp_path / "out")


def test_path_that_is_a_file_raises(tmp_path: Path) -> None:
    (tmp_path / "data.zip").write_bytes(b"PK")
    with pytest.raises(IngestError, match=r"data\.path: .* is not a directory"):
        _ingest(tmp_path / "data.zip", tmp_path / "out")


def test_failed_listing_writes_nothing(tmp_path: Path) -> None:
    with pytest.raises(IngestError):
        _ingest(tmp_path / "nope", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_out_dir_inside_data_folder_raises(tmp_path: Path) -> None:
    data = _good_folder(tmp_path)
    with pytest.raises(IngestError, match=r"out_dir: .* is inside data\.path"):
        _ingest(data, data / "prepared")


# ---------------------------------------------------------------- bad parameters


def test_unknown_color_mode_raises_with_allowed_values(tmp_path: Path) -> None:
    with pytest.raises(
        IngestError, match=r"data\.color_mode: unknown 'RGB'; allowed: grayscale, rgb"
    ):
        _ingest(_good_folder(tmp_path), tmp_path / "out", color_mode="RGB")


@pytest.mark.parametrize("size", [(0, 10), (10,), "100", (10.5, 10), (True, 3)])
def test_bad_image_size_raises(tmp_path: Path, size: object) -> None:
    with pytest.raises(IngestError, match=r"data\.image_size: .*\[height, width\]"):
        ingest_image_folder(
            _good_folder(tmp_path), out_dir=tmp_path / "out", image_size=size
        )

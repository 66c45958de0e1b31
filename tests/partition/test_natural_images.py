"""Natural partitions of image folders: clients from a folder level or a mapping."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedpipe.config.params import Params, round_chain
from fedpipe.data.ingest import IngestError, ingest_image_folder, read_samples
from fedpipe.data.partition import PartitionError
from fedpipe.data.partition.deal import partition_table

WRITERS = ("w01", "w02", "w03")
CLASSES = ("0", "1")
PER_CELL = 6  # images per writer and class


def _writer_folder(root: Path) -> Path:
    """``root/data/<writer>/<class>/img-<i>.png``: 3 writers x 2 classes x 6."""
    data = root / "data"
    rng = np.random.default_rng(0)
    for writer in WRITERS:
        for label in CLASSES:
            folder = data / writer / label
            folder.mkdir(parents=True)
            for i in range(PER_CELL):
                pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
                Image.fromarray(pixels, mode="L").save(folder / f"img-{i}.png")
    return data


@pytest.fixture
def prepared(tmp_path: Path) -> Path:
    out = tmp_path / "prepared"
    ingest_image_folder(
        _writer_folder(tmp_path),
        out_dir=out,
        image_size=(8, 8),
        color_mode="grayscale",
        class_level=1,
    )
    return out


def _partition(prepared: Path, n_clients: int = 3, **settings: object) -> dict:
    return partition_table(
        read_samples(prepared),
        classes=[0, 1],
        seed=7,
        test_fraction=0.2,
        method="natural",
        n_clients=n_clients,
        local_test_fraction=0.25,
        dedupe=True,
        settings={"min_samples": 1, "min_classes": 1, **settings},
    )


def _client_writers(manifest: dict) -> list[set[str]]:
    return [
        {s.split("/")[0] for s in c["train"] + c["test"]} for c in manifest["clients"]
    ]


def test_class_level_reads_the_classes_below_the_writers(prepared: Path) -> None:
    samples = read_samples(prepared)
    assert len(samples) == len(WRITERS) * len(CLASSES) * PER_CELL
    assert samples["sample_id"].iloc[0] == "w01/0/img-0.png"
    labels = dict(zip(samples["sample_id"], samples["label"], strict=True))
    assert labels["w02/1/img-3.png"] == 1
    assert labels["w03/0/img-5.png"] == 0


def test_default_class_level_ignores_the_nested_layout(tmp_path: Path) -> None:
    # the writers' folders are read as class folders holding no files
    with pytest.raises(IngestError, match="no files in them"):
        ingest_image_folder(
            _writer_folder(tmp_path), out_dir=tmp_path / "p", image_size=(8, 8)
        )


def test_level_zero_gives_one_client_per_writer(prepared: Path) -> None:
    manifest = _partition(prepared, natural_level=0)
    assert manifest["client_keys"] == list(WRITERS)
    assert _client_writers(manifest) == [{w} for w in WRITERS]
    assert manifest["params"]["natural_level"] == 0
    assert "natural_mapping" not in manifest["params"]
    dealt = [s for c in manifest["clients"] for s in c["train"] + c["test"]]
    everything = sorted(dealt + manifest["heldout"])
    assert everything == sorted(read_samples(prepared)["sample_id"])


def test_same_settings_give_the_same_manifest(prepared: Path) -> None:
    first = json.dumps(_partition(prepared, natural_level=0), sort_keys=True)
    assert json.dumps(_partition(prepared, natural_level=0), sort_keys=True) == first


def test_level_one_is_the_class_folder(prepared: Path) -> None:
    manifest = _partition(prepared, n_clients=2, natural_level=1)
    assert manifest["client_keys"] == list(CLASSES)


def test_level_deeper_than_the_tree_names_a_sample_and_the_levels(
    prepared: Path,
) -> None:
    with pytest.raises(PartitionError) as info:
        _partition(prepared, natural_level=2)
    message = str(info.value)
    assert message.startswith("partition.natural_level=2 is deeper than the folder")
    assert "'w01/0/img-0.png' has 2 folder level(s)" in message
    assert "allowed levels: 0..1" in message


def _mapping(tmp_path: Path, rows: list[tuple[str, str]]) -> Path:
    path = tmp_path / "writers.csv"
    path.write_text("path,client\n" + "".join(f"{p},{c}\n" for p, c in rows))
    return path


def _all_ids(prepared: Path) -> list[str]:
    return read_samples(prepared)["sample_id"].tolist()


def test_mapping_file_names_the_clients_and_is_hashed_in_the_manifest(
    prepared: Path, tmp_path: Path
) -> None:
    # two clients across the folders: image i of every folder goes to a or b
    rows = [(i, "a" if int(i[-5]) % 2 else "b") for i in _all_ids(prepared)]
    path = _mapping(tmp_path, rows)
    manifest = _partition(prepared, n_clients=2, natural_mapping=str(path))
    assert manifest["client_keys"] == ["a", "b"]
    odd = {s[-5] for s in manifest["clients"][0]["train"]}
    assert odd <= {"1", "3", "5"}
    params = manifest["params"]
    assert params["natural_mapping"] == str(path)
    assert len(params["natural_mapping_sha256"]) == 64
    path.write_text(
        path.read_text().replace(",a\n", ",b\n", 1).replace(",b\n", ",a\n", 1)
    )
    again = _partition(prepared, n_clients=2, natural_mapping=str(path))
    assert again["params"]["natural_mapping_sha256"] != params["natural_mapping_sha256"]


def test_mapping_naming_missing_images_names_the_file_and_first_paths(
    prepared: Path, tmp_path: Path
) -> None:
    rows = [(i, "a") for i in _all_ids(prepared)]
    rows += [(f"w09/0/gone-{k}.png", "b") for k in range(5)]
    path = _mapping(tmp_path, rows)
    with pytest.raises(PartitionError) as info:
        _partition(prepared, n_clients=2, natural_mapping=str(path))
    message = str(info.value)
    assert message.startswith("partition.natural_mapping: 5 path(s) name no image")
    assert "'w09/0/gone-0.png', 'w09/0/gone-1.png', 'w09/0/gone-2.png', ..." in message
    assert "'w01/0/img-0.png'" in message  # what a path looks like


def test_image_without_a_client_is_named(prepared: Path, tmp_path: Path) -> None:
    ids = _all_ids(prepared)
    path = _mapping(tmp_path, [(i, "a") for i in ids if i != "w02/1/img-4.png"])
    with pytest.raises(PartitionError) as info:
        _partition(prepared, n_clients=1, natural_mapping=str(path))
    assert str(info.value) == (
        "partition.natural_mapping: 1 image(s) have no client (first: "
        "'w02/1/img-4.png'); add a path,client row for each"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("file,writer\nx.png,a\n", "the header is file,writer; expected the columns"),
        ("path,client\nw01/0/img-0.png,\n", "row 2: the client is empty"),
        (
            "path,client\n./w01/0/img-0.png,a\nw01/0/img-0.png,b\n",
            "row 3: 'w01/0/img-0.png' is given client 'b' but an earlier row",
        ),
        ("path,client\n", "has no rows"),
    ],
)
def test_malformed_mapping_names_the_file_and_row(
    prepared: Path, tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "m.csv"
    path.write_text(text)
    with pytest.raises(PartitionError) as info:
        _partition(prepared, n_clients=1, natural_mapping=str(path))
    assert str(info.value).startswith(f"partition.natural_mapping: {path}")
    assert expected in str(info.value)


def test_missing_mapping_file(prepared: Path, tmp_path: Path) -> None:
    with pytest.raises(PartitionError, match="m.csv does not exist"):
        _partition(prepared, natural_mapping=str(tmp_path / "m.csv"))


def test_mapping_and_level_together_are_refused(prepared: Path) -> None:
    with pytest.raises(PartitionError, match="are both set"):
        _partition(prepared, natural_mapping="m.csv", natural_level=0)


def test_params_accept_an_image_natural_partition_and_refuse_one_without_keys() -> None:
    base = {
        "data": {"source": "images", "path": "data/images", "class_level": 1},
        "round_chain": round_chain(10),
    }
    params = Params.model_validate(
        {**base, "partition": {"method": "natural", "natural_level": 0}}
    )
    assert params.partition.settings()["natural_level"] == 0
    with pytest.raises(ValueError, match="natural needs each sample's client"):
        Params.model_validate({**base, "partition": {"method": "natural"}})
    with pytest.raises(ValueError, match="natural_level"):
        Params.model_validate(
            {**base, "partition": {"method": "natural", "natural_level": -1}}
        )
